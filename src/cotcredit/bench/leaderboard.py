"""The leaderboard: every method and baseline on every regime's held-out traces, each row
paired with the strongest baseline that reads no more than it reads (``cotcredit.bench.pairing``),
that baseline chosen on the development split.

Input: the metrics of each regime and split (``cotcredit.bench.metrics``) stacked into one
tidy table with ``regime`` and ``split`` columns (``RESULT_COLUMNS``). Each row's paired
differences are read on ``test``, on the traces both rows scored (``n`` says how many); a mark
(▲/▼) is shown only where that paired interval lies above or below 0. Intervals resample
problems (all samples of a problem together). False blame is shown beside chance (mean 1/K over
the same traces) and paired with the row's localization baseline: lower is better there, and a
method near chance blames neither the valid path nor the repaired step.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.bench.pairing import (
    BEST_BY,
    DEVELOPMENT,
    HELD_OUT,
    best_baselines,
    chosen,
    comparisons,
    paired,
)
from cotcredit.report.format import EMPTY, fmt, fmt_ci, fmt_count, fmt_seconds
from cotcredit.store import io

__all__ = ["BEST_BY", "DEVELOPMENT", "HELD_OUT", "LEADERBOARD_COLUMNS", "RESULT_COLUMNS",
           "best_baselines", "default_reads", "leaderboard", "render_comparisons",
           "render_markdown", "write_leaderboard"]

#: Columns of the stacked metrics table.
RESULT_COLUMNS = ("regime", "split", "metric", "method", "statistic", "value", "ci_low",
                  "ci_high", "n")
#: (prefix, metric) of the paired cells of each row.
_PAIRED = (("loc", "localization"), ("mc", "mc_tracking"),
           ("blame_departure", "blame_departure"), ("blame_wrong_step", "blame_wrong_step"))

#: Columns of the leaderboard (one row per regime and method or baseline).
LEADERBOARD_COLUMNS = (
    "regime", "method", "kind", "reads",
    "loc_top1", "loc_top1_low", "loc_top1_high", "loc_n", "loc_mean_rank", "loc_chance",
    "loc_best", "loc_vs_best", "loc_vs_best_low", "loc_vs_best_high", "loc_vs_best_n",
    "mc_spearman", "mc_spearman_low", "mc_spearman_high", "mc_n", "mc_ceiling", "mc_rollouts",
    "mc_best", "mc_vs_best", "mc_vs_best_low", "mc_vs_best_high", "mc_vs_best_n",
    "blame_departure", "blame_departure_low", "blame_departure_high", "blame_departure_chance",
    "blame_departure_n", "blame_departure_best", "blame_departure_vs_best",
    "blame_departure_vs_best_low", "blame_departure_vs_best_high", "blame_departure_vs_best_n",
    "blame_wrong_step", "blame_wrong_step_low", "blame_wrong_step_high",
    "blame_wrong_step_chance", "blame_wrong_step_n", "blame_wrong_step_best",
    "blame_wrong_step_vs_best", "blame_wrong_step_vs_best_low",
    "blame_wrong_step_vs_best_high", "blame_wrong_step_vs_best_n",
    "seconds", "forward_tokens", "generated_tokens", "tokens",
)


def default_reads(methods: Sequence[str], baselines: Sequence[str],
                  reference: str = "mc") -> dict[str, str]:
    """What each row reads when nothing says: baselines their own (``BASELINE_READS``), Monte
    Carlo (and its budgets ``mc-<n>``) nothing, any other method everything (``siblings``: it
    is then paired with the strongest baseline, never a weaker one)."""
    from cotcredit.bench.pairing import BASELINE_READS

    out = {m: ("none" if m == reference or m.startswith(f"{reference}-") else "siblings")
           for m in methods}
    return {**out, **{b: BASELINE_READS.get(b, "siblings") for b in baselines},
            reference: "none"}


def leaderboard(results: pd.DataFrame, methods: Sequence[str], baselines: Sequence[str],
                reference: str = "mc", reads: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per regime and row label on the held-out split (``LEADERBOARD_COLUMNS``):
    ``methods`` first, then the reference and its budgets (``mc-<n>``), then ``baselines``, in
    the given orders. ``reads``:
    label -> what it reads (``pairing.READS``; default ``default_reads``), which decides the
    baseline each method (and the reference) is paired with; baselines are not paired."""
    reads = {**default_reads(methods, baselines, reference), **(reads or {})}
    best = best_baselines(results, baselines)
    test = results.loc[results["split"] == HELD_OUT]
    out = []
    for regime, own in test.groupby("regime", sort=False):
        cell = own.set_index(["metric", "method", "statistic"])

        def get(metric: str, method: str, stat: str, what: str = "value",
                cell: pd.DataFrame = cell) -> float:
            key = (metric, method, stat)
            return float(cell.loc[key, what]) if key in cell.index else math.nan

        present = set(own["method"])
        budgets = [m for m in methods if m.startswith(f"{reference}-")]  # after Monte Carlo
        order = [*(m for m in methods if m not in budgets), reference, *budgets, *baselines]
        labels = [m for m in order if m in present]
        for m in dict.fromkeys(labels):
            kind = ("baseline" if m in baselines else "reference" if m == reference
                    else "method")
            row = {"regime": regime, "method": m, "kind": kind, "reads": reads.get(m, "")}
            def interval(name: str, metric: str, stat: str, n: str, m: str = m) -> dict:
                return {name: get(metric, m, stat), f"{name}_low": get(metric, m, stat, "ci_low"),
                        f"{name}_high": get(metric, m, stat, "ci_high"),
                        n: get(metric, m, stat, "n")}

            row |= interval("loc_top1", "localization", "top1", "loc_n")
            row |= {"loc_mean_rank": get("localization", m, "mean_rank"),
                    "loc_chance": get("localization", m, "chance_top1")}
            row |= interval("mc_spearman", "mc_tracking", "spearman", "mc_n")
            row |= {"mc_ceiling": get("mc_tracking", reference, "ceiling"),
                    "mc_rollouts": get("mc_tracking", m, "rollouts")}
            for metric in ("blame_departure", "blame_wrong_step"):
                row |= interval(metric, metric, "top1", f"{metric}_n")
                row[f"{metric}_chance"] = get(metric, m, "chance_top1")
            for key, metric in _PAIRED:
                b = chosen(best, regime, metric, row["reads"]) if kind != "baseline" else ""
                d = paired(cell, metric, m, b) if b else {}
                row[f"{key}_best"] = b
                for suffix, what in (("", "value"), ("_low", "ci_low"), ("_high", "ci_high"),
                                     ("_n", "n")):
                    row[f"{key}_vs_best{suffix}"] = d.get(what, math.nan)
            row |= {s: get("cost", m, s) for s in ("seconds", "forward_tokens",
                                                    "generated_tokens")}
            spent = [row["forward_tokens"], row["generated_tokens"]]
            row["tokens"] = (float(np.nansum(spent)) if any(math.isfinite(x) for x in spent)
                             else math.nan)
            out.append(row)
    return pd.DataFrame(out, columns=list(LEADERBOARD_COLUMNS))


