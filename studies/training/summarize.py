"""The training study's tables, curves and power analysis (see run_study.py for the protocol).

Writes, per phase, into the study folder: `<phase>_runs.csv` (one row per run),
`<phase>_summary.csv` and `<phase>_summary.md` (one row per regime and arm: means and paired
differences with 95% t-intervals over seeds, cost), `<phase>_curves.png` (training reward on
unseen problems over steps, mean and min-max band over seeds); for the pilot also
`pilot_power.csv` (seeds needed per regime, oracle form and metric).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from cotcredit.training.metrics import read_metrics
from studies.seed_runs import interval_cell, mean_interval, plot_seed_curves


def _median(values) -> float:
    import numpy as np

    x = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float(np.median(x)) if x else math.nan


def run_row(run: Path, split: str, steps: int) -> dict:
    """One run's numbers: `online` (mean train reward over the second half of the steps),
    `final` (held-out accuracy of its last checkpoint on `split`), cost."""
    metrics = read_metrics(run / "metrics.jsonl") if (run / "metrics.jsonl").is_file() else []
    held = run / f"heldout_{split}.json"
    final = json.loads(held.read_text())["accuracy"] if held.is_file() else math.nan
    second = [r["reward"] for r in metrics if r.get("reward") is not None
              and steps // 2 < int(r["step"]) <= steps]
    arm, seed = run.name.rsplit("-seed", 1)
    return {
        "regime": run.parent.name, "arm": arm, "seed": int(seed),
        "steps": max((int(r["step"]) for r in metrics), default=0),
        "online": sum(second) / len(second) if second else math.nan,
        "first_steps": _mean(r.get("reward") for r in metrics if int(r["step"]) <= 10),
        "final": final,
        "step_seconds": _median(r.get("step_seconds") for r in metrics),
        "credit_seconds": _median(r.get("rredcot_seconds") for r in metrics),
        "scored_fraction": _median(r.get("rredcot/scored_fraction") for r in metrics),
        "weight_std": _median(r.get("rredcot/weight_std") for r in metrics),
    }


def _mean(values) -> float:
    x = [float(v) for v in values if v is not None]
    return sum(x) / len(x) if x else math.nan


def runs_table(out: Path, phase: str, steps: int):
    """Every run of `phase` that trained `steps` steps, as a DataFrame (the main phase also
    counts the pilot's runs: they are its first seeds of the pilot's arms)."""
    import pandas as pd

    phases = ["pilot"] if phase == "pilot" else ["pilot", "main"]
    split = "dev" if phase == "pilot" else "test"
    found = {}
    for name in phases:
        for run in sorted((out / "runs" / name).glob("*/*-seed*")):
            if (run / f"checkpoint-{steps}" / "trainer_state.json").is_file():
                found[(run.parent.name, run.name)] = run
    rows = [run_row(r, split, steps) for r in found.values()]
    if phase == "main":
        main_regimes = {r.parent.name for r in found.values() if r.parent.parent.name == "main"}
        rows = [r for r in rows if r["regime"] in main_regimes]
    return pd.DataFrame(rows)


def paired(table, arm: str, base: str, key: str) -> tuple[float, float, float, int]:
    """Mean of `arm` − `base` in `key` over the seeds both have, its 95% t-interval, and n."""
    a = table[table.arm == arm].set_index("seed")[key]
    b = table[table.arm == base].set_index("seed")[key]
    shared = a.index.intersection(b.index)
    return (*mean_interval((a[shared] - b[shared]).tolist()), len(shared))


def recovered(table, arm: str, oracle: str, key: str, draws: int = 4000, seed: int = 0):
    """Share of the oracle's gain over grpo that `arm` recovers, (arm − grpo) / (oracle −
    grpo) of the means over shared seeds, with a percentile bootstrap interval over seeds."""
    import numpy as np

    wide = table[table.arm.isin([arm, oracle, "grpo"])].pivot(index="seed", columns="arm",
                                                              values=key).dropna()
    if wide.empty or len(wide.columns) < 3:
        return math.nan, math.nan, math.nan
    x = wide[[arm, oracle, "grpo"]].to_numpy()

    def share(rows):
        gain = rows[:, 1].mean() - rows[:, 2].mean()
        return (rows[:, 0].mean() - rows[:, 2].mean()) / gain if abs(gain) > 1e-12 else math.nan

    rng = np.random.default_rng(seed)
    boots = [share(x[rng.integers(0, len(x), len(x))]) for _ in range(draws)]
    boots = [b for b in boots if math.isfinite(b)]
    if not boots:
        return share(x), math.nan, math.nan
    return share(x), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def seeds_for_power(effect: float, sd: float, power: float = 0.8, alpha: float = 0.05) -> int:
    """Seeds n for a two-sided paired t-test at `alpha` to reach `power` against a mean paired
    difference `effect` with standard deviation `sd` (noncentral t; at least 2)."""
    from scipy import stats

    if not (effect and sd > 0 and math.isfinite(effect) and math.isfinite(sd)):
        return 0
    for n in range(2, 100000):
        df = n - 1
        crit = stats.t.ppf(1 - alpha / 2, df)
        nc = abs(effect) / sd * math.sqrt(n)
        if stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc) >= power:
            return n
    return 100000


def oracle_of(arm: str) -> str:
    """The oracle arm in the same advantage form as `arm`."""
    return "oracle-sr" if arm.endswith("-sr") else "oracle"


def summary_table(table):
    """One row per regime and arm: means, paired differences against grpo and the oracle of the
    same form, the share of the oracle's gain recovered, and cost against grpo."""
    import pandas as pd

    rows = []
    for regime, t in table.groupby("regime", sort=False):
        grpo_seconds = t[t.arm == "grpo"].step_seconds.mean()
        for arm in t.arm.unique():
            a = t[t.arm == arm]
            row = {"regime": regime, "arm": arm, "seeds": len(a)}
            for key in ("online", "final"):
                row[key], row[f"{key}_low"], row[f"{key}_high"] = mean_interval(a[key].tolist())
                row[f"{key}_seeds"] = int(a[key].notna().sum())
            for base in ("grpo", oracle_of(arm)):
                name = "oracle" if base.startswith("oracle") else "grpo"
                for key in ("online", "final"):
                    m, lo, hi, n = paired(t, arm, base, key) if base in set(t.arm) else \
                        (math.nan,) * 4
                    row.update({f"{key}_vs_{name}": m, f"{key}_vs_{name}_low": lo,
                                f"{key}_vs_{name}_high": hi, f"{key}_vs_{name}_n": n})
            row["recovered"], row["recovered_low"], row["recovered_high"] = (
                recovered(t, arm, oracle_of(arm), "online")
                if arm not in ("grpo", oracle_of(arm)) else (math.nan,) * 3)
            row.update({k: a[k].mean() for k in ("step_seconds", "credit_seconds",
                                                  "scored_fraction", "weight_std")})
            row["cost_ratio"] = row["step_seconds"] / grpo_seconds if grpo_seconds else math.nan
            # Within each run: step / (step − credit), immune to load changes between runs.
            row["within_ratio"] = (a.step_seconds / (a.step_seconds - a.credit_seconds.fillna(0))
                                   ).mean()
            rows.append(row)
    return pd.DataFrame(rows)


