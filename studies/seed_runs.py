"""Seeds of `cotcredit train` runs side by side, as the training studies report them: reward
curves as a mean over seeds with a min–max band, Student-t intervals over seeds, the summary
table (evaluation before and after, the paired difference with the baseline, steps to a target
reward, seconds per step) and whether a run finished.

The runs' own files (metrics.jsonl, eval.json, eval_curve.jsonl) are what `cotcredit train`
writes (`cotcredit.training.metrics`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from cotcredit.training.metrics import METRICS_FILE, moving_average, read_metrics


def _by_step(rows: list[dict], key: str) -> dict[int, float]:
    return {int(r["step"]): float(r[key]) for r in rows if r.get(key) is not None}


def seed_band(runs: list[dict[int, float]], window: int = 1):
    """Steps present in every run, and the mean, min and max over runs of each run's values
    smoothed with a trailing moving average of `window` steps."""
    import numpy as np

    steps = sorted(set.intersection(*(set(r) for r in runs))) if runs else []
    if not steps:
        return [], np.array([]), np.array([]), np.array([])
    curves = np.array([moving_average([r[s] for s in steps], window) for r in runs])
    return steps, curves.mean(axis=0), curves.min(axis=0), curves.max(axis=0)


def plot_seed_curves(
    groups: Mapping[str, list[str | Path]], out: str | Path, *, window: int = 10,
    title: str = "",
) -> Path:
    """One figure comparing groups of runs (e.g. {"grpo": [seed dirs], "rredcot": [...]}): the
    train reward (moving average over `window` steps) as the mean over seeds with a min–max
    band, and, where the runs have eval_curve.jsonl, the eval accuracy likewise. Also saved as
    PDF next to the PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_eval = any((Path(d) / "eval_curve.jsonl").exists() for ds in groups.values() for d in ds)
    fig, axes = plt.subplots(1, 2 if has_eval else 1, figsize=(13 if has_eval else 7, 4.4),
                             squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (label, dirs) in enumerate(groups.items()):
        color = colors[i % len(colors)]
        rewards = [_by_step(read_metrics(Path(d) / METRICS_FILE), "reward") for d in dirs]
        steps, mean, low, high = seed_band(rewards, window)
        ax = axes[0][0]
        ax.plot(steps, mean, color=color, lw=2, label=f"{label} (mean of {len(dirs)} seeds)")
        ax.fill_between(steps, low, high, color=color, alpha=0.18, lw=0)
        if has_eval:
            evals = [_by_step(read_metrics(Path(d) / "eval_curve.jsonl"), "accuracy")
                     for d in dirs if (Path(d) / "eval_curve.jsonl").exists()]
            steps, mean, low, high = seed_band(evals)
            ax = axes[0][1]
            ax.plot(steps, mean, color=color, lw=2, marker="o", ms=3, label=label)
            ax.fill_between(steps, low, high, color=color, alpha=0.18, lw=0)
    axes[0][0].set_title(
        f"train reward, moving average of {window} steps (band: min–max over seeds)")
    axes[0][0].set_ylabel("reward (correct = 1)")
    if has_eval:
        axes[0][1].set_title("held-out accuracy (band: min–max over seeds)")
        axes[0][1].set_ylabel("accuracy")
    for ax in axes[0]:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    fig.savefig(out.with_suffix(".pdf"))
    plt.close(fig)
    return out


def mean_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of `values` and its two-sided Student-t interval at `level` (NaN bounds for fewer
    than two finite values): the interval over seeds a training comparison reports."""
    import numpy as np
    from scipy import stats

    x = np.asarray([v for v in values if v is not None], dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))
    return mean, mean - half, mean + half


def first_step_reaching(rows: list[dict], target: float, window: int = 10) -> int | None:
    """The first step at which the trailing `window`-step moving average of the train reward is
    at least `target` (None if it never is)."""
    rows = [r for r in rows if r.get("reward") is not None]
    smooth = moving_average([float(r["reward"]) for r in rows], window)
    return next((int(r["step"]) for r, v in zip(rows, smooth) if v >= target), None)


def _reduce(values, how=None) -> float:
    """`how` (default: the mean) of the finite numbers among `values`; NaN when there are none."""
    import numpy as np

    x = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return float((how or np.mean)(x)) if x else math.nan


def seed_run_summary(
    groups: Mapping[str, list[str | Path]], *, target: float = 0.5, window: int = 10,
    baseline: str = "grpo",
):
    """One row per group of runs (e.g. {"grpo": [seed dirs], "rredcot": [...]}), over its seeds.

    Columns: ``mode``, ``seeds``; ``eval_before``, ``eval_after`` and ``eval_gain`` (after −
    before), each a mean with its 95% t-interval over seeds (``*_low``/``*_high``);
    ``paired_diff`` (mean over shared seeds of this group's eval_after minus the baseline's at the
    same seed) with its interval; ``reward_first``/``reward_last`` (mean train reward of the first
    and last `window` steps); ``steps_to_target`` (mean over seeds that reached it of the first step
    whose `window`-step moving reward is ≥ `target`) and ``reached`` (how many seeds did);
    ``step_seconds``, ``rredcot_seconds`` (median step of each run, mean over seeds) and
    ``seconds_ratio`` (step seconds over the baseline's); ``weight_std`` (mean of
    ``rredcot/weight_std``, the spread of the token weights) and ``scored_fraction`` (share of
    completions given segment rewards).
    """
    import numpy as np
    import pandas as pd

    def evals(run: Path) -> tuple[float | None, float | None]:
        path = run / "eval.json"
        if not path.is_file():
            return None, None
        e = json.loads(path.read_text())
        return ((e.get("before") or {}).get("accuracy"), (e.get("after") or {}).get("accuracy"))

    def seed_of(run: Path) -> str:
        return run.name.rsplit("seed", 1)[-1] if "seed" in run.name else run.name

    per_run = {}
    for mode, dirs in groups.items():
        for d in map(Path, dirs):
            rows = read_metrics(d / METRICS_FILE) if (d / METRICS_FILE).is_file() else []
            before, after = evals(d)

            rewards = [float(r["reward"]) for r in rows if r.get("reward") is not None]
            per_run[(mode, seed_of(d))] = {
                "before": before, "after": after,
                "gain": after - before if after is not None and before is not None else None,
                "first": float(np.mean(rewards[:window])) if rewards else math.nan,
                "last": float(np.mean(rewards[-window:])) if rewards else math.nan,
                "reach": first_step_reaching(rows, target, window),
                # Seconds: the median step, so a few steps slowed by other jobs on a shared
                # machine do not move a run's figure.
                "step_seconds": _reduce([r.get("step_seconds") for r in rows], np.median),
                "rredcot_seconds": _reduce([r.get("rredcot_seconds") for r in rows], np.median),
                "weight_std": _reduce([r.get("rredcot/weight_std") for r in rows]),
                "scored_fraction": _reduce([r.get("rredcot/scored_fraction") for r in rows]),
            }
    out = []
    for mode in groups:
        runs = {s: v for (m, s), v in per_run.items() if m == mode}
        row = {"mode": mode, "seeds": len(runs)}
        for key in ("before", "after", "gain"):
            mean, low, high = mean_interval([v[key] for v in runs.values()])
            row.update({f"eval_{key}": mean, f"eval_{key}_low": low, f"eval_{key}_high": high})
        base = {s: v for (m, s), v in per_run.items() if m == baseline}
        diffs = [v["after"] - base[s]["after"] for s, v in runs.items()
                 if s in base and v["after"] is not None and base[s]["after"] is not None]
        mean, low, high = mean_interval(diffs)
        row.update({"paired_diff": mean, "paired_diff_low": low, "paired_diff_high": high})
        reached = [v["reach"] for v in runs.values() if v["reach"] is not None]

        row.update({
            "reward_first": _reduce([v["first"] for v in runs.values()]),
            "reward_last": _reduce([v["last"] for v in runs.values()]),
            "steps_to_target": float(np.mean(reached)) if reached else math.nan,
            "reached": len(reached),
            **{k: _reduce([v[k] for v in runs.values()]) for k in
               ("step_seconds", "rredcot_seconds", "weight_std", "scored_fraction")},
        })
        out.append(row)
    table = pd.DataFrame(out)
    base_seconds = table.loc[table["mode"] == baseline, "step_seconds"]
    table["seconds_ratio"] = (
        table["step_seconds"] / float(base_seconds.iloc[0]) if len(base_seconds) else math.nan
    )
    return table


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def format_interval(row, key: str, digits: int = 3, *, signed: bool = False) -> str:
    """``row[key]`` with its interval ``row[key_low]``, ``row[key_high]`` as "m [lo, hi]"
    ("m" alone without an interval, "–" without a value or key); ``signed`` writes "+" on
    positive numbers."""
    mean = row.get(key, math.nan)
    low, high = row.get(f"{key}_low", math.nan), row.get(f"{key}_high", math.nan)
    if not _finite(mean):
        return "–"
    sign = "+" if signed else ""
    text = f"{mean:{sign}.{digits}f}"
    if _finite(low) and _finite(high):
        text += f" [{low:{sign}.{digits}f}, {high:{sign}.{digits}f}]"
    return text


def interval_cell(row, key: str, digits: int = 3) -> str:
    """`format_interval` as the training studies' tables print a cell: signed for differences
    (keys with `_vs_`) and for the share of the oracle's gain (`recovered`)."""
    return format_interval(row, key, digits, signed="_vs_" in key or key == "recovered")


def run_finished(output_dir: str | Path, steps: int) -> bool:
    """Whether a `cotcredit train` run in `output_dir` was evaluated after `steps` steps (its
    `eval.json` has an "after" evaluation at that step or later): what a study skips on resume."""
    evaluation = Path(output_dir) / "eval.json"
    if not evaluation.is_file():
        return False
    e = json.loads(evaluation.read_text())
    return bool(e.get("after")) and int(e["after"].get("step", 0)) >= steps


def seed_summary_markdown(table, *, target: float, steps: int, window: int = 10) -> str:
    """``seed_run_summary``'s table as Markdown, with what each number is."""
    ci = format_interval

    def num(v, fmt: str) -> str:
        return format(v, fmt) if v is not None and math.isfinite(v) else "–"

    head = ("| mode | seeds | eval before | eval after | gain | after − grpo (paired) | "
            f"train reward, first → last {window} steps | step reaching reward "
            f"{target:g} (seeds) | s / step | RREDCoT scoring s / step | × grpo |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for _, r in table.iterrows():
        lines.append(
            f"| {r['mode']} | {r['seeds']} | {ci(r, 'eval_before')} | {ci(r, 'eval_after')} | "
            f"{ci(r, 'eval_gain')} | {ci(r, 'paired_diff')} | "
            f"{num(r['reward_first'], '.3f')} → {num(r['reward_last'], '.3f')} | "
            f"{num(r['steps_to_target'], '.0f')} ({r['reached']}/{r['seeds']}) | "
            f"{num(r['step_seconds'], '.1f')} | {num(r['rredcot_seconds'], '.1f')} | "
            f"{num(r['seconds_ratio'], '.2f')} |"
        )
    notes = (
        f"\n{steps} steps per run. Eval: held-out accuracy (greedy), mean over seeds with a 95% "
        "t-interval; paired: each seed's final accuracy minus grpo's at the same seed. Step "
        f"reaching: first step whose {window}-step moving train reward is ≥ {target:g}, mean over "
        "the seeds that reached it.\n"
    )
    return "\n".join(lines) + "\n" + notes
