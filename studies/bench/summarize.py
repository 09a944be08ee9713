"""The benchmark's tracked summary from a bench folder (the full run: studies/bench/run).

    python studies/bench/summarize.py [--run studies/bench/run]

Writes next to this script:

- leaderboard.md, leaderboard.csv: the bench's leaderboard (copied);
- comparisons.md, comparisons.csv: the protocol's primary comparisons — for every regime and
  method, the paired difference on the held-out split of localization top-1 and of MC-tracking
  Spearman with `refdiff`, with `entropy` and with the regime's best baseline (chosen on dev),
  and the false-blame rates beside chance, each with its 95% interval;
- leaderboard.png: localization and MC tracking by regime, every method and baseline with its
  interval.

Reads only the bench's own outputs (results.csv, leaderboard.csv, leaderboard.json).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
VERSUS = ("refdiff", "entropy")
BASELINES = ("refdiff", "entropy", "position", "position-length", "random")


def fmt(value: float, low: float = math.nan, high: float = math.nan) -> str:
    """``value [low, high]`` (3 decimals), ▲/▼ when the interval excludes 0 — for
    differences only, so callers add the mark."""
    if not math.isfinite(value):
        return "–"
    if math.isfinite(low) and math.isfinite(high):
        return f"{value:.3f} [{low:.3f}, {high:.3f}]"
    return f"{value:.3f}"


def mark(low: float, high: float) -> str:
    return " ▲" if low > 0 else " ▼" if high < 0 else ""


def comparisons(results: pd.DataFrame, board: pd.DataFrame, best: dict) -> pd.DataFrame:
    """The primary comparisons as one row per (regime, method, metric, versus)."""
    test = results.loc[results["split"] == "test"]
    rows = []
    for (regime, method), own in test.groupby(["regime", "method"], sort=False):
        if method in BASELINES:
            continue
        cell = own.set_index(["metric", "statistic"])
        chosen = best.get(regime, {})
        for metric, stat in (("localization", "top1"), ("mc_tracking", "spearman")):
            versus = list(VERSUS)
            b = chosen.get(metric, {}).get("baseline")
            if b and b not in versus:
                versus.append(b)
            for v in versus:
                key = (metric, f"{stat}_minus_{v}")
                if key not in cell.index:
                    continue
                r = cell.loc[key]
                rows.append({"regime": regime, "method": method, "metric": metric,
                             "versus": v + (" (best)" if v == b else ""),
                             "difference": r["value"], "ci_low": r["ci_low"],
                             "ci_high": r["ci_high"], "n": int(r["n"])})
        for metric in ("blame_departure", "blame_wrong_step"):
            key = (metric, "top1_minus_chance")
            if key in cell.index:
                r = cell.loc[key]
                rows.append({"regime": regime, "method": method, "metric": metric,
                             "versus": "chance", "difference": r["value"],
                             "ci_low": r["ci_low"], "ci_high": r["ci_high"], "n": int(r["n"])})
    return pd.DataFrame(rows)


def comparisons_markdown(table: pd.DataFrame) -> str:
    lines = ["# The benchmark's primary comparisons (held-out split)", "",
             "Paired differences per trace with 95% bootstrap intervals; ▲ / ▼: the interval "
             "lies above / below 0. Localization: top-1 on traces with a wrong step and a wrong "
             "answer. MC: mean per-trace Spearman with Monte Carlo. False blame: rate minus "
             "chance (lower is better).", ""]
    for regime, own in table.groupby("regime", sort=False):
        lines += [f"## {regime}", "", "| method | metric | versus | difference | n |",
                  "|---|---|---|---|---|"]
        for r in own.itertuples(index=False):
            lines.append(f"| {r.method} | {r.metric} | {r.versus} | "
                         f"{fmt(r.difference, r.ci_low, r.ci_high)}{mark(r.ci_low, r.ci_high)} | "
                         f"{r.n} |")
        lines.append("")
    return "\n".join(lines)


def figure(board: pd.DataFrame, path: Path) -> None:
    """Localization top-1 and MC-tracking Spearman per regime and row, with intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = list(dict.fromkeys(board["regime"]))
    methods = list(dict.fromkeys(board["method"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    width = 0.8 / max(len(methods), 1)
    cmap = plt.get_cmap("tab20")
    for ax, (key, title) in zip(axes, (("loc_top1", "localization (top-1)"),
                                       ("mc_spearman", "MC tracking (Spearman)")), strict=True):
        for j, m in enumerate(methods):
            own = board.loc[board["method"] == m].set_index("regime").reindex(regimes)
            x = [i + (j - len(methods) / 2 + 0.5) * width for i in range(len(regimes))]
            y = own[key].to_numpy(dtype=float)
            lo = y - own[f"{key}_low"].to_numpy(dtype=float)
            hi = own[f"{key}_high"].to_numpy(dtype=float) - y
            style = "s" if m in BASELINES else "o"
            ax.errorbar(x, y, yerr=[lo, hi], fmt=style, ms=4, lw=1, color=cmap(j % 20),
                        label=m + (" (baseline)" if m in BASELINES else ""))
        ax.set_xticks(range(len(regimes)), regimes)
        ax.set_title(title)
        ax.axhline(0, color="0.7", lw=0.8)
        ax.grid(axis="y", alpha=0.3)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    args = ap.parse_args(argv)
    results = pd.read_csv(args.run / "results.csv")
    board = pd.read_csv(args.run / "leaderboard.csv")
    info = json.loads((args.run / "leaderboard.json").read_text())["regimes"]
    best = {r: facts.get("best", {}) for r, facts in info.items()}
    shutil.copyfile(args.run / "leaderboard.md", HERE / "leaderboard.md")
    board.to_csv(HERE / "leaderboard.csv", index=False, float_format="%.4g")
    table = comparisons(results, board, best)
    table.to_csv(HERE / "comparisons.csv", index=False, float_format="%.4g")
    (HERE / "comparisons.md").write_text(comparisons_markdown(table))
    figure(board, HERE / "leaderboard.png")
    print(f"wrote {HERE / 'leaderboard.md'}, comparisons.md, leaderboard.png")


if __name__ == "__main__":
    main()