def summary_markdown(summary) -> str:
    """The summary table as Markdown (one table per regime)."""
    out = []
    for regime, t in summary.groupby("regime", sort=False):
        out.append(f"### {regime}\n")
        out.append("| arm | seeds (online / held-out) | online acc. | held-out acc. | online − grpo"
                   " | held-out − grpo | online − oracle | share of oracle gain | s / step | "
                   "× grpo | credit s / step | step ÷ (step − credit) |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for _, r in t.iterrows():
            credit = r["credit_seconds"]
            out.append(
                f"| {r['arm']} | {r['online_seeds']} / {r['final_seeds']} | "
                f"{interval_cell(r, 'online')} | {interval_cell(r, 'final')} | "
                f"{interval_cell(r, 'online_vs_grpo')} | {interval_cell(r, 'final_vs_grpo')} | "
                f"{interval_cell(r, 'online_vs_oracle')} | {interval_cell(r, 'recovered', 2)} | "
                f"{r['step_seconds']:.2f} | {r['cost_ratio']:.2f} | "
                f"{credit:.2f} | {r['within_ratio']:.2f} |".replace("nan", "–"))
        out.append("")
    out.append("Means over seeds with 95% t-intervals; every difference is paired by seed over the "
               "seeds both arms have (the seeds column: finished runs with an online / a held-out "
               "number). Oracle: the same form's.\n")
    return "\n".join(out)


def power_table(table):
    """Per regime, oracle form and metric: the mean paired gain over grpo, its SD over seeds,
    and the seeds that detect half of it with 80% power (`seeds_for_power`)."""
    import pandas as pd

    rows = []
    for regime, t in table.groupby("regime", sort=False):
        for arm in ("oracle", "oracle-sr"):
            if arm not in set(t.arm):
                continue
            for key in ("online", "final"):
                a = t[t.arm == arm].set_index("seed")[key]
                b = t[t.arm == "grpo"].set_index("seed")[key]
                d = (a - b).dropna()
                sd = float(d.std(ddof=1)) if len(d) > 1 else math.nan
                rows.append({"regime": regime, "arm": arm, "metric": key, "seeds": len(d),
                             "gain": float(d.mean()), "sd": sd,
                             "seeds_for_half_gain": seeds_for_power(float(d.mean()) / 2, sd)})
    return pd.DataFrame(rows)


def summarize(out: Path, phase: str, *, steps: int) -> None:
    """Write the phase's tables and curves (see the module docstring)."""
    table = runs_table(out, phase, steps)
    if table.empty:
        print(f"no finished {phase} runs yet")
        return
    table.to_csv(out / f"{phase}_runs.csv", index=False)
    summary = summary_table(table)
    summary.to_csv(out / f"{phase}_summary.csv", index=False)
    text = summary_markdown(summary)
    if phase == "pilot":
        power = power_table(table)
        power.to_csv(out / "pilot_power.csv", index=False)
        text += "\nSeeds to detect half the oracle's gain (80% power, paired t, 0.05):\n\n"
        text += "| regime | arm | metric | seeds | gain | SD | seeds for half the gain |\n"
        text += "|---|---|---|---|---|---|---|\n"
        for _, r in power.iterrows():
            text += (f"| {r.regime} | {r.arm} | {r.metric} | {r.seeds} | {r.gain:+.4f} | "
                     f"{r.sd:.4f} | {r.seeds_for_half_gain} |\n")
    (out / f"{phase}_summary.md").write_text(text)
    print(text)
    for regime, t in table.groupby("regime", sort=False):
        groups = {arm: [_run_path(out, regime, arm, s) for s in sorted(t[t.arm == arm].seed)]
                  for arm in t.arm.unique()}
        name = f"{phase}_curves.png" if table.regime.nunique() == 1 else \
            f"{phase}_curves_{regime}.png"
        plot_seed_curves(groups, out / name, window=15,
                         title=f"{regime}: training reward on unseen problems "
                         f"({len(t.seed.unique())} seeds)")


def _run_path(out: Path, regime: str, arm: str, seed: int) -> Path:
    """Where a run lives: the main runs' folder, or the pilot's for the runs it made."""
    main = out / "runs" / "main" / regime / f"{arm}-seed{seed}"
    return main if main.is_dir() else out / "runs" / "pilot" / regime / f"{arm}-seed{seed}"