# ----------------------------------------------------------------------------- rendering


def _ci(row: pd.Series, key: str) -> str:
    return fmt_ci(row[key], row[f"{key}_low"], row[f"{key}_high"])


def _mark(low: float, high: float) -> str:
    return " ▲" if low > 0 else " ▼" if high < 0 else ""


def _paired(row: pd.Series, key: str) -> str:
    """``difference [low, high] vs BASELINE (n)`` with its mark, or EMPTY."""
    value = row[f"{key}_vs_best"]
    if not math.isfinite(value):
        return EMPTY
    low, high = row[f"{key}_vs_best_low"], row[f"{key}_vs_best_high"]
    return (f"{fmt_ci(value, low, high)}{_mark(low, high)} vs {row[f'{key}_best']} "
            f"(n {int(row[f'{key}_vs_best_n'])})")


def _rate(row: pd.Series, key: str, n_key: str) -> str:
    if not math.isfinite(row[key]):
        return EMPTY
    return f"{_ci(row, key)} (n {int(row[n_key])})"


def _with_chance(row: pd.Series, key: str, chance: str, n: str) -> str:
    if not math.isfinite(row[key]):
        return EMPTY
    return f"{_ci(row, key)} (chance {fmt(row[chance], 2)}, n {int(row[n])})"


