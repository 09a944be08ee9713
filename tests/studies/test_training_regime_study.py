"""The training-regime study's decision rules (studies/training_regime/): the pilot's choice,
the power plan's bound, the confirmatory run's sequential rule, and its configs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from studies.training_regime import summarize as S
from studies.training_regime.run_study import FIRST_ERROR_SETUPS
from studies.training_regime.setups import SETUPS, _first, run_config, run_dir


def _table(gains: dict[str, tuple[float, ...]], seeds=range(8), cost=None, noise=0.0):
    """Runs of grpo and the oracle arms per setup: grpo online 0.5, each oracle arm 0.5 plus
    its gain, alternating +-noise by seed. Gains: (oracle, oracle-sr) and, on a long setup,
    (oracle-first, oracle-first-sr) after them; left out there, the first-error arms run
    0.05 below grpo."""
    rows = []
    for setup, setup_gains in gains.items():
        arms = ["oracle", "oracle-sr"]
        if setup in FIRST_ERROR_SETUPS:
            arms += ["oracle-first", "oracle-first-sr"]
            setup_gains = (*setup_gains, -0.05, -0.05)[:4]
        for s in seeds:
            e = noise if s % 2 else -noise
            for arm, g in (("grpo", 0.0), *zip(arms, setup_gains, strict=True)):
                rows.append({"regime": setup, "arm": arm, "seed": s, "online": 0.5 + g + e * (
                    arm != "grpo"), "final": 0.5, "step_seconds": (cost or {}).get(setup, 1.0),
                    "credit_seconds": 0.0})
    return pd.DataFrame(rows)


SETS = ("long", "long-g4", "long-hard", "unique-g4")


def test_pilot_choice_takes_the_cheapest_candidate_over_the_bar():
    t = _table({"long": (0.05, 0.0), "long-g4": (0.0, 0.04), "long-hard": (0.08, 0.0),
                "unique-g4": (0.01, 0.0)}, noise=0.004,
               cost={"long": 5.0, "long-g4": 4.0, "long-hard": 6.0, "unique-g4": 1.0})
    choice = S.pilot_choice(t, SETS)
    assert choice["ranking"] == ["long-g4", "long", "long-hard", "unique-g4"]
    assert choice["chosen"] == "long-g4" and choice["form"] == "segment-rewards"
    assert choice["passed"]


def test_pilot_choice_without_a_candidate_over_the_bar_takes_the_largest_gain():
    t = _table({"long": (0.01, 0.0), "long-g4": (0.0, 0.02), "long-hard": (0.015, 0.0),
                "unique-g4": (0.005, 0.0)}, noise=0.004)
    choice = S.pilot_choice(t, SETS)
    assert choice["ranking"][:2] == ["long-g4", "long-hard"]
    # Neither passes in stage 2: the one with the larger stage-2 gain is kept, not passed.
    assert choice["chosen"] == "long-g4" and not choice["passed"]


def test_pilot_choice_waits_for_stage1_and_uses_only_stage2_seeds_for_the_gain():
    t = _table({s: (0.05, 0.0) for s in SETS}, seeds=range(2))
    assert S.pilot_choice(t[t.regime != "long"], SETS)["complete"] is False
    choice = S.pilot_choice(t, SETS)
    assert choice["complete"] and choice["chosen"] is None and choice["stage2"] == {}
    # Stage 2 whose gain falls below the bar: not passed, although stage 1 scored +0.05.
    t2 = _table({"long": (0.05, 0.0)}, seeds=range(2)).assign(regime="long")
    late = _table({"long": (0.01, 0.0)}, seeds=range(2, 8), noise=0.002)
    full = pd.concat([t[t.regime != "long"], t2, late])
    choice = S.pilot_choice(full, SETS)
    assert choice["stage2"]["long"]["reweight"]["gain"] == pytest.approx(0.01)
    assert not choice["passed"]


def test_pilot_choice_takes_each_long_setups_better_oracle_span():
    """Amendment 3: a long candidate's score is its best oracle arm's stage-1 gain, its span
    that arm's (rest on a tie); stage 2 is judged in that span; unique-g4 has only `rest`."""
    t = _table({"long": (0.0, 0.01, 0.02, 0.06), "long-g4": (0.04, 0.0, 0.04, 0.0),
                "long-hard": (0.0, 0.0, 0.01, 0.0), "unique-g4": (0.0, 0.0)}, noise=0.004,
               cost={"long": 3.0, "long-g4": 4.0})
    choice = S.pilot_choice(t, SETS)
    assert choice["span"] == {"long": "first", "long-g4": "rest", "long-hard": "first",
                              "unique-g4": "rest"}
    assert choice["stage1_scores"]["long"] == pytest.approx(0.06)
    assert choice["stage1_span_scores"]["long"] == pytest.approx({"rest": 0.01, "first": 0.06})
    assert choice["ranking"][:2] == ["long", "long-g4"]
    assert choice["stage2"]["long"]["segment-rewards"]["gain"] == pytest.approx(0.06)
    assert (choice["chosen"], choice["form"], choice["oracle_arm"]) == (
        "long", "segment-rewards", "oracle-first-sr")
    plan = S.power_plan(t, "long", "segment-rewards", span="first")
    assert plan["oracle_arm"] == "oracle-first-sr" and plan["delta"] == pytest.approx(0.03)
    # A long candidate without its first-error runs: stage 1 is not complete.
    assert not S.pilot_choice(t[t.arm != "oracle-first"], SETS)["complete"]


