"""The pilot as it stands when a seed has no partner seed (amendment 2): oracle − grpo within
one training seed, with intervals from a paired bootstrap over the units that seed shares
across arms.

Units: `online`, the training steps of the metric's half (every arm of a seed draws the same
problems at each step, so a step pairs its problems, all their completions together); `final`,
the dev problems (a problem's samples together), from the correct counts per problem that
`run_study outcomes` recomputes. These intervals cover problems and samples within one run,
not the variation between training seeds.

- `unit_values`: one run's units (a long table, written as `pilot_units.csv.gz`).
- `within_seed`: arm − base on the units both have, with its bootstrap interval.
- `interim_markdown`: the table per setup and seed, and runs that stopped early.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from cotcredit.report.bootstrap import mean_interval as bootstrap_interval
from cotcredit.training.metrics import read_metrics
from studies.training.run_study import finished

BOOT, BOOT_SEED = 10_000, 0
UNIT_COLUMNS = ["setup", "arm", "seed", "metric", "unit", "value"]


def unit_values(run: Path, split: str, steps: int) -> list[dict]:
    """One run's units: each step's training reward over steps steps/2+1..steps (`online`) and
    each `split` problem's share of correct samples (`final`, only from a recomputation whose
    total equals the stored evaluation's)."""
    arm, seed = run.name.rsplit("-seed", 1)
    key = {"setup": run.parent.name, "arm": arm, "seed": int(seed)}
    rows = [{**key, "metric": "online", "unit": int(r["step"]), "value": float(r["reward"])}
            for r in read_metrics(run / "metrics.jsonl")
            if r.get("reward") is not None and steps // 2 < int(r["step"]) <= steps]
    problems = run / f"heldout_{split}_problems.json"
    if problems.is_file():
        redo = json.loads(problems.read_text())
        if redo.get("reproduces"):
            samples = redo["completions"] / redo["problems"]
            rows += [{**key, "metric": "final", "unit": i, "value": c / samples}
                     for i, c in enumerate(redo["per_problem"])]
    return rows


def units_table(out: Path, phase: str, steps: int):
    """`unit_values` of every finished run of `phase` (a DataFrame of `UNIT_COLUMNS`)."""
    import pandas as pd

    split = "dev" if phase == "pilot" else "test"
    rows = [row for run in sorted((out / "runs" / phase).glob("*/*-seed*"))
            if finished(run, steps)
            for row in unit_values(run, split, steps)]
    return pd.DataFrame(rows, columns=UNIT_COLUMNS)


def within_seed(units, setup: str, arm: str, base: str, seed: int, metric: str) -> dict:
    """Mean of arm − base over the units of `metric` both runs have, its 95% paired bootstrap
    interval (units resampled, `BOOT` draws, seed `BOOT_SEED`) and the number of units."""
    u = units[(units.setup == setup) & (units.seed == seed) & (units.metric == metric)]
    a = u[u.arm == arm].set_index("unit").value
    b = u[u.arm == base].set_index("unit").value
    d = (a - b).dropna().sort_index()
    if d.empty:
        return {"gain": math.nan, "low": math.nan, "high": math.nan, "units": 0}
    m, lo, hi = bootstrap_interval(d.to_numpy(), BOOT, BOOT_SEED)
    return {"gain": m, "low": lo, "high": hi, "units": len(d)}


def interim_rows(table, units, forms: dict[str, str]) -> list[dict]:
    """Per setup and seed with a grpo run: grpo's `online` and `final`, and per form the oracle
    − grpo difference of the runs' own numbers with the within-seed interval."""
    rows = []
    for (setup, seed), t in table.groupby(["regime", "seed"], sort=False):
        runs = t.set_index("arm")
        if "grpo" not in runs.index:
            continue
        row = {"setup": setup, "seed": int(seed), "grpo_online": runs.online["grpo"],
               "grpo_final": runs.final["grpo"]}
        for form, arm in forms.items():
            for metric in ("online", "final"):
                name = f"{metric}_{form}"
                if arm not in runs.index:
                    row[name] = row[f"{name}_low"] = row[f"{name}_high"] = math.nan
                    continue
                w = within_seed(units, setup, arm, "grpo", seed, metric)
                row[name] = float(runs[metric][arm] - runs[metric]["grpo"])
                row[f"{name}_low"], row[f"{name}_high"] = w["low"], w["high"]
                row[f"{name}_units"] = w["units"]
        rows.append(row)
    return rows


def _cell(row: dict, key: str) -> str:
    m, lo, hi = row[key], row[f"{key}_low"], row[f"{key}_high"]
    if not math.isfinite(m):
        return "–"
    if not math.isfinite(lo):  # no units: the redone evaluation differs from the stored one
        return f"{m:+.3f} (no interval)"
    return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def partial_runs(out: Path, phase: str, steps: int) -> list[dict]:
    """Runs of `phase` that stopped before `steps`: their training reward so far."""
    from studies.training.summarize import run_row

    split = "dev" if phase == "pilot" else "test"
    return [run_row(run, split, steps) for run in sorted((out / "runs" / phase).glob("*/*-seed*"))
            if not finished(run, steps)
            and (run / "metrics.jsonl").is_file()]


def interim_markdown(rows: list[dict], partial: list[dict], start: dict[str, float],
                     steps: int) -> str:
    """The interim table, the runs that stopped early and what the intervals cover."""
    lines = ["| setup | seed | start dev acc. | grpo online | grpo dev acc. | oracle − grpo "
             "online (reweight) | (segment-rewards) | oracle − grpo dev acc. (reweight) | "
             "(segment-rewards) |", "|---" * 9 + "|"]
    for r in rows:
        lines.append(
            f"| {r['setup']} | {r['seed']} | {start.get(r['setup'], math.nan):.3f} | "
            f"{r['grpo_online']:.3f} | {r['grpo_final']:.3f} | "
            f"{_cell(r, 'online_reweight')} | {_cell(r, 'online_segment-rewards')} | "
            f"{_cell(r, 'final_reweight')} | {_cell(r, 'final_segment-rewards')} |")
    text = "\n".join(lines).replace("nan", "–") + "\n\n"
    text += (f"One training seed per arm: differences of the runs' own numbers (online: mean "
             f"training reward over steps {steps // 2 + 1}-{steps}; dev: accuracy on 200 dev "
             f"problems x 4 samples). Intervals: 95% paired bootstrap within the seed "
             f"({BOOT:,} resamples) over the steps (online) or the dev problems (dev); they do "
             f"not cover the variation between training seeds.\n")
    for p in partial:
        text += (f"\nStopped early: {p['regime']} {p['arm']} seed {p['seed']} at step "
                 f"{p['steps']} of {steps}: training reward {p['first_steps']:.3f} over steps "
                 f"1-10, {p['online']:.3f} over steps {steps // 2 + 1}-{p['steps']}; no dev "
                 f"accuracy.\n")
    return text