def _blame(row: pd.Series, key: str) -> str:
    return _with_chance(row, key, f"{key}_chance", f"{key}_n")


def _label(row: pd.Series) -> str:
    kind = " (baseline)" if row["kind"] == "baseline" else ""
    return f"{row['method']}{kind} [{row['reads']}]" if row["reads"] else row["method"] + kind


INTRO = (
    "Held-out traces of each regime. Localization: top-1 rate of the lowest-credit segment "
    "holding the first wrong step, on traces with a wrong step and a wrong answer, beside "
    "chance (mean 1/K over the same traces: a line drawn at random). MC: mean "
    "per-trace Spearman with Monte Carlo credits. False blame: how often the lowest credit "
    "lands on a valid departure from the reference (correct traces) or on a wrong step that "
    "the answer survived, beside chance; lower is better. [reads]: what a row reads (none, one "
    "reference solution, the listed solutions, also the right siblings). Each row is paired "
    "with the strongest baseline that reads no more than it does, chosen per metric on the "
    "development split (\"vs\" names it); paired differences are taken on the traces both rows "
    "scored (n), with 95% intervals from a bootstrap over problems (all samples of a problem "
    "resampled together, 2000 resamples); ▲/▼: the paired interval lies above/below 0. No mark "
    "compares rows scored on different traces.")