def test_the_pilot_runs_the_first_error_oracle_on_the_long_setups(tmp_path, monkeypatch):
    """`run_study pilot` would run oracle-first and oracle-first-sr in stage 1 of the long
    setups only, and stage 2 in the span stage 1 chose (nothing is trained here)."""
    from studies.training_regime import run_study

    plans = []
    monkeypatch.setattr(run_study, "run_plan", lambda out, phase, todo, steps, split:
                        plans.append(todo))
    monkeypatch.setattr(run_study, "start_accuracy", lambda out, setup: {"accuracy": 0.5})
    monkeypatch.setattr(S, "runs_table", lambda out, phase, steps: None)
    monkeypatch.setattr(S, "pilot_choice", lambda table: {
        "stage2_order": ["long"], "span": {"long": "first"}, "passed": True})
    run_study.pilot(tmp_path, 150)
    stage1, stage2 = plans
    arms = {(setup, arm) for setup, _, arm in stage1}
    for setup in SETS:
        first = {(setup, "oracle-first"), (setup, "oracle-first-sr")}
        assert first <= arms if setup != "unique-g4" else not first & arms
        assert {(setup, "grpo"), (setup, "oracle"), (setup, "oracle-sr")} <= arms
    assert len(stage1) == 2 * (3 * 5 + 3) and [s for _, s, _ in stage1[:18]] == [0] * 18
    assert stage2 == [("long", seed, a) for seed in range(2, 8)
                      for a in ("grpo", "oracle-first", "oracle-first-sr")]


def test_first_error_arms_configure_the_oracle_span(tmp_path):
    from cotcredit.training.config import load_config

    for arm, advantage in (("oracle-first", "oracle"), ("oracle-first-sr", "oracle"),
                           ("shuffled-first-sr", "shuffled"), ("oracle", "oracle")):
        cfg = load_config(run_config(tmp_path, "p", SETUPS["long"], arm, 0, 150))
        assert (cfg.advantage, cfg.oracle.regime) == (advantage, "long")
        assert cfg.oracle.span == ("rest" if arm == "oracle" else "first")
        assert cfg.credit.form == ("segment-rewards" if arm.endswith("-sr") else "reweight")
        assert advantage != "shuffled" or cfg.credit.shuffled == "oracle"


def test_main_summary_compares_with_the_first_error_controls():
    """A main study on the first-error oracle: every arm is compared with oracle-first and
    shuffled-first (its own controls), under the columns the rest oracle's would have."""
    rows = [{"regime": "long", "arm": arm, "seed": s, "online": 0.5 + g + 0.001 * s * (
        arm == "rredcot"), "final": 0.5, "step_seconds": 1.0, "credit_seconds": 0.0}
            for s in range(4) for arm, g in (("grpo", 0.0), ("oracle-first", 0.04),
                                              ("shuffled-first", -0.01), ("rredcot", 0.01))]
    table = pd.DataFrame(rows)
    assert S.control_span(table.arm) == "first"
    assert S.control_span([*table.arm, "oracle"]) == "first"  # more first-error runs
    assert S.control_span([*table.arm, *["oracle"] * 4, *["shuffled-sr"] * 4]) == "rest"  # tie
    row = next(r for r in S.summary_rows(table) if r["arm"] == "rredcot")
    assert row["online_vs_shuffled"] == pytest.approx(0.02 + 0.0015)
    assert row["online_vs_oracle"] == pytest.approx(-0.03 + 0.0015)
    assert row["online_vs_shuffled_n"] == 4 and math.isfinite(row["recovered"])


def test_sd_upper_bound_is_the_chi_square_bound():
    from scipy import stats

    assert S.sd_upper(0.01, 8) == pytest.approx(0.01 * math.sqrt(7 / stats.chi2.ppf(0.05, 7)))
    assert S.sd_upper(0.01, 8) > S.sd_upper(0.01, 30) > 0.01


def test_power_plan_uses_half_the_stage2_gain_and_the_upper_sd():
    t = _table({"long": (0.04, 0.0)}, noise=0.01)
    plan = S.power_plan(t, "long", "reweight")
    assert plan["delta"] == pytest.approx(0.02)
    assert plan["sd_upper"] > plan["sd"] and plan["seeds"] >= plan["seeds_at_sd"]


def test_rule_power_grows_with_the_effect():
    assert S.rule_power(10, 0.0, 0.01, draws=4000) < 0.02
    assert S.rule_power(10, 0.03, 0.01, draws=4000) > 0.95


def _confirm(diffs):
    rows = []
    for i, d in enumerate(diffs):
        rows.append({"regime": "unique", "arm": "grpo", "seed": 1000 + i, "online": 0.5})
        rows.append({"regime": "unique", "arm": "rredcot-earlier", "seed": 1000 + i,
                     "online": 0.5 + d})
    return pd.DataFrame(rows)


