"""The study's decisions and tables (the protocol is run_study.py's docstring).

- `pilot_choice`: stage 1's scores and choice, stage 2's gains, whether the bar is met.
- `power_plan`: the main study's seeds from the pilot SD's upper confidence bound.
- `confirm_decision`: the confirmatory run's sequential rule.
- `summarize`: `<phase>_runs.csv`, `<phase>_summary.csv|md` and the curves; for a pilot whose
  stage 1 is incomplete, first the within-seed table (`interim.py`, amendment 2) and
  `pilot_units.csv.gz`, the per-step rewards and per-problem dev scores its intervals resample.
  Tracked: the CSV and Markdown files; not the curves, nor `runs/` (checkpoints).

The per-run numbers and paired statistics are the earlier study's (`studies.training.summarize`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from studies.seed_runs import interval_cell, mean_interval, plot_seed_curves
from studies.training.run_study import finished
from studies.training.summarize import recovered, run_row, seeds_for_power
from studies.training_regime.interim import (
    interim_markdown,
    interim_rows,
    partial_runs,
    units_table,
)
from studies.training_regime.setups import evaluated

BAR = 0.03  # the oracle's gain over grpo the pilot looks for
FORMS = {"reweight": "oracle", "segment-rewards": "oracle-sr"}
# The oracle's arms per span (`oracle.span`; amendment 3 adds `first` on the long setups).
SPANS = {"rest": FORMS, "first": {"reweight": "oracle-first", "segment-rewards": "oracle-first-sr"}}


def runs_table(out: Path, phase: str, steps: int):
    """Every finished run of `phase` (one row each: setup in `regime`, arm, seed, online,
    final, cost; `run_row`). A run whose folder is not here but whose row the tracked
    `<phase>_runs.csv` holds (amendment 5: `runs/` is not tracked and a new machine lacks it)
    is read from that row. Finished means trained to the last step and evaluated on the
    held-out split, as `run_plan` and `recorded_runs` count it: a table written while a run is
    being evaluated then recomputes from its rows alone."""
    import pandas as pd

    split = "dev" if phase == "pilot" else "test"
    rows = [run_row(run, split, steps)
            for run in sorted((out / "runs" / phase).glob("*/*-seed*"))
            if finished(run, steps) and evaluated(run, split)]
    table = pd.DataFrame(rows, columns=None if rows else ["regime", "arm", "seed", "online"])
    recorded = recorded_runs(out, phase, steps)
    here = set(zip(table.regime, table.arm, table.seed, strict=True))
    gone = recorded[[k not in here for k in zip(recorded.regime, recorded.arm, recorded.seed,
                                                 strict=True)]]
    if not gone.empty:
        table = pd.concat([table, gone], ignore_index=True) if rows else gone
    # one order whichever runs have folders here, so the tables recompute from the rows alone
    return table.sort_values(["regime", "arm", "seed"], ignore_index=True)


def recorded_runs(out: Path, phase: str, steps: int):
    """The full-length runs (`steps` steps, a held-out accuracy) the tracked
    `<phase>_runs.csv` records; empty when there is none."""
    import pandas as pd

    path = out / f"{phase}_runs.csv"
    if not path.is_file():
        return pd.DataFrame(columns=["regime", "arm", "seed", "online"])
    table = pd.read_csv(path)
    return table[(table.steps == steps) & table.final.notna()].reset_index(drop=True)


def differences(table, setup: str, arm: str, base: str, seeds, key: str = "online"):
    """`arm` - `base` in `key` per seed, over the given seeds both arms have (a Series)."""
    t = table[(table.regime == setup) & table.seed.isin(list(seeds))]
    a = t[t.arm == arm].set_index("seed")[key]
    b = t[t.arm == base].set_index("seed")[key]
    return (a - b).dropna()


def _gains(table, setup: str, seeds, key: str = "online", span: str = "rest") -> dict[str, dict]:
    out = {}
    for form, arm in SPANS[span].items():
        d = differences(table, setup, arm, "grpo", seeds, key)
        m, lo, hi = mean_interval(d.tolist())
        out[form] = {"seeds": len(d), "gain": m, "low": lo, "high": hi}
    return out


def oracle_spans(setup: str) -> tuple[str, ...]:
    """The oracle spans the pilot runs on `setup` (amendment 3: `first` too on the long ones)."""
    from studies.training_regime.run_study import FIRST_ERROR_SETUPS

    return ("rest", "first") if setup in FIRST_ERROR_SETUPS else ("rest",)


def pilot_choice(table, setups=None, stage1=(0, 1), stage2=tuple(range(2, 8))) -> dict:
    """The pilot's rule (protocol step 1, amendment 3): per candidate the oracle span whose
    better form has the larger stage-1 mean gain (`rest` on a tie) and its score, the ranking
    (candidates scoring at least `BAR`, cheapest grpo step first, then the rest by score),
    stage-2 gains of the first two in their span, and the chosen setup, span and form."""
    from studies.training_regime.run_study import PILOT_SETUPS

    setups = setups or PILOT_SETUPS
    scores, cost, spans, by_span = {}, {}, {}, {}
    for name in setups:
        by_span[name] = {}
        for span in oracle_spans(name):
            gains = _gains(table, name, stage1, span=span)
            if any(g["seeds"] < len(stage1) for g in gains.values()):
                return {"complete": False, "stage2_order": [], "passed": False}
            by_span[name][span] = max(g["gain"] for g in gains.values())
        spans[name] = max(by_span[name], key=lambda k: (by_span[name][k], k == "rest"))
        scores[name] = by_span[name][spans[name]]
        grpo = table[(table.regime == name) & (table.arm == "grpo") & table.seed.isin(stage1)]
        cost[name] = float(grpo.step_seconds.median())
    passing = sorted((n for n in setups if scores[n] >= BAR), key=lambda n: cost[n])
    rest = sorted((n for n in setups if scores[n] < BAR), key=lambda n: -scores[n])
    ranking = passing + rest
    result = {"complete": True, "stage1_scores": scores, "stage1_span_scores": by_span,
              "span": spans, "grpo_step_seconds": cost, "ranking": ranking,
              "stage2_order": ranking[:2], "stage2": {}}
    for name in ranking[:2]:
        gains = _gains(table, name, stage2, span=spans[name])
        if all(g["seeds"] == len(stage2) for g in gains.values()):
            result["stage2"][name] = gains
    chosen, form, passed = None, None, False
    for name, gains in result["stage2"].items():
        best = max(gains, key=lambda f: (gains[f]["gain"], f == "reweight"))
        ok = any(g["gain"] >= BAR and g["low"] > 0 for g in gains.values())
        if chosen is None or (not passed and gains[best]["gain"] >
                              result["stage2"][chosen][form]["gain"]):
            chosen, form, passed = name, best, ok
        if passed:
            break
    result.update(chosen=chosen, form=form, passed=passed,
                  oracle_arm=SPANS[spans[chosen]][form] if chosen else None)
    return result


def sd_upper(sd: float, n: int, level: float = 0.95) -> float:
    """One-sided upper `level` confidence bound of a normal SD estimated from n values."""
    from scipy import stats

    return sd * math.sqrt((n - 1) / stats.chi2.ppf(1 - level, n - 1))


def power_plan(table, setup: str, form: str, stage2=tuple(range(2, 8)),
               seeds=tuple(range(8)), span: str = "rest") -> dict:
    """Protocol step 2: delta = half the stage-2 gain, sigma_U from seeds 0-7, n seeds (of the
    oracle arm of `span` and `form`)."""
    arm = SPANS[span][form]
    gain = float(differences(table, setup, arm, "grpo", stage2).mean())
    d = differences(table, setup, arm, "grpo", seeds)
    sd = float(d.std(ddof=1))
    upper = sd_upper(sd, len(d))
    return {"setup": setup, "form": form, "span": span, "oracle_arm": arm, "gain": gain,
            "delta": gain / 2, "sd": sd, "sd_seeds": len(d), "sd_upper": upper,
            "seeds": seeds_for_power(gain / 2, upper),
            "seeds_at_sd": seeds_for_power(gain / 2, sd)}


def rule_power(n: int, delta: float, sd: float, rho: float = 0.5, draws: int = 20000,
               seed: int = 0) -> float:
    """Chance that a source `delta` above grpo and above shuffled (shuffled = grpo) gets both
    95% t-intervals above 0 at n seeds, the two differences' SDs `sd`, correlation `rho`
    (they share the source's runs). Simulated."""
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(seed)
    cov = sd ** 2 * np.array([[1, rho], [rho, 1]])
    x = rng.multivariate_normal([delta, delta], cov, size=(draws, n))
    m, s = x.mean(axis=1), x.std(axis=1, ddof=1)
    low = m - stats.t.ppf(0.975, n - 1) * s / math.sqrt(n)
    return float(((low[:, 0] > 0) & (low[:, 1] > 0)).mean())


def confirm_decision(table, arm: str = "rredcot-earlier", seeds=tuple(range(1000, 1032)),
                     interim: int = 16) -> dict:
    """Protocol step 4's sequential rule on the seeds finished so far, in order."""
    from scipy import stats

    d = differences(table, "unique", arm, "grpo", seeds)
    done = [s for s in seeds if s in d.index]
    done = done[: next((i for i, s in enumerate(seeds) if s not in d.index), len(seeds))]
    d = d[done]
    n = len(d)
    m, lo, hi = mean_interval(d.tolist())
    out = {"seeds": n, "mean": m, "low": lo, "high": hi, "continue": False, "verdict": None}
    if n < interim:
        out["continue"] = True
        return out
    if n < len(seeds):
        p = float(stats.ttest_1samp(d[: interim], 0).pvalue)
        out["interim_p"] = p
        if p < 0.001 and m > 0:
            out["verdict"] = "confirmed at the interim look"
        elif m <= 0:
            out["verdict"] = "not confirmed (futility at the interim look)"
        else:
            out["continue"] = True
        return out
    out["verdict"] = "confirmed" if lo > 0 else "not confirmed"
    return out


def control_span(arms) -> str:
    """The span of a setup's controls: the one whose oracle and shuffled arms have more runs
    (`arms`: one entry per run), `rest` on a tie. A main study on the first-error oracle has
    only `first` ones; the pilot's long setups have more `first` runs after stage 2."""
    arms = list(arms)
    count = {span: sum(a.removesuffix("-sr") in (f"oracle{span}", f"shuffled{span}")
                       for a in arms) for span in ("", "-first")}
    return "first" if count["-first"] > count[""] else "rest"


def summary_rows(table, base_arms=("grpo",)) -> list[dict]:
    """Per setup and arm: seeds, online and held-out means, paired differences against grpo,
    shuffled and the oracle of the same form (of the setup's `control_span`), the oracle
    share recovered, cost."""
    rows = []
    for setup, t in table.groupby("regime", sort=False):
        grpo_seconds = t[t.arm == "grpo"].set_index("seed").step_seconds
        span = "-first" if control_span(t.arm) == "first" else ""
        for arm in t.arm.unique():
            a = t[t.arm == arm]
            sr = "-sr" if arm.endswith("-sr") else ""
            row = {"setup": setup, "arm": arm, "seeds": len(a)}
            for key in ("online", "final"):
                row[key], row[f"{key}_low"], row[f"{key}_high"] = mean_interval(a[key].tolist())
                for base in ("grpo", f"shuffled{span}{sr}", f"oracle{span}{sr}"):
                    if base == arm or base not in set(t.arm):
                        continue
                    d = differences(t, setup, arm, base, a.seed, key)
                    name = base.removesuffix(sr).removesuffix("-first")
                    row[f"{key}_vs_{name}"], row[f"{key}_vs_{name}_low"], \
                        row[f"{key}_vs_{name}_high"] = mean_interval(d.tolist())
                    row[f"{key}_vs_{name}_n"] = len(d)
            oracle = f"oracle{span}{sr}"
            if arm != "grpo" and not arm.startswith("oracle") and oracle in set(t.arm):
                row["recovered"], row["recovered_low"], row["recovered_high"] = recovered(
                    t, arm, oracle, "online")
            # how far the source moved credit inside a completion (RMS of a_t / A − 1; grpo: –)
            row["weight_spread"] = (float(a.weight_std.median()) if "weight_std" in a
                                    else math.nan)
            row["step_seconds"] = float(a.step_seconds.median())
            row["credit_seconds"] = float(a.credit_seconds.median())
            # × grpo paired by seed: a seed's two runs mostly share a machine and its load; the
            # medians over all seeds need not (the main study changed machines, amendment 7)
            ratio = (a.set_index("seed").step_seconds / grpo_seconds).dropna()
            row["x_grpo"] = float(ratio.median()) if len(ratio) else math.nan
            row["within_ratio"] = float((a.step_seconds / (a.step_seconds -
                                                            a.credit_seconds.fillna(0))).mean())
            rows.append(row)
    return rows


def summary_markdown(rows: list[dict]) -> str:
    cols = [("seeds", None), ("online", "online"), ("held-out", "final"),
            ("online − grpo", "online_vs_grpo"), ("held-out − grpo", "final_vs_grpo"),
            ("online − shuffled", "online_vs_shuffled"), ("online − oracle", "online_vs_oracle"),
            ("share of the oracle's gain", "recovered")]
    out = []
    for setup in dict.fromkeys(r["setup"] for r in rows):
        out += [f"### {setup}\n", "| arm | " + " | ".join(c for c, _ in cols) +
                " | weight spread | s / step | × grpo | credit s / step | step ÷ (step − credit) |",
                "|---" * (len(cols) + 6) + "|"]
        for r in (r for r in rows if r["setup"] == setup):
            cells = [str(r["seeds"]) if k is None
                     else interval_cell(r, k, 2 if k == "recovered" else 3) for _, k in cols]
            out.append(f"| {r['arm']} | " + " | ".join(cells) +
                       f" | {r['weight_spread']:.2f} | {r['step_seconds']:.2f} | "
                       f"{r['x_grpo']:.2f} | {r['credit_seconds']:.2f} | {r['within_ratio']:.2f} |")
        out.append("")
    out.append("Means over seeds with 95% t-intervals; differences paired by seed over the seeds "
               "both arms have; shuffled and oracle: the same form's. Share: (arm − grpo) / "
               "(oracle − grpo) of the means, percentile bootstrap over seeds. Weight spread: how "
               "far the source moved credit inside a completion, the root mean square of a_t / A "
               "− 1 over its tokens (0: plain GRPO). It and the seconds: medians over steps, the "
               "median over seeds (the machine's load moves the seconds; the last column does "
               "not); × grpo: the median over seeds of the arm's step ÷ grpo's at the same "
               "seed.\n")
    return "\n".join(out).replace("nan", "–")


def start_accuracies(out: Path) -> dict[str, float]:
    """Each setup's dev accuracy before training: `runs/start/<setup>.json`, else the tracked
    `pilot_start.json` that `summary pilot` writes from them (`runs/` is not tracked)."""
    tracked = out / "pilot_start.json"
    start = json.loads(tracked.read_text()) if tracked.is_file() else {}
    start.update({p.stem: json.loads(p.read_text())["accuracy"]
                  for p in sorted((out / "runs" / "start").glob("*.json"))})
    return start


def pilot_markdown(table, start: dict[str, float]) -> str:
    """The pilot table: per candidate, stage and oracle span, oracle − grpo in both forms
    (`start`: each setup's dev accuracy before training)."""
    choice = pilot_choice(table)
    lines = ["| setup | oracle span | stage (seeds) | start dev acc. | grpo online | oracle − "
             "grpo online (reweight) | (segment-rewards) | oracle − grpo dev acc. (reweight) | "
             "(segment-rewards) | grpo s / step |", "|---" * 10 + "|"]
    for setup, span in ((s, k) for s in dict.fromkeys(table.regime) for k in SPANS):
        acc = start.get(setup, math.nan)
        for stage, seeds in (("1", (0, 1)), ("2", tuple(range(2, 8))), ("all", range(8))):
            g = _gains(table, setup, seeds, span=span)
            dev = _gains(table, setup, seeds, "final", span=span)
            if not g["reweight"]["seeds"] or (stage == "all" and not _gains(
                    table, setup, tuple(range(2, 8)), span=span)["reweight"]["seeds"]):
                continue  # no seeds, or `all` would repeat stage 1
            grpo = table[(table.regime == setup) & (table.arm == "grpo") & table.seed.isin(
                list(seeds))]
            cell = _gain_cell
            lines.append(
                f"| {setup} | {span} | {stage} ({g['reweight']['seeds']}) | {acc:.3f} | "
                f"{grpo.online.mean():.3f} | {cell(g['reweight'])} | "
                f"{cell(g['segment-rewards'])} | {cell(dev['reweight'])} | "
                f"{cell(dev['segment-rewards'])} | {grpo.step_seconds.median():.2f} |")
    text = "\n".join(lines).replace("nan", "–") + "\n\n"
    if choice.get("complete"):
        text += ("Stage 1 scores (the best oracle arm's mean oracle − grpo online, seeds 0-1; "
                 "its span): " + ", ".join(f"{k} {v:+.3f} ({choice['span'][k]})"
                                           for k, v in choice["stage1_scores"].items()) +
                 f". Ranking: {', '.join(choice['ranking'])}. ")
        if choice["chosen"] is None:
            text += (f"Stage 2 (seeds 2-7) runs on {choice['stage2_order'][0]} (and on "
                     f"{choice['stage2_order'][1]} if it does not pass); nothing chosen yet.\n")
        else:
            text += (f"Chosen: {choice['chosen']} ({choice['oracle_arm']}, {choice['form']}); "
                     f"bar of +{BAR} with the interval above 0 "
                     f"{'met' if choice['passed'] else 'not met'}.\n")
    return text


def _gain_cell(g: dict) -> str:
    return interval_cell({"x_vs_": g["gain"], "x_vs__low": g["low"], "x_vs__high": g["high"]},
                         "x_vs_")


def interim_pilot(out: Path, table, steps: int) -> str:
    """Before stage 1 is complete (amendment 2): the within-seed table, from `pilot_units.csv.gz`
    (written here: the units the intervals resample)."""
    units = units_table(out, "pilot", steps)
    units.to_csv(out / "pilot_units.csv.gz", index=False)  # gzip: the tracked tree is bounded
    rows = interim_rows(table, units, FORMS)
    return ("## Interim: stage 1 incomplete, nothing chosen\n\n" + interim_markdown(
        rows, partial_runs(out, "pilot", steps), start_accuracies(out), steps) +
        "\n## The protocol's tables (stage 1 so far)\n\n")


def summarize(out: Path, phase: str, *, steps: int) -> None:
    """Write `<phase>_runs.csv`, `<phase>_summary.csv|md` and `<phase>_curves.png`."""
    import pandas as pd

    table = runs_table(out, phase, steps)
    if table.empty:
        print(f"no finished {phase} runs yet")
        return
    table.to_csv(out / f"{phase}_runs.csv", index=False)
    looks = ""
    if phase == "main" and (out / "main_plan.json").is_file():
        from studies.training_regime.machines import machine_split, machines_table
        from studies.training_regime.main_plan import (
            look_descriptions,
            look_table,
            looks_markdown,
            write_progress,
        )

        plan = json.loads((out / "main_plan.json").read_text())
        state = write_progress(out, table, plan)
        described = look_descriptions(table, state, plan)
        machines = machines_table(out, phase, table)
        machines.to_csv(out / f"{phase}_machines.csv", index=False)
        table, line = look_table(table, state, plan)
        looks = looks_markdown(state, plan) + (f"{line}\n" if line else "") + "\n"
        if described:
            n = max(r[-1]["seeds"] for r in state["comparisons"].values() if r)
            looks += f"{described}\n{machine_split(table, machines, plan, n)}\n"
    rows = summary_rows(table)
    pd.DataFrame(rows).to_csv(out / f"{phase}_summary.csv", index=False)
    text = looks + summary_markdown(rows)
    if phase == "pilot":
        start = start_accuracies(out)
        (out / "pilot_start.json").write_text(json.dumps(start, indent=1, sort_keys=True) + "\n")
        text = pilot_markdown(table, start) + "\n" + text
        choice = pilot_choice(table)
        if not choice["complete"]:
            text = interim_pilot(out, table, steps) + "\n" + text
        (out / "pilot_choice.json").write_text(json.dumps(choice, indent=1) + "\n")
    if phase == "confirm":
        text += "\n" + json.dumps(confirm_decision(table), indent=1) + "\n"
    (out / f"{phase}_summary.md").write_text(text)
    print(text)
    for setup, t in table.groupby("regime", sort=False):
        # the curves read each run's metrics: runs known only by their rows are left out
        groups = {arm: [run for s in sorted(t[t.arm == arm].seed)
                        if (run := out / "runs" / phase / setup / f"{arm}-seed{s}").is_dir()]
                  for arm in t.arm.unique()}
        groups = {arm: runs for arm, runs in groups.items() if runs}
        if not groups:
            continue
        plot_seed_curves(groups, out / f"{phase}_curves_{setup}.png", window=15,
                         title=f"{setup}: training reward on unseen problems")