def render_markdown(board: pd.DataFrame, regimes: dict[str, dict] | None = None,
                    title: str = "cotcredit bench") -> str:
    """The leaderboard as Markdown: a method × regime summary of localization, then one table
    per regime with every metric, each paired cell naming its baseline and n."""
    regimes = regimes or {}
    names = list(dict.fromkeys(board["regime"]))

    def head(r: str) -> str:
        info = regimes.get(r, {})
        return r + (" †" if info.get("string_labels") else "") + (
            " ‡" if info.get("pending") else "")

    lines = [f"# {title}", "", INTRO, ""]
    if any(regimes.get(r, {}).get("string_labels") for r in names):
        lines += ["†: labels defined by string comparison (no trace has every step right; "
                  "see the regime's notes): not a test of string-based rows.", ""]
    if any(regimes.get(r, {}).get("pending") for r in names):
        lines += ["‡: the held-out split was incomplete when this leaderboard was made: the "
                  "rows it lacks are listed under the regime.", ""]
    lines += ["## Localization (top-1) by regime", "",
              "▲/▼: paired with the row's own baseline (the regime tables name it).", ""]
    cols = ["method", *map(head, names)]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for m in dict.fromkeys(board["method"]):
        cells = [m]
        for r in names:
            hit = board.loc[(board["regime"] == r) & (board["method"] == m)]
            if hit.empty or not math.isfinite(hit.iloc[0]["loc_top1"]):
                cells.append(EMPTY)
                continue
            row = hit.iloc[0]
            cells.append(fmt(row["loc_top1"], 2) + _mark(row["loc_vs_best_low"],
                                                         row["loc_vs_best_high"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for r in names:
        own = board.loc[board["regime"] == r]
        info = regimes.get(r, {})
        lines += [f"## {head(r)}", ""]
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
            problems = info.get("problems")
            where = f" from {problems} problems" if problems else ""
            lines += [f"Held-out traces{where}: " + "; ".join(facts) + ".", ""]
        left = info.get("left_out", {}).get("localization", {})
        if left:
            why = {"after_reasoning": "the first wrong step after the reasoning (a missing "
                   "step or the answer line)", "outside_segments": "the offset in no segment"}
            lines += ["Left out of localization: " + "; ".join(
                f"{n} with {why.get(k, k)}" for k, n in left.items()) + ".", ""]
        where = {c["chosen_on"] for by in info.get("best", {}).values() for c in by.values()}
        if HELD_OUT in where:
            lines += ["No development split: each row's baseline was chosen on the held-out "
                      "split, so its paired differences are not confirmatory.", ""]
        if info.get("string_labels"):
            lines += [f"† Labels defined by string comparison: {info['string_labels']}.", ""]
        if info.get("pending"):
            lines += [f"‡ Held-out split incomplete: {info['pending']}.", ""]
        ceiling = own["mc_ceiling"].dropna()
        if len(ceiling):
            lines += [f"Agreement ceiling of error-free values with this Monte Carlo: "
                      f"{fmt(float(ceiling.iloc[0]))}.", ""]
        cols = ["method [reads]", "localization (chance, n)", "Δ its baseline", "mean rank",
                "MC Spearman (n)", "Δ its baseline", "blame: valid path",
                "Δ its baseline", "blame: wrong step, right answer", "Δ its baseline",
                "s/trace", "tokens/trace"]
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for _, row in own.iterrows():
            lines.append("| " + " | ".join([
                _label(row), _with_chance(row, "loc_top1", "loc_chance", "loc_n"),
                _paired(row, "loc"),
                fmt(row["loc_mean_rank"], 2), _rate(row, "mc_spearman", "mc_n"),
                _paired(row, "mc"), _blame(row, "blame_departure"),
                _paired(row, "blame_departure"), _blame(row, "blame_wrong_step"),
                _paired(row, "blame_wrong_step"), fmt_seconds(row["seconds"]),
                fmt_count(row["tokens"]),
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


def render_comparisons(table: pd.DataFrame) -> str:
    """The paired comparisons (``pairing.comparisons``) as Markdown, one table per regime."""
    lines = ["# Paired comparisons (held-out split)", "",
             "Each row minus its best eligible baseline (best), minus the fixed rows every row "
             "meets (fixed), and its false blame minus chance, on the traces both rows scored "
             "(n); 95% intervals from a bootstrap over problems; ▲/▼: the interval lies "
             "above/below 0. For false blame lower is better.", ""]
    for regime, own in table.groupby("regime", sort=False):
        lines += [f"## {regime}", "", "| method [reads] | metric | versus | difference | n |",
                  "|---|---|---|---|---|"]
        for r in own.itertuples(index=False):
            lines.append(f"| {r.method} [{r.reads}] | {r.metric} | {r.versus} ({r.role}) | "
                         f"{fmt_ci(r.difference, r.ci_low, r.ci_high)}"
                         f"{_mark(r.ci_low, r.ci_high)} | {r.n} |")
        lines.append("")
    return "\n".join(lines)


def write_leaderboard(board: pd.DataFrame, results: pd.DataFrame, out_dir: Path,
                      regimes: dict[str, dict] | None = None,
                      reads: Mapping[str, str] | None = None,
                      baselines: Sequence[str] | None = None,
                      keep_results: bool = True) -> dict[str, Path]:
    """leaderboard.md, leaderboard.csv, leaderboard.json (the rows and each regime's facts),
    with ``keep_results`` results.csv (every statistic of every split) and, with
    ``baselines``, the paired comparisons (comparisons.md, comparisons.csv) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out_dir / "leaderboard.md", "csv": out_dir / "leaderboard.csv",
             "json": out_dir / "leaderboard.json"}
    io.write_atomic(paths["markdown"], render_markdown(board, regimes))
    io.write_atomic(paths["csv"], board.to_csv(index=False, float_format="%.6g"))
    rows = json.loads(board.to_json(orient="records", double_precision=6))
    io.write_atomic(paths["json"], json.dumps({"regimes": regimes or {}, "rows": rows},
                                              indent=1) + "\n")
    if keep_results:
        paths["results"] = out_dir / "results.csv"
        io.write_atomic(paths["results"], results.to_csv(index=False))
    if baselines is not None:
        labels = dict(zip(board["method"], board["reads"], strict=True))
        table = comparisons(results, {**labels, **(reads or {})}, baselines)
        paths["comparisons"] = out_dir / "comparisons.md"
        paths["comparisons_csv"] = out_dir / "comparisons.csv"
        io.write_atomic(paths["comparisons"], render_comparisons(table))
        io.write_atomic(paths["comparisons_csv"], table.to_csv(index=False, float_format="%.6g"))
    return paths