def test_confirm_rule_interim_and_final():
    assert S.confirm_decision(_confirm([0.01] * 10))["continue"]
    stop = S.confirm_decision(_confirm([-0.01, 0.005] * 8))
    assert not stop["continue"] and stop["verdict"].startswith("not confirmed (futility")
    win = S.confirm_decision(_confirm([0.02, 0.021] * 8))
    assert win["verdict"] == "confirmed at the interim look"
    go_on = S.confirm_decision(_confirm([0.02, -0.005] * 8))
    assert go_on["continue"] and go_on["verdict"] is None
    final = S.confirm_decision(_confirm([0.02, -0.005] * 16))
    assert final["seeds"] == 32 and final["verdict"] == "confirmed"
    assert S.confirm_decision(_confirm([0.02, -0.01] * 16))["verdict"] == "not confirmed"
    # A gap in the seed order: only the seeds before it count.
    gap = _confirm([0.01] * 20)
    assert S.confirm_decision(gap[gap.seed != 1003])["seeds"] == 3


def test_hard_problems_have_the_minimum_steps():
    from cotcredit.bench.regimes import get_regime

    problems = _first(get_regime("long"), "dev", 20, 32)
    assert len(problems) == 20 and all(len(p.meta["steps"]) >= 32 for p in problems)
    assert [p.id for p in problems] == sorted({p.id for p in problems}, key=[
        p.id for p in get_regime("long").problems("dev", 500)].index)


def test_unique_setup_is_the_earlier_study_config(tmp_path):
    from studies.training.run_study import run_config as earlier_config

    for arm in ("grpo", "rredcot"):
        mine = yaml.safe_load(run_config(tmp_path, "p", SETUPS["unique"], arm, 3, 150).read_text())
        old = yaml.safe_load(earlier_config(tmp_path, "q", "unique", arm, 3, 150).read_text())
        for cfg in (mine, old):
            for key in ("model", "train_file", "output_dir"):
                cfg.pop(key)
            cfg["credit"].setdefault("form", "reweight")
        assert mine == old
    long_g4 = yaml.safe_load(run_config(tmp_path, "p", SETUPS["long-g4"], "mc-sr", 0,
                                        150).read_text())
    assert long_g4["grpo"]["num_generations"] == 4
    assert long_g4["grpo"]["per_device_train_batch_size"] == 16
    assert long_g4["grpo"]["max_completion_length"] == 384
    assert long_g4["credit"]["form"] == "segment-rewards" and long_g4["mc"]["rollouts"] >= 1


def _fake_run(root, setup, arm, seed, rewards, per_problem, samples=4, steps=150,
              reproduces=True, redo=True, phase="pilot", split="dev"):
    """A run folder as the runner leaves it: metrics.jsonl, the final checkpoint's
    trainer_state.json (when it reached `steps`), heldout_dev.json and its per-problem redo."""
    run = root / "runs" / phase / setup / f"{arm}-seed{seed}"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i + 1, "reward": r, "step_seconds": 1.0}) + "\n"
        for i, r in enumerate(rewards)))
    if len(rewards) >= steps:
        (run / f"checkpoint-{steps}").mkdir()
        (run / f"checkpoint-{steps}" / "trainer_state.json").write_text("{}")
        correct = int(sum(per_problem))
        n = len(per_problem) * samples
        held = {"split": split, "checkpoint": f"checkpoint-{steps}", "accuracy": correct / n,
                "correct": correct, "completions": n, "problems": len(per_problem)}
        (run / f"heldout_{split}.json").write_text(json.dumps(held))
        if redo:
            (run / "heldout_dev_problems.json").write_text(json.dumps(
                {**held, "per_problem": [int(c) for c in per_problem],
                 "reproduces": reproduces}))
    return run


def _pilot_folder(tmp_path):
    import numpy as np

    rng = np.random.default_rng(1)
    runs = {}
    for setup, seed in (("long", 0), ("long-g4", 0)):
        for arm in ("grpo", "oracle", "oracle-sr"):
            rewards = rng.integers(0, 17, 150) / 16
            problems = rng.integers(0, 5, 30)
            runs[setup, arm] = (rewards, problems)
            _fake_run(tmp_path, setup, arm, seed, rewards, problems,
                      reproduces=(setup, arm) != ("long-g4", "oracle-sr"))
    _fake_run(tmp_path, "long-hard", "grpo", 0, rng.integers(0, 17, 113) / 16, [])
    (tmp_path / "runs" / "start").mkdir(parents=True)
    (tmp_path / "runs" / "start" / "long.json").write_text(json.dumps({"accuracy": 0.679}))
    return runs


def test_interim_table_equals_the_direct_differences(tmp_path):
    """The interim pilot table's oracle − grpo, online and dev, equals the difference computed
    straight from the runs' files; its intervals are the paired bootstrap of those units."""
    from cotcredit.report.bootstrap import mean_interval as bootstrap_interval
    from studies.training_regime import interim

    runs = _pilot_folder(tmp_path)
    table = S.runs_table(tmp_path, "pilot", 150)
    units = interim.units_table(tmp_path, "pilot", 150)
    rows = {r["setup"]: r for r in interim.interim_rows(table, units, S.FORMS)}
    assert set(rows) == {"long", "long-g4"}  # long-hard stopped early
    for setup, row in rows.items():
        for form, arm in S.FORMS.items():
            (ra, pa), (rg, pg) = runs[setup, arm], runs[setup, "grpo"]
            online = ra[75:].mean() - rg[75:].mean()
            assert row[f"online_{form}"] == pytest.approx(online, abs=1e-12)
            dev = (pa.sum() - pg.sum()) / (4 * len(pa))
            assert row[f"final_{form}"] == pytest.approx(dev, abs=1e-12)
            assert (row[f"online_{form}_low"], row[f"online_{form}_high"]) == pytest.approx(
                bootstrap_interval(ra[75:] - rg[75:], 10_000, 0)[1:])
            assert row[f"online_{form}_units"] == 75
            if (setup, arm) == ("long-g4", "oracle-sr"):  # its redo differs from the stored
                assert math.isnan(row[f"final_{form}_low"])
                continue
            lo, hi = row[f"final_{form}_low"], row[f"final_{form}_high"]
            assert (lo, hi) == pytest.approx(bootstrap_interval((pa - pg) / 4, 10_000, 0)[1:])
            assert lo <= dev <= hi and row[f"final_{form}_units"] == 30
    # The partial run: its reward so far, over steps 1-10 and 76-113.
    [part] = interim.partial_runs(tmp_path, "pilot", 150)
    metrics = tmp_path / "runs" / "pilot" / "long-hard" / "grpo-seed0" / "metrics.jsonl"
    rewards = [json.loads(line)["reward"] for line in metrics.read_text().splitlines()]
    assert part["steps"] == 113
    assert part["first_steps"] == pytest.approx(sum(rewards[:10]) / 10)
    assert part["online"] == pytest.approx(sum(rewards[75:]) / len(rewards[75:]))


