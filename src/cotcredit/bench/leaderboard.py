"""The leaderboard: every method and baseline on every regime's held-out traces, each method
paired with the best baseline of its regime, that baseline chosen on the development split.

Input: the metrics of each regime and split (``cotcredit.bench.metrics``) stacked into one
tidy table with ``regime`` and ``split`` columns (``RESULT_COLUMNS``). The best baseline is
chosen per regime and per metric on ``dev`` (``BEST_BY``: the highest top-1 localization, the
highest mean Spearman with Monte Carlo), and every method's paired difference with it is then
read on ``test`` (the same per-trace pairing as every paired row). Where dev has no value of a
metric (a quick run without Monte Carlo on dev), the choice is made on test and ``chosen_on``
says so. False blame is shown beside
chance (mean 1/K over the same traces) with the paired difference from chance: lower is
better there, and a method near chance blames neither the valid path nor the repaired step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.report.format import EMPTY, fmt, fmt_ci, fmt_count, fmt_seconds
from cotcredit.store import io

#: Columns of the stacked metrics table.
RESULT_COLUMNS = ("regime", "split", "metric", "method", "statistic", "value", "ci_low",
                  "ci_high", "n")
#: How the best baseline of each metric is chosen on dev: (statistic, higher is better).
BEST_BY = {"localization": ("top1", True), "mc_tracking": ("spearman", True)}
HELD_OUT, DEVELOPMENT = "test", "dev"

#: Columns of the leaderboard (one row per regime and method or baseline).
LEADERBOARD_COLUMNS = (
    "regime", "method", "kind",
    "loc_top1", "loc_top1_low", "loc_top1_high", "loc_n", "loc_mean_rank", "loc_chance",
    "loc_best", "loc_vs_best", "loc_vs_best_low", "loc_vs_best_high",
    "mc_spearman", "mc_spearman_low", "mc_spearman_high", "mc_n", "mc_ceiling", "mc_rollouts",
    "mc_best", "mc_vs_best", "mc_vs_best_low", "mc_vs_best_high",
    "blame_departure", "blame_departure_low", "blame_departure_high", "blame_departure_chance",
    "blame_departure_n",
    "blame_wrong_step", "blame_wrong_step_low", "blame_wrong_step_high",
    "blame_wrong_step_chance", "blame_wrong_step_n",
    "seconds", "forward_tokens", "generated_tokens",
)


def best_baselines(results: pd.DataFrame, baselines: Sequence[str]) -> pd.DataFrame:
    """Per regime and metric of ``BEST_BY``: the best baseline on dev (test where a regime has
    no dev rows). Columns: regime, metric, baseline, value, chosen_on."""
    rows = []
    for regime, own in results.groupby("regime", sort=False):
        for metric, (stat, higher) in BEST_BY.items():
            pool = own.loc[(own["metric"] == metric) & (own["statistic"] == stat)
                           & own["method"].isin(baselines) & np.isfinite(own["value"])]
            split = DEVELOPMENT if (pool["split"] == DEVELOPMENT).any() else HELD_OUT
            cand = pool.loc[pool["split"] == split]
            if cand.empty:
                continue
            # ties: the first in the baselines' order
            order = cand.assign(pos=cand["method"].map({b: i for i, b in enumerate(baselines)}))
            order = order.sort_values(["value", "pos"], ascending=[not higher, True])
            best = order.iloc[0]
            rows.append({"regime": regime, "metric": metric, "baseline": best["method"],
                         "value": float(best["value"]), "chosen_on": split})
    return pd.DataFrame(rows, columns=["regime", "metric", "baseline", "value", "chosen_on"])


def leaderboard(results: pd.DataFrame, methods: Sequence[str], baselines: Sequence[str],
                reference: str = "mc") -> pd.DataFrame:
    """One row per regime and row label on the held-out split (``LEADERBOARD_COLUMNS``):
    ``methods`` first, then the reference, then ``baselines``, in the given orders."""
    best = best_baselines(results, baselines)
    test = results.loc[results["split"] == HELD_OUT]
    out = []
    for regime, own in test.groupby("regime", sort=False):
        cell = own.set_index(["metric", "method", "statistic"])

        def get(metric: str, method: str, stat: str, what: str = "value",
                cell: pd.DataFrame = cell) -> float:
            key = (metric, method, stat)
            return float(cell.loc[key, what]) if key in cell.index else math.nan

        chosen = best.loc[best["regime"] == regime].set_index("metric")["baseline"].to_dict()
        present = set(own["method"])
        labels = [m for m in [*methods, reference, *baselines] if m in present]
        for m in dict.fromkeys(labels):
            kind = ("baseline" if m in baselines else "reference" if m == reference
                    else "method")
            row = {"regime": regime, "method": m, "kind": kind}
            row |= {"loc_top1": get("localization", m, "top1"),
                    "loc_top1_low": get("localization", m, "top1", "ci_low"),
                    "loc_top1_high": get("localization", m, "top1", "ci_high"),
                    "loc_n": get("localization", m, "top1", "n"),
                    "loc_mean_rank": get("localization", m, "mean_rank"),
                    "loc_chance": get("localization", m, "chance_top1")}
            for key, metric, stat in (("loc", "localization", "top1"),
                                      ("mc", "mc_tracking", "spearman")):
                b = chosen.get(metric)
                row[f"{key}_best"] = b or ""
                paired = f"{stat}_minus_{b}"
                row[f"{key}_vs_best"] = get(metric, m, paired) if b and b != m else math.nan
                row[f"{key}_vs_best_low"] = get(metric, m, paired, "ci_low") if b else math.nan
                row[f"{key}_vs_best_high"] = get(metric, m, paired, "ci_high") if b else math.nan
            row |= {"mc_spearman": get("mc_tracking", m, "spearman"),
                    "mc_spearman_low": get("mc_tracking", m, "spearman", "ci_low"),
                    "mc_spearman_high": get("mc_tracking", m, "spearman", "ci_high"),
                    "mc_n": get("mc_tracking", m, "spearman", "n"),
                    "mc_ceiling": get("mc_tracking", reference, "ceiling"),
                    "mc_rollouts": get("mc_tracking", m, "rollouts")}
            for metric in ("blame_departure", "blame_wrong_step"):
                row |= {metric: get(metric, m, "top1"),
                        f"{metric}_low": get(metric, m, "top1", "ci_low"),
                        f"{metric}_high": get(metric, m, "top1", "ci_high"),
                        f"{metric}_chance": get(metric, m, "chance_top1"),
                        f"{metric}_n": get(metric, m, "top1", "n")}
            row |= {s: get("cost", m, s) for s in ("seconds", "forward_tokens",
                                                    "generated_tokens")}
            out.append(row)
    frame = pd.DataFrame(out, columns=list(LEADERBOARD_COLUMNS))
    return frame


# ----------------------------------------------------------------------------- rendering


def _ci(row: pd.Series, key: str) -> str:
    return fmt_ci(row[key], row[f"{key}_low"], row[f"{key}_high"])


def _paired(row: pd.Series, key: str) -> str:
    value, low, high = row[f"{key}_vs_best"], row[f"{key}_vs_best_low"], row[f"{key}_vs_best_high"]
    if not math.isfinite(value):
        return EMPTY
    mark = " ▲" if low > 0 else " ▼" if high < 0 else ""
    return fmt_ci(value, low, high) + mark


def _blame(row: pd.Series, key: str) -> str:
    if not math.isfinite(row[key]):
        return EMPTY
    return f"{_ci(row, key)} ({fmt(row[f'{key}_chance'], 2)})"


def _tokens(row: pd.Series) -> str:
    parts = [row["forward_tokens"], row["generated_tokens"]]
    if not any(math.isfinite(p) for p in parts):
        return EMPTY
    return fmt_count(float(np.nansum(parts)))


def render_markdown(board: pd.DataFrame, regimes: dict[str, dict] | None = None,
                    title: str = "cotcredit bench") -> str:
    """The leaderboard as Markdown: a method × regime summary of localization, then one table
    per regime with every metric (▲/▼: the paired interval with the best baseline lies above /
    below 0)."""
    regimes = regimes or {}
    names = list(dict.fromkeys(board["regime"]))
    lines = [f"# {title}", "",
             "Held-out traces of each regime. Localization: top-1 rate of the lowest-credit "
             "segment holding the first wrong step, on traces with a wrong step and a wrong "
             "answer. MC: mean per-trace Spearman with Monte Carlo credits. Paired differences "
             "are with the regime's best baseline, chosen on the development split (▲/▼: the "
             "95% paired interval lies above/below 0). False blame: how often the lowest "
             "credit lands on a valid departure from the reference (correct traces) or on a "
             "wrong step that the answer survived, with chance in parentheses.", ""]
    lines += ["## Localization (top-1) by regime", ""]
    head = ["method", *names]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in dict.fromkeys(board["method"]):
        cells = [m]
        for r in names:
            hit = board.loc[(board["regime"] == r) & (board["method"] == m)]
            if hit.empty or not math.isfinite(hit.iloc[0]["loc_top1"]):
                cells.append(EMPTY)
                continue
            row = hit.iloc[0]
            mark = ""
            if math.isfinite(row["loc_vs_best"]):
                mark = " ▲" if row["loc_vs_best_low"] > 0 else (
                    " ▼" if row["loc_vs_best_high"] < 0 else "")
            cells.append(fmt(row["loc_top1"], 2) + mark)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for r in names:
        own = board.loc[board["regime"] == r]
        info = regimes.get(r, {})
        lines += [f"## {r}", ""]
        if info.get("description"):
            lines += [info["description"], ""]
        facts = []
        for key, text in (("localization", "wrong step and wrong answer"),
                          ("blame_departure", "correct, validly departing"),
                          ("blame_wrong_step", "wrong step, right answer"),
                          ("mc_tracking", "scored by Monte Carlo")):
            n = info.get("counts", {}).get(key)
            if n is not None:
                facts.append(f"{n} {text}")
        if facts:
            lines += ["Held-out traces: " + "; ".join(facts) + ".", ""]
        left = info.get("left_out", {}).get("localization", {})
        if left:
            why = {"after_reasoning": "the first wrong step after the reasoning (a missing "
                   "step or the answer line)", "outside_segments": "the offset in no segment"}
            lines += ["Left out of localization: " + "; ".join(
                f"{n} with {why.get(k, k)}" for k, n in left.items()) + ".", ""]
        best = info.get("best", {})
        if best:
            lines += ["Best baseline (chosen on " + ", ".join(
                f"{metric}: {b['baseline']} on {b['chosen_on']}" for metric, b in best.items())
                + ").", ""]
        ceiling = own["mc_ceiling"].dropna()
        if len(ceiling):
            lines += [f"Agreement ceiling of error-free values with this Monte Carlo: "
                      f"{fmt(float(ceiling.iloc[0]))}.", ""]
        head = ["method", "localization", "Δ best", "mean rank", "MC Spearman", "Δ best",
                "blame: valid path", "blame: wrong step, right answer", "s/trace", "tokens"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for _, row in own.iterrows():
            label = row["method"] + (" (baseline)" if row["kind"] == "baseline" else "")
            lines.append("| " + " | ".join([
                label, _ci(row, "loc_top1"), _paired(row, "loc"), fmt(row["loc_mean_rank"], 2),
                _ci(row, "mc_spearman"), _paired(row, "mc"), _blame(row, "blame_departure"),
                _blame(row, "blame_wrong_step"), fmt_seconds(row["seconds"]), _tokens(row),
            ]) + " |")
        for note in info.get("notes", []):
            lines.append(f"\nNote: {note}")
        lines.append("")
    absent = {r: info["missing"] for r, info in regimes.items()
              if info.get("missing") and r not in names}
    if absent:
        lines += ["## Not in this run", ""]
        lines += [f"- `{r}`: {why}." for r, why in absent.items()]
        lines.append("")
    return "\n".join(lines)


def write_leaderboard(board: pd.DataFrame, results: pd.DataFrame, out_dir: Path,
                      regimes: dict[str, dict] | None = None) -> dict[str, Path]:
    """leaderboard.md, leaderboard.csv, leaderboard.json (the rows and each regime's facts) and
    results.csv (every statistic of every split) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "leaderboard.md", "csv": out_dir / "leaderboard.csv",
             "json": out_dir / "leaderboard.json", "results": out_dir / "results.csv"}
    io.write_atomic(paths["markdown"], render_markdown(board, regimes))
    io.write_atomic(paths["csv"], board.to_csv(index=False))
    rows = json.loads(board.to_json(orient="records"))
    io.write_atomic(paths["json"], json.dumps({"regimes": regimes or {}, "rows": rows},
                                              indent=1) + "\n")
    io.write_atomic(paths["results"], results.to_csv(index=False))
    return paths
