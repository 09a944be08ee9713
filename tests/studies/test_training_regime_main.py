"""The training-regime study's main study (studies/training_regime/): the group-sequential
plan's bounds and verdicts, the plan's roles and progress look by look, the summary's tables,
the repeated intervals, the pinned training code, and the looks' tables in the docs."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as t_dist

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



def test_runs_ahead_are_the_controls_of_the_look_after_the_next():
    """While a look waits on its last runs, a free process may train the next look's grpo,
    oracle and shuffled (they run whatever the look decides); none after the last look or when
    the study is done."""
    from studies.training_regime.main_plan import make_plan, progress, runs_ahead
    from studies.training_regime.sequential import design

    plan = make_plan("long-g4", "first", "reweight", design(0.02, 0.04, 4, 12))
    assert plan["looks"] == [4, 8, 12]
    controls = ("grpo", "oracle-first", "shuffled-first")
    start = progress(_main_table(plan, {}, 0), plan)
    assert runs_ahead(plan, start) == [(s, a) for s in range(104, 108) for a in controls]
    gains = {"oracle": 0.1, "rredcot": 0.1, "mc": 0.003, "cheap": 0.1}
    no_cheap = lambda t: t[t.arm != "cheap"]  # noqa: E731  (cheap runs last)
    mid = progress(no_cheap(_main_table(plan, gains, 8)), plan)
    assert mid["next_seeds"] == plan["seeds"] and runs_ahead(plan, mid) == []
    end = progress(no_cheap(_main_table(plan, gains, 12)), plan)  # cheap starts from look 1
    assert runs_ahead(plan, end) == [(s, a) for s in range(104, 108) for a in controls]
    over = progress(_main_table(plan, gains, 12), plan)
    assert over["done"] and runs_ahead(plan, over) == []


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


def tracked_main_study() -> tuple[dict, dict, list[int], str]:
    """The tracked plan, looks, the looks read so far and docs/studies/training-regime.md."""
    from studies.training_regime import run_study

    study = run_study.HERE
    plan = json.loads((study / "main_plan.json").read_text())
    state = json.loads((study / "main_looks.json").read_text())
    looks = sorted({r["look"] for rs in state["comparisons"].values() for r in rs})
    assert looks, "no look read yet"
    docs = (study.parent.parent / "docs" / "studies" / "training-regime.md").read_text()
    return plan, state, looks, docs


def test_the_docs_print_each_looks_tables_as_the_tracked_runs_give_them():
    """Every look read so far has its tables in docs/studies/training-regime.md as
    `look_docs_tables` computes them from the tracked rows and looks: the unadjusted table of the
    look's seeds and (from look 2, when the repeated intervals came in) the decisions. A look's
    paragraph is written by pasting `look_docs_tables`' output; this catches a figure copied
    wrong."""
    import pandas as pd

    from studies.training_regime import run_study
    from studies.training_regime.main_plan import look_docs_tables

    plan, state, looks, docs = tracked_main_study()
    table = pd.read_csv(run_study.HERE / "main_runs.csv")
    for k in looks:
        decisions, described = look_docs_tables(table, state, plan, k).split("\n\n")
        assert f"**Look {k} (" in docs
        assert described.strip() in docs, f"look {k}'s unadjusted table"
        if k >= 2:
            assert decisions in docs, f"look {k}'s decisions"
    with pytest.raises(ValueError, match="no comparison has read look"):
        look_docs_tables(table, state, plan, looks[-1] + 1)


def test_the_docs_say_where_the_main_study_stands():
    """The standing table above the looks' history is each comparison's last look as the
    tracked looks give it, under a heading that names the newest look: a look read without
    updating it fails here. On a made-up state: a stopped, a live and an unstarted comparison."""
    from studies.training_regime.main_plan import standing_docs_table

    plan, state, looks, docs = tracked_main_study()
    newest = looks[-1]
    n = plan["looks"][newest - 1]
    assert (f"## Where the main study stands\n\n**Look {newest} of at most {len(plan['looks'])}, "
            f"seeds {plan['seeds'][0]}-{plan['seeds'][n - 1]}.**") in docs
    assert standing_docs_table(state, plan) in docs

    row = {"look": 3, "seeds": 24, "mean": -0.0125, "rci_low": -0.05, "rci_high": 0.0251}
    made_up = {"comparisons": {"oracle": [dict(row, look=2), row], "mc": [row], "cheap": []},
               "state": {"oracle": "efficacy", "mc": "live", "cheap": "live"}}
    lines = standing_docs_table(made_up, plan).splitlines()
    assert lines[2] == ("| oracle-first − grpo | 3 | 24 | −0.013 | [−0.050, +0.025] | "
                        "stopped: efficacy |")
    assert lines[3].endswith("| continues |") and lines[3].startswith("| mc − grpo | 3 |")
    assert lines[4] == "| cheap − grpo | – | – | – | – | not started |"


def test_look_descriptions_equal_direct_computations():
    """The newest look's descriptions outside the plan: each arm's mean difference on each
    look's new seeds alone, each comparison's paired SD, and the next look's z at unchanged
    mean and SD with the first look that would stop it, equal to computing them by hand;
    nothing before the first look."""
    import numpy as np

    from studies.training_regime.main_plan import look_descriptions, make_plan, progress
    from studies.training_regime.sequential import design, t_to_z

    plan = make_plan("long-g4", "first", "reweight", design(0.02, 0.04, 4, 12))
    table = _main_table(plan, {"oracle": 0.02, "rredcot": -0.01, "mc": 0.005}, 9, sd=0.03,
                        seed=1)
    noise = np.random.default_rng(1).normal(0, 0.02, len(table))
    table = table[table.arm != "cheap"].assign(final=table.online + noise)
    assert look_descriptions(table[table.seed < 103], progress(table[table.seed < 103], plan),
                             plan) == ""
    state = progress(table, plan)
    looks = plan["looks"]
    k = max(r["look"] for rs in state["comparisons"].values() for r in rs)
    text = look_descriptions(table, state, plan)
    assert k > 1 and text.startswith(f"## Outside the plan (descriptions of look {k}")
    wide = table.pivot(index="seed", columns="arm", values=["online", "final"])
    arms = ("mc", "oracle-first", "rredcot", "shuffled-first")
    assert f"| look | seeds | {' | '.join(arms)} |" in text
    for j in range(1, k + 1):
        new = plan["seeds"][looks[j - 2] if j > 1 else 0:looks[j - 1]]
        cells = []
        for arm in arms:
            on = (wide["online"][arm] - wide["online"]["grpo"]).loc[new].mean()
            held = (wide["final"][arm] - wide["final"]["grpo"]).loc[new].mean()
            cells.append(f"{on:+.3f} / {held:+.3f}")
        assert f"| {j} | {new[0]}-{new[-1]} | {' | '.join(cells)} |" in text
    # an arm stopped before the look has no cell; one missing a seed says how many it has
    new = plan["seeds"][looks[k - 2]:looks[k - 1]]
    gone = (table.arm == "rredcot") & table.seed.isin(new)
    gone |= (table.arm == "mc") & (table.seed == new[0])
    row = next(line for line in look_descriptions(table[~gone], state, plan).splitlines()
               if line.startswith(f"| {k} | {new[0]}-"))
    cells = row.strip("|").split(" | ")
    assert cells[4].strip() == "–" and cells[2].endswith(f" ({len(new) - 1})")
    for role, rs in state["comparisons"].items():
        if not rs:
            assert f"| {plan['roles'][role]} − grpo |" not in text
            continue
        r, arm = rs[-1], plan["roles"][role]
        d = (wide["online"][arm] - wide["online"]["grpo"]).loc[plan["seeds"][:r["seeds"]]]
        row = f"| {arm} − grpo | {r['look']} | {r['seeds']} | {d.mean():+.3f} | {d.std():.3f} | "
        if state["state"][role] == "live":
            z = float(t_to_z(d.mean(), d.std(), looks[r["look"]]))
            row += (f"{r['look'] + 1} | {looks[r['look']]} | {z:+.2f} | "
                    f"{plan['z'][r['look']]:.2f} | {plan['futility_z'][r['look']]:+.2f} | ")
            # the first later look whose bounds the mean would cross, unchanged and then
            # diluted by later seeds that gain nothing (the SD unchanged in both)
            stops = []
            for diluted in (False, True):
                for i in range(r["look"], len(looks)):
                    mean = d.sum() / looks[i] if diluted else d.mean()
                    z = float(t_to_z(mean, d.std(), looks[i]))
                    if i == len(looks) - 1 or not plan["futility_z"][i] < z < plan["z"][i]:
                        break
                stop = ("efficacy" if z >= plan["z"][i] else "harm" if z <= -plan["z"][i]
                        else "not significant" if i == len(looks) - 1 else "futility")
                stops.append(f"look {i + 1} ({looks[i]} seeds): {stop}")
            row += " | ".join(stops) + " |"
        else:
            row += f"– ({state['state'][role]}) |" + " – |" * 6
        assert row in text, row
    assert {"live", "futility"} <= set(state["state"].values())  # both kinds of row checked


def test_each_run_records_its_machines_and_the_split_equals_direct_means(tmp_path):
    """Amendment 7: a run's machine.json gains an entry at each start or resume; the machines
    table reads a folder's entries, else the tracked file's label, else `BEFORE`; the split of
    each comparison by machine equals the means and SDs over the seeds taken by hand, and its gap
    the Welch interval computed from them."""
    from studies.training_regime.machines import (
        BEFORE,
        label,
        machine_split,
        machines_table,
        note_machine,
        this_machine,
    )
    from studies.training_regime.main_plan import make_plan
    from studies.training_regime.sequential import design

    plan = make_plan("long-g4", "first", "reweight", design(0.02, 0.04, 4, 12))
    table = _main_table(plan, {"oracle": 0.02, "mc": 0.01}, 6, seed=2)
    table = table[table.arm.isin(["grpo", "oracle-first", "mc"])].reset_index(drop=True)
    run = tmp_path / "runs" / "main" / "long-g4" / "mc-seed105"
    note_machine(run, False)
    note_machine(run, True)
    entries = json.loads((run / "machine.json").read_text())
    assert [e["resume"] for e in entries] == [False, True]
    assert label(entries) == f"{this_machine()['cpu']} ({this_machine()['capability']})"
    assert label([{"cpu": "X", "capability": "AVX2"}, {"cpu": "Y", "capability": "AVX512"}]) \
        == "X (AVX2) + Y (AVX512)"
    pd.DataFrame([{"regime": "long-g4", "arm": "grpo", "seed": s, "machine": "Z (AVX2)"}
                  for s in (104, 105)]).to_csv(tmp_path / "main_machines.csv", index=False)
    machines = machines_table(tmp_path, "main", table)
    got = {(r.arm, r.seed): r.machine for r in machines.itertuples()}
    assert got[("mc", 105)] == label(entries) and got[("grpo", 105)] == "Z (AVX2)"
    assert got[("oracle-first", 105)] == BEFORE and got[("mc", 100)] == BEFORE
    assert len(machines) == len(table)
    text = machine_split(table, machines, plan, 6)
    wide = table.pivot(index="seed", columns="arm", values="online")
    for arm in ("oracle-first", "mc"):
        d = wide[arm] - wide["grpo"]
        before, later = d.drop([104, 105]), d.loc[[104, 105]]
        # Welch's interval by its textbook formula (Welch-Satterthwaite degrees of freedom)
        a, b = before.var() / len(before), later.var() / len(later)
        df = (a + b) ** 2 / (a**2 / (len(before) - 1) + b**2 / (len(later) - 1))
        gap, half = before.mean() - later.mean(), t_dist.ppf(0.975, df) * np.sqrt(a + b)
        assert (f"| {arm} − grpo | {len(before)} | {before.mean():+.3f} | {before.std():.3f} | "
                f"{len(later)} | {later.mean():+.3f} | {later.std():.3f} | "
                f"{gap:+.3f} [{gap - half:+.3f}, {gap + half:+.3f}] |") in text
    assert "| rredcot − grpo |" not in text  # no runs: no row