def test_pilot_summary_before_stage1_completes(tmp_path):
    _pilot_folder(tmp_path)
    S.summarize(tmp_path, "pilot", steps=150)
    text = (tmp_path / "pilot_summary.md").read_text()
    assert text.startswith("## Interim: stage 1 incomplete, nothing chosen")
    assert "(no interval)" in text and "Stopped early: long-hard grpo seed 0 at step 113" in text
    units = pd.read_csv(tmp_path / "pilot_units.csv.gz")
    assert len(units) == 6 * 75 + 5 * 30  # one run's redo is left out
    assert not json.loads((tmp_path / "pilot_choice.json").read_text())["complete"]


def test_problem_outcomes_redo_and_check(tmp_path, monkeypatch):
    """`run_study outcomes` redoes each stored evaluation once, keeps each problem's count and
    says whether the total is the stored one."""
    import studies.training.run_study as earlier
    from studies.training_regime import run_study

    _fake_run(tmp_path, "long", "grpo", 0, [0.5] * 150, [1, 2], redo=False)
    _fake_run(tmp_path, "long", "oracle", 0, [0.5] * 150, [3, 4], redo=False)
    calls = []

    def fake(model_dir, problems_file, seed, max_new_tokens, samples=4, by_problem=False):
        calls.append((model_dir.parent.name, seed, max_new_tokens, by_problem))
        return {"accuracy": 3 / 8, "correct": 3, "completions": 8, "problems": 2,
                "per_problem": [1, 2]}

    monkeypatch.setattr(earlier, "sampled_accuracy", fake)
    monkeypatch.setattr(run_study, "problem_files", lambda setup, data: {"dev": data / "dev"})
    run_study.problem_outcomes(tmp_path, "pilot")
    run_study.problem_outcomes(tmp_path, "pilot")  # done once only
    assert calls == [("grpo-seed0", 0, 384, True), ("oracle-seed0", 0, 384, True)]
    pilot = tmp_path / "runs" / "pilot" / "long"
    grpo = json.loads((pilot / "grpo-seed0" / "heldout_dev_problems.json").read_text())
    oracle = json.loads((pilot / "oracle-seed0" / "heldout_dev_problems.json").read_text())
    assert grpo["reproduces"] and grpo["per_problem"] == [1, 2]
    assert not oracle["reproduces"]


def test_processes_sharing_a_plan_run_each_run_once(tmp_path, monkeypatch):
    """Two workers on one plan (threads here; the lock holds a process id, so a run held by a
    live process is left to it): every run trains once, and each worker returns only when the
    whole plan is finished."""
    import threading

    from studies.training_regime import run_study

    todo = [("long", seed, arm) for seed in (0, 1) for arm in ("grpo", "oracle", "oracle-sr")]
    calls, lock = [], threading.Lock()

    def fake_run_one(out, phase, setup, arm, seed, steps, split, tag):
        run = run_dir(out, phase, setup.name, arm, seed)
        if not (run / f"heldout_{split}.json").is_file():
            with lock:
                calls.append((setup.name, seed, arm))
            time.sleep(0.05)
            run.mkdir(parents=True, exist_ok=True)
            (run / f"heldout_{split}.json").write_text("{}")
        return {}

    monkeypatch.setattr(run_study, "run_one", fake_run_one)
    returned = []
    workers = [threading.Thread(target=lambda: (run_study.run_plan(
        tmp_path, "pilot", todo, 150, "dev", wait=0.01), returned.append(True)))
        for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(calls) == sorted(todo) and returned == [True, True]
    assert not list(tmp_path.rglob("*.lock*"))  # every lock given back


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path):
    from studies.training_regime import run_study

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    run = tmp_path / "pilot" / "long" / "grpo-seed0"
    run.parent.mkdir(parents=True)
    (run.parent / "grpo-seed0.lock").write_text(dead.stdout.strip())
    assert run_study.claim(run)
    assert (run.parent / "grpo-seed0.lock").read_text() == str(os.getpid())
    # Held by a live process (this one, seen from a second claim): not taken.
    assert not run_study.claim(run)
    run_study.release(run)
    assert not (run.parent / "grpo-seed0.lock").exists()


