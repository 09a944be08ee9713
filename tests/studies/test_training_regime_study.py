"""The training-regime study (studies/training_regime/): the pilot's choice, the power plan's
bound, the confirmatory run's sequential rule, the configs, the runner's recorded runs and the
published tables recomputed from them. The main study's plan: test_training_regime_main.py."""

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



def test_cost_against_grpo_is_paired_by_seed():
    """`x_grpo` is the median over seeds of the arm's step time over grpo's at the same seed: a
    grpo seed the arm lacks (here a slow one, on a loaded machine) does not enter it, as it
    would in a ratio of medians (1.5 / 2.5)."""
    seconds = {("grpo", 0): 1.0, ("grpo", 1): 4.0, ("grpo", 2): 1.0, ("mc", 0): 3.0,
               ("mc", 2): 2.0}
    table = pd.DataFrame([{"regime": "long", "arm": a, "seed": s, "online": 0.5, "final": 0.5,
                           "step_seconds": t, "credit_seconds": 0.0}
                          for (a, s), t in seconds.items()])
    rows = {r["arm"]: r for r in S.summary_rows(table)}
    assert rows["mc"]["x_grpo"] == pytest.approx(2.5)  # the median of 3 and 2
    assert rows["grpo"]["x_grpo"] == 1.0 and rows["mc"]["step_seconds"] == 2.5


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
    from studies.training_regime import outcomes

    _fake_run(tmp_path, "long", "grpo", 0, [0.5] * 150, [1, 2], redo=False)
    _fake_run(tmp_path, "long", "oracle", 0, [0.5] * 150, [3, 4], redo=False)
    calls = []

    def fake(model_dir, problems_file, seed, max_new_tokens, samples=4, by_problem=False):
        calls.append((model_dir.parent.name, seed, max_new_tokens, by_problem))
        return {"accuracy": 3 / 8, "correct": 3, "completions": 8, "problems": 2,
                "per_problem": [1, 2]}

    monkeypatch.setattr(earlier, "sampled_accuracy", fake)
    monkeypatch.setattr(outcomes, "problem_files", lambda setup, data: {"dev": data / "dev"})
    outcomes.problem_outcomes(tmp_path, "pilot")
    outcomes.problem_outcomes(tmp_path, "pilot")  # done once only
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



def test_a_process_with_nothing_to_take_trains_runs_ahead(tmp_path, monkeypatch):
    """While the one run left in the plan is held by another worker, a worker trains the runs
    `ahead` no one holds (each once, in order, skipping finished ones) instead of waiting, then
    returns with the plan finished; a worker that finds nothing held takes nothing ahead."""
    import threading

    from studies.training_regime import run_study

    held, calls, lock = threading.Event(), [], threading.Lock()
    ahead = [("long", seed, "grpo") for seed in (1, 2, 3)]
    done = run_dir(tmp_path, "main", "long", "grpo", 2)
    done.mkdir(parents=True)
    (done / "heldout_test.json").write_text("{}")

    def fake_run_one(out, phase, setup, arm, seed, steps, split, tag):
        run = run_dir(out, phase, setup.name, arm, seed)
        if not (run / f"heldout_{split}.json").is_file():
            with lock:
                calls.append((seed, threading.current_thread().name, tag.split("]")[0]))
            if seed == 0:  # the look's last run: finishes after the runs ahead
                held.set()
                for _ in range(500):
                    if len(calls) == 3:
                        break
                    time.sleep(0.01)
            run.mkdir(parents=True, exist_ok=True)
            (run / f"heldout_{split}.json").write_text("{}")
        return {}

    monkeypatch.setattr(run_study, "run_one", fake_run_one)
    todo = [("long", 0, "grpo")]
    first = threading.Thread(name="a", target=lambda: run_study.run_plan(
        tmp_path, "main", todo, 150, "test", wait=0.01, ahead=ahead))
    first.start()
    held.wait(5)
    run_study.run_plan(tmp_path, "main", todo, 150, "test", wait=0.01, ahead=ahead)
    first.join()
    assert calls == [(0, "a", "[main 1/1"), (1, "MainThread", "[main ahead 1/3"),
                     (3, "MainThread", "[main ahead 3/3")]
    run_study.run_plan(tmp_path, "main", todo, 150, "test", wait=0.01,
                       ahead=[("long", 4, "grpo")])
    assert len(calls) == 3  # nothing held: nothing ahead
    assert not list(tmp_path.rglob("*.lock*"))


def test_a_run_held_when_passed_over_is_checked_again_before_going_ahead(tmp_path, monkeypatch):
    """A worker that found a run held, then trained another one meanwhile, looks at the held
    run again before taking runs ahead: finished by then, the plan is done and nothing ahead
    is trained (the look is read at once)."""
    import threading

    from studies.training_regime import run_study

    events = {name: threading.Event() for name in ("x_started", "y_started", "x_done")}
    calls = []

    def fake_run_one(out, phase, setup, arm, seed, steps, split, tag):
        run = run_dir(out, phase, setup.name, arm, seed)
        if not (run / f"heldout_{split}.json").is_file():
            calls.append(seed)
            if seed == 0:  # held by the other worker while this one passes it over
                events["x_started"].set()
                events["y_started"].wait(5)
            elif seed == 1:
                events["y_started"].set()
                events["x_done"].wait(5)
            run.mkdir(parents=True, exist_ok=True)
            (run / f"heldout_{split}.json").write_text("{}")
            if seed == 0:
                events["x_done"].set()
        return {}

    monkeypatch.setattr(run_study, "run_one", fake_run_one)
    todo, ahead = [("long", 0, "grpo"), ("long", 1, "grpo")], [("long", 2, "grpo")]
    other = threading.Thread(target=lambda: run_study.run_plan(
        tmp_path, "main", todo[:1], 150, "test", wait=0.01))
    other.start()
    events["x_started"].wait(5)
    run_study.run_plan(tmp_path, "main", todo, 150, "test", wait=0.01, ahead=ahead)
    other.join()
    assert calls == [0, 1]  # seed 2 (ahead) not trained


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
    assert json.loads((tmp_path / "confirm_reproduce.json").read_text()) == [result]
    rows = pd.read_csv(tmp_path / "confirm_runs.csv").assign(final=0.625)
    rows.to_csv(tmp_path / "confirm_runs.csv", index=False)
    again = reproduce(tmp_path, "confirm", "grpo", 1000, 150)
    assert not again["equal"] and again["machine"] == result["machine"]
    # every machine's check is kept, oldest first (amendment 5's file held one object)
    assert json.loads((tmp_path / "confirm_reproduce.json").read_text()) == [result, again]
    (tmp_path / "confirm_reproduce.json").write_text(json.dumps(result))
    reproduce(tmp_path, "confirm", "grpo", 1000, 150)
    assert json.loads((tmp_path / "confirm_reproduce.json").read_text())[0] == result
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
    inputs = {"main": ["main_plan.json", "main_machines.csv"],
              "pilot": ["pilot_start.json"]}.get(phase, [])
    for name in [f"{phase}_runs.csv"] + inputs:
        shutil.copy(study / name, tmp_path / name)
    run_study.main(["summary", phase, "--out", str(tmp_path)])
    written = [f"{phase}_runs.csv", f"{phase}_summary.csv", f"{phase}_summary.md"]
    written += {"main": ["main_looks.json", "main_machines.csv"],
                "pilot": ["pilot_choice.json", "pilot_start.json"]}.get(phase, [])
    for name in written:
        assert (tmp_path / name).read_bytes() == (study / name).read_bytes(), name