def test_the_pilot_table_says_what_stage_1_chose_and_what_is_pending(tmp_path):
    t = _table({"long": (0.01, 0.0), "long-g4": (0.0, 0.02), "long-hard": (0.015, 0.0),
                "unique-g4": (0.005, 0.0)}, seeds=range(2), noise=0.004)
    text = S.pilot_markdown(t, {})
    assert "Ranking: long-g4, long-hard, long, unique-g4." in text
    assert "Stage 2 (seeds 2-7) runs on long-g4 (and on long-hard" in text
    assert "Chosen" not in text
    full = _table({"long": (0.01, 0.0), "long-g4": (0.0, 0.02), "long-hard": (0.015, 0.0),
                   "unique-g4": (0.005, 0.0)}, noise=0.004)
    assert "Chosen: long-g4 (oracle-sr, segment-rewards); bar of +0.03 with the interval " \
        "above 0 not met." in S.pilot_markdown(full, {})


# -- the group-sequential plan (protocol step 2's fallback) -----------------------------------

def test_obf_boundaries_equal_gsdesign_published_values():
    """Lan-DeMets O'Brien-Fleming, two-sided 0.05, equally spaced looks: gsDesign's sfLDOF
    boundaries (Jennison and Turnbull's tables agree to the third decimal)."""
    from studies.training_regime.sequential import obf_boundaries

    assert obf_boundaries(1) == pytest.approx([1.960], abs=1e-3)
    assert obf_boundaries(2) == pytest.approx([2.963, 1.969], abs=1e-3)
    assert obf_boundaries(4) == pytest.approx([4.333, 2.963, 2.359, 2.014], abs=1e-3)
    assert obf_boundaries(5) == pytest.approx([4.877, 3.357, 2.680, 2.290, 2.031], abs=1e-3)


def test_sequential_plan_spends_alpha_and_reaches_its_power():
    """The integrated type I error (efficacy bounds alone: the futility bound is non-binding)
    is 0.05; z statistics simulated with a known SD cross the bounds as often as the
    integration says, at the null and at the drift (with futility stops); beta spending
    makes the bounds meet at the last look; the smallest plan is the smallest whose simulated
    power (t-tests) reaches 0.8."""
    import numpy as np

    from studies.training_regime.sequential import design, simulate, smallest_design

    plan = design(0.02, 0.04, 8, 40)
    assert plan["alpha_normal"] == pytest.approx(0.05, abs=1e-4)
    assert plan["looks"] == [8, 16, 24, 32, 40]
    assert plan["futility_z"][-1] == plan["z"][-1]
    assert all(a < c for a, c in zip(plan["futility_z"][:-1], plan["z"][:-1]))
    rng = np.random.default_rng(1)
    for mean in (0.0, 0.02):
        x = rng.normal(mean, 0.04, size=(40000, 40))
        live, up = np.ones(len(x), bool), np.zeros(len(x), bool)
        for n, c, a in zip(plan["looks"], plan["z"], plan["futility_z"]):
            z = x[:, :n].mean(axis=1) / (0.04 / np.sqrt(n))  # known SD: the z scale
            if mean == 0.0:
                up |= live & (np.abs(z) >= c)
                live &= np.abs(z) < c
            else:
                up |= live & (z >= c)
                live &= (z < c) & (z > a)
        key = "alpha_normal" if mean == 0.0 else "power_normal"
        assert up.mean() == pytest.approx(plan[key], abs=0.006)
    # t-tests at eight seeds a look keep the level close to 0.05 without the futility stop
    assert simulate(plan, 0.02, 0.04, futility=False)["alpha"] == pytest.approx(0.05, abs=0.01)
    assert plan["alpha"] < 0.05 and plan["expected_seeds"] < 40
    best = smallest_design(0.02, 0.04, 8)
    assert best["power"] >= 0.8
    if best["looks"][-1] > 16:
        assert design(0.02, 0.04, 8, best["looks"][-1] - 8)["power"] < 0.8


def test_sequential_look_verdicts():
    from studies.training_regime.sequential import design, look

    plan = design(0.02, 0.04, 4, 12)
    first = look([0.05, 0.02, 0.0, 0.03], plan, 0)
    assert first["verdict"] == "continue" and first["futility_z"] < first["z"] < first["z_bound"]
    assert look([-0.05, -0.06, -0.02, -0.07], plan, 0)["verdict"] in ("futility", "harm")
    assert look([-0.03, 0.01, -0.02, -0.01], plan, 0)["verdict"] == (
        "futility" if plan["futility_z"][0] > -1.2 else "continue")
    many = [0.05 + 0.001 * i for i in range(12)]
    assert look(many, plan, 2)["verdict"] == "efficacy"
    assert look([-v for v in many], plan, 2)["verdict"] == "harm"
    assert look([0.01, -0.01] * 6, plan, 2)["verdict"] == "not significant"
    with pytest.raises(ValueError, match="reads 8 seeds"):
        look([0.1] * 7, plan, 1)


def _main_table(plan, gains: dict[str, float], seeds: int, sd: float = 0.01, seed: int = 0):
    """A runs table for the plan's first `seeds` seeds: grpo online 0.6 plus noise, each role
    `gains[role]` above it (its own noise)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = []
    for s in plan["seeds"][:seeds]:
        base = 0.6 + rng.normal(0, sd)
        for role, arm in plan["roles"].items():
            rows.append({"regime": plan["setup"], "arm": arm, "seed": s,
                         "online": base + gains.get(role, 0.0) + rng.normal(0, sd)})
    return pd.DataFrame(rows, columns=["regime", "arm", "seed", "online"])


def test_main_plan_roles_and_progress_by_look():
    """Runs go look by look; a clear source stops at its first efficacy look, a source with
    no effect runs to the end, `cheap` follows the first-phase sources, and the default rule
    needs efficacy against grpo and against shuffled."""
    from studies.training_regime.main_plan import make_plan, progress
    from studies.training_regime.sequential import design

    plan = make_plan("long-g4", "first", "segment-rewards", design(0.02, 0.04, 4, 12))
    assert plan["roles"]["oracle"] == "oracle-first-sr"
    assert plan["roles"]["shuffled"] == "shuffled-first-sr"
    assert plan["roles"]["rredcot"] == "rredcot-sr" and plan["seeds"][:2] == [100, 101]
    start = progress(_main_table(plan, {}, 0), plan)
    assert start["next_seeds"] == [100, 101, 102, 103] and not start["done"]
    assert set(start["next_arms"]) == {"grpo", "oracle-first-sr", "shuffled-first-sr",
                                       "rredcot-sr", "mc-sr"}
    gains = {"oracle": 0.1, "rredcot": 0.1, "mc": 0.003, "cheap": 0.1}
    no_cheap = lambda t: t[t.arm != "cheap-sr"]  # noqa: E731  (cheap runs last)
    mid = progress(no_cheap(_main_table(plan, gains, 8)), plan)
    assert mid["state"]["rredcot"] == "efficacy"  # p far below look 2's level
    assert mid["state"]["mc"] == "live" and mid["next_seeds"] == plan["seeds"][:12]
    assert "rredcot-sr" not in mid["next_arms"] and mid["default"]["rredcot"]["qualifies"]
    end = progress(no_cheap(_main_table(plan, gains, 12)), plan)
    assert end["state"]["mc"] in ("not significant", "futility")
    assert end["next_arms"][-1] == "cheap-sr" and end["next_seeds"] == plan["seeds"][:4]
    assert not end["done"] and end["comparisons"]["oracle"][0]["verdict"] in ("continue",
                                                                              "efficacy")
    over = progress(_main_table(plan, gains, 12), plan)
    assert over["state"]["cheap"] == "efficacy" and over["done"]


def test_main_plan_oracle_futility_stops_the_sources():
    from studies.training_regime.main_plan import make_plan, progress
    from studies.training_regime.sequential import design

    plan = make_plan("long-g4", "rest", "reweight", design(0.02, 0.04, 4, 12))
    table = _main_table(plan, {"oracle": -0.05, "rredcot": 0.05}, 4)
    state = progress(table, plan)
    assert state["state"]["oracle"] == "futility"
    assert state["state"]["rredcot"] == "continue" or state["state"]["rredcot"].startswith(
        "stopped with the oracle")
    assert state["done"] and state["next_seeds"] == []


def test_main_summary_shows_each_look(tmp_path):
    """`summary main` puts the plan's decisions above the tables and writes main_looks.json."""
    from studies.training_regime.main_plan import looks_markdown, make_plan, write_progress
    from studies.training_regime.sequential import design

    plan = make_plan("long-g4", "first", "reweight", design(0.02, 0.04, 4, 12))
    table = _main_table(plan, {"oracle": 0.1, "rredcot": 0.1}, 8)
    table = table[table.arm != "cheap"]
    state = write_progress(tmp_path, table, plan)
    assert json.loads((tmp_path / "main_looks.json").read_text())["state"] == state["state"]
    text = looks_markdown(state, plan)
    assert "| rredcot − grpo | efficacy |" in text and "| cheap − grpo | live | – |" in text
    assert "Default rule" in text and "rredcot" in text.split("Default rule")[1]


def test_main_summary_tables_read_the_newest_looks_seeds():
    """After a look, the summary's tables read that look's seeds only: a later seed's finished
    runs (here grpo and the oracle of the next seed) would average arms over other seeds."""
    from studies.training_regime.main_plan import look_table, make_plan, progress
    from studies.training_regime.sequential import design

    plan = make_plan("long-g4", "first", "reweight", design(0.02, 0.04, 4, 12))
    before = _main_table(plan, {}, 3)
    kept, line = look_table(before, progress(before, plan), plan)
    assert kept is before and line == ""  # no look yet: every run
    table = _main_table(plan, {"oracle": 0.01}, 5)
    table = table[(table.arm != "cheap") & ((table.seed < 104) | table.arm.isin(
        ["grpo", "oracle-first"]))]
    state = progress(table, plan)
    assert state["comparisons"]["oracle"][-1]["seeds"] == 4
    kept, line = look_table(table, state, plan)
    assert sorted(set(kept.seed)) == [100, 101, 102, 103]
    assert kept.equals(table[table.seed < 104])
    assert line.startswith("The tables below read seeds 100-103") and "2 finished runs" in line


def test_a_recorded_run_whose_folder_is_gone_is_read_from_its_row(tmp_path):
    """Amendment 5: `runs_table` reads a finished run from the tracked `<phase>_runs.csv` when
    its folder is not here, a folder's own numbers win over its row, and a row of a run cut
    short (fewer steps, no held-out accuracy) does not count as finished."""
    _fake_run(tmp_path, "long", "grpo", 0, [0.25] * 150, [1, 2])
    here = S.runs_table(tmp_path, "pilot", 150)
    rows = [{**here.iloc[0].to_dict(), "online": 0.9},  # stale row of a run that is here
            {**here.iloc[0].to_dict(), "arm": "oracle", "online": 0.75, "final": 0.5},
            {**here.iloc[0].to_dict(), "arm": "oracle-sr", "steps": 100, "final": math.nan},
            {**here.iloc[0].to_dict(), "seed": 1, "final": 0.125}]
    pd.DataFrame(rows).to_csv(tmp_path / "pilot_runs.csv", index=False)
    table = S.runs_table(tmp_path, "pilot", 150)
    got = {(r.arm, r.seed): (r.online, r.final) for r in table.itertuples()}
    assert got == {("grpo", 0): (0.25, here.final[0]), ("oracle", 0): (0.75, 0.5),
                   ("grpo", 1): (0.25, 0.125)}
    assert list(table.arm) == ["grpo", "grpo", "oracle"] and list(table.seed) == [0, 1, 0]


def test_a_run_not_yet_evaluated_is_not_finished(tmp_path):
    """A run trained to its last step whose held-out evaluation has not been written is not a
    row of `runs_table` (nor of the `<phase>_runs.csv` written from it) until it is: the
    published tables then recompute from their rows alone, whenever they were written."""
    _fake_run(tmp_path, "long", "grpo", 0, [0.25] * 150, [1, 2])
    evaluating = _fake_run(tmp_path, "long", "oracle", 0, [0.5] * 150, [1, 2])
    (evaluating / "heldout_dev.json").unlink()
    assert (evaluating / "checkpoint-150" / "trainer_state.json").is_file()
    table = S.runs_table(tmp_path, "pilot", 150)
    assert list(zip(table.arm, table.seed)) == [("grpo", 0)]
    table.to_csv(tmp_path / "pilot_runs.csv", index=False)
    assert S.recorded_runs(tmp_path, "pilot", 150).equals(table)


def test_the_runner_does_not_train_a_recorded_run_again(tmp_path, monkeypatch):
    """`run_plan` leaves out the runs `<phase>_runs.csv` records whose folders are gone and
    trains the rest; a recorded run whose folder is here is read from the folder as before."""
    from studies.training_regime import run_study

    pd.DataFrame([{"regime": "long", "arm": a, "seed": s, "steps": 150, "online": 0.5,
                   "final": 0.5} for a, s in (("grpo", 0), ("oracle", 0), ("oracle", 1))]
                 ).to_csv(tmp_path / "pilot_runs.csv", index=False)
    (run_dir(tmp_path, "pilot", "long", "oracle", 1)).mkdir(parents=True)
    calls = []
    monkeypatch.setattr(run_study, "run_one", lambda out, phase, setup, arm, seed, *a: (
        calls.append((arm, seed)), run_dir(out, phase, setup.name, arm, seed).mkdir(
            parents=True, exist_ok=True)))
    todo = [("long", s, a) for s in (0, 1) for a in ("grpo", "oracle")]
    run_study.run_plan(tmp_path, "pilot", todo, 150, "dev", wait=0.01)
    assert calls == [("grpo", 1), ("oracle", 1)]


def test_reproduce_compares_a_run_trained_again_with_its_row(tmp_path, monkeypatch):
    """`reproduce` trains the recorded run again in `<out>/runs/reproduce` and writes whether its
    online reward, first steps and held-out accuracy equal the row's."""
    from studies.training_regime import run_study
    from studies.training_regime.reproduce import reproduce

    rewards = [0.5] * 75 + [0.75] * 75
    pd.DataFrame([{"regime": "unique", "arm": "grpo", "seed": 1000, "steps": 150,
                   "online": 0.75, "first_steps": 0.5, "final": 0.5, "step_seconds": 2.0}]
                 ).to_csv(tmp_path / "confirm_runs.csv", index=False)

    def train_again(out, phase, setup, arm, seed, steps, split, tag):  # or resume it
        if not run_dir(out, phase, setup.name, arm, seed).is_dir():
            _fake_run(out, setup.name, arm, seed, rewards, [1, 3], phase=phase, split=split)

    monkeypatch.setattr(run_study, "run_one", train_again)
    result = reproduce(tmp_path, "confirm", "grpo", 1000, 150)
    assert result["equal"] and result["again"] == {"online": 0.75, "first_steps": 0.5,
                                                   "final": 0.5}
    assert json.loads((tmp_path / "confirm_reproduce.json").read_text()) == result
    rows = pd.read_csv(tmp_path / "confirm_runs.csv").assign(final=0.625)
    rows.to_csv(tmp_path / "confirm_runs.csv", index=False)
    assert not reproduce(tmp_path, "confirm", "grpo", 1000, 150)["equal"]
    with pytest.raises(SystemExit, match="no finished unique grpo seed 7"):
        reproduce(tmp_path, "confirm", "grpo", 7, 150)
    with pytest.raises(SystemExit, match="not pilot"):
        reproduce(tmp_path, "pilot", "grpo", 1000, 150)


@pytest.mark.parametrize("phase", ["pilot", "main", "confirm"])
def test_the_published_tables_recompute_from_the_tracked_runs(tmp_path, phase):
    """The tracked `<phase>_summary.csv|md` (and the main study's looks, the pilot's choice) are
    what `summary` writes from the tracked `<phase>_runs.csv` alone (amendment 5: runs known by
    their rows; the pilot's start accuracies from `pilot_start.json`), byte for byte: the tables
    are checkable without the runs' folders."""
    import shutil

    from studies.training_regime import run_study

    study = run_study.HERE
    inputs = {"main": ["main_plan.json"], "pilot": ["pilot_start.json"]}.get(phase, [])
    for name in [f"{phase}_runs.csv"] + inputs:
        shutil.copy(study / name, tmp_path / name)
    run_study.main(["summary", phase, "--out", str(tmp_path)])
    written = [f"{phase}_runs.csv", f"{phase}_summary.csv", f"{phase}_summary.md"]
    written += {"main": ["main_looks.json"], "pilot": ["pilot_choice.json", "pilot_start.json"]
                }.get(phase, [])
    for name in written:
        assert (tmp_path / name).read_bytes() == (study / name).read_bytes(), name


def test_repeated_intervals_invert_each_look_and_cover_over_all_looks():
    """A look's repeated confidence interval holds the means its own test would not reject
    (at an end the shifted t statistic sits on the boundary), and over every look of a
    design together the intervals cover the true mean in about 1 - alpha of simulated studies
    (t statistics, unknown SD), where the unadjusted 95% t-intervals do not."""
    import numpy as np
    from scipy import stats

    from studies.training_regime.sequential import design, look, repeated_interval, t_to_z

    plan = design(0.02, 0.04, 8, 40)
    rng = np.random.default_rng(3)
    d = rng.normal(0.02, 0.04, 16)
    low, high = repeated_interval(d, plan["z"][1])
    sd = d.std(ddof=1)
    for end in (low, high):
        assert abs(float(t_to_z(d.mean() - end, sd, 16))) == pytest.approx(plan["z"][1])
    assert look(d, plan, 1)["rci_low"] == low and look(d, plan, 1)["rci_high"] == high
    assert repeated_interval(d[:8], 12.0) == (-1.0, 1.0)  # clipped to a reward difference
    x = rng.normal(0.01, 0.04, size=(4000, 40))
    covered, naive = np.ones(len(x), bool), np.ones(len(x), bool)
    for n, c in zip(plan["looks"], plan["z"]):
        for i, row in enumerate(x):
            lo, hi = repeated_interval(row[:n], c)
            covered[i] &= lo <= 0.01 <= hi
        m, s = x[:, :n].mean(axis=1), x[:, :n].std(axis=1, ddof=1) / np.sqrt(n)
        q = stats.t.isf(0.025, n - 1)
        naive &= (m - q * s <= 0.01) & (0.01 <= m + q * s)
    assert covered.mean() == pytest.approx(0.95, abs=0.015)
    assert naive.mean() < 0.92


def test_the_main_study_runs_only_on_its_pinned_training_code(tmp_path, monkeypatch):
    """`pinned.differs` is empty for a checkout whose `src` is the commit's, and names the
    reason for a changed or an untracked file or a missing commit; `run_study main` stops with
    it before reading the plan."""
    from studies.training_regime import pinned, run_study

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "README").write_text("outside src\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pinned")
    commit = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    assert pinned.differs(src, commit) == ""
    (tmp_path / "README").write_text("a change outside src counts for nothing\n")
    assert pinned.differs(src, commit) == ""
    (src / "pkg" / "b.py").write_text("y = 2\n")
    assert "1 file(s), e.g. src/pkg/b.py" in pinned.differs(src, commit)
    (src / "pkg" / "b.py").unlink()
    (src / "pkg" / "a.py").write_text("x = 2\n")
    assert "e.g. src/pkg/a.py" in pinned.differs(src, commit)
    assert "has commit 0000000" in pinned.differs(src, "0000000")
    monkeypatch.setattr(pinned, "package_source", lambda: src)
    monkeypatch.setattr(pinned, "TRAINING_CODE", commit)
    with pytest.raises(SystemExit, match="not amendment 4's training code: .*src/pkg/a.py"):
        run_study.main_study(tmp_path, 150)


def test_the_docs_print_each_looks_tables_as_the_tracked_runs_give_them():
    """Every look read so far has its tables in docs/training/credit.md as `look_docs_tables`
    computes them from the tracked rows and looks: the unadjusted table of the look's seeds and
    (from look 2, when the repeated intervals came in) the decisions. A look's paragraph is
    written by pasting `look_docs_tables`' output; this catches a figure copied wrong."""
    import pandas as pd

    from studies.training_regime import run_study
    from studies.training_regime.main_plan import look_docs_tables

    study = run_study.HERE
    plan = json.loads((study / "main_plan.json").read_text())
    state = json.loads((study / "main_looks.json").read_text())
    table = pd.read_csv(study / "main_runs.csv")
    docs = (study.parent.parent / "docs" / "training" / "credit.md").read_text()
    looks = sorted({r["look"] for rs in state["comparisons"].values() for r in rs})
    assert looks, "no look read yet"
    for k in looks:
        decisions, described = look_docs_tables(table, state, plan, k).split("\n\n")
        assert f"**Look {k} (" in docs
        assert described.strip() in docs, f"look {k}'s unadjusted table"
        if k >= 2:
            assert decisions in docs, f"look {k}'s decisions"
    with pytest.raises(ValueError, match="no comparison has read look"):
        look_docs_tables(table, state, plan, looks[-1] + 1)
