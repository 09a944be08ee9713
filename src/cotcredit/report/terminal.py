"""The report's summary for the terminal, as rich tables."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from cotcredit.report.format import EMPTY, fmt, fmt_ci
from cotcredit.report.localization import Localization
from cotcredit.report.rollouts import RolloutAnalysis
from cotcredit.report.stats import ANALYSIS_ONLY, Correlations
from cotcredit.report.summaries import (
    agreement_summary,
    ceiling_summary,
    cost_rows,
    credit_text,
    equivalence_summary,
    localization_summary,
    paired_summary,
)


def summary_table(correlations: Correlations) -> Table:
    """Each pair's mean per-trace correlations (95% CI), then split-half reliability rows."""
    table = Table(title="Method agreement: mean per-trace correlation [95% bootstrap CI]")
    for name, justify in (
        ("method A", "left"),
        ("method B", "left"),
        ("Spearman", "right"),
        ("Pearson", "right"),
        ("Kendall", "right"),
        ("pooled Spearman", "right"),
        ("traces", "right"),
        ("skipped", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    agg = correlations.aggregates()
    skipped = correlations.skipped

    def n_skipped(a: str, b: str, analysis: bool) -> str:
        mine = skipped.loc[(skipped["method_a"] == a) & (skipped["method_b"] == b)]
        only = mine["reason"].str.endswith(ANALYSIS_ONLY)
        return str(int(mine.loc[only if analysis else ~only, "n_traces"].sum()))

    def cells(sel: pd.DataFrame, prefix: str) -> list[str]:
        return [
            fmt_ci(*sel.loc[f"{prefix}_{s}", ["value", "ci_low", "ci_high"]])
            if f"{prefix}_{s}" in sel.index
            else EMPTY
            for s in ("spearman", "pearson", "kendall")
        ]

    for a, b in correlations.pairs():
        sel = agg.loc[(agg["method_a"] == a) & (agg["method_b"] == b)].set_index("statistic")
        la, lb = correlations.label(a), correlations.label(b)
        if "mean_spearman" not in sel.index:
            table.add_row(la, lb, EMPTY, EMPTY, EMPTY, EMPTY, "0", n_skipped(a, b, False))
            continue
        pooled = (
            fmt(sel.loc["pooled_spearman", "value"]) if "pooled_spearman" in sel.index else EMPTY
        )
        n = str(int(sel.loc["mean_spearman", "n"]))
        table.add_row(la, lb, *cells(sel, "mean"), pooled, n, n_skipped(a, b, False))
    for m in correlations.split_half_methods():
        table.add_section()
        sel = agg.loc[(agg["method_a"] == m) & (agg["method_b"] == m)].set_index("statistic")
        n = str(int(sel.loc["mean_split_half_spearman", "n"]))
        skip = n_skipped(m, m, True)
        table.add_row(f"{m} split-half", m, *cells(sel, "mean_split_half"), EMPTY, n, skip)
    return table


def paired_table(correlations: Correlations) -> Table | None:
    """Paired differences of agreement with the reference (None without a reference)."""
    rows = paired_summary(correlations)
    if rows.empty:
        return None
    table = Table(title=f"Paired differences of agreement with {correlations.reference} "
                  "[95% bootstrap CI, same resamples]")
    for name in rows.columns:
        table.add_column(name, justify="left" if name in ("method", "versus") else "right")
    for row in rows.itertuples(index=False):
        table.add_row(*row)
    return table


def frame_table(title: str, rows: pd.DataFrame) -> Table:
    """Any of the report's formatted tables (string cells) as a rich table."""
    table = Table(title=title)
    for i, name in enumerate(rows.columns):
        table.add_column(str(name), justify="left" if i == 0 else "right")
    for row in rows.itertuples(index=False):
        table.add_row(*(str(c) for c in row))
    return table


def cost_table(costs: pd.DataFrame) -> Table:
    """Mean seconds and tokens per trace of each method, and the ratio to rredcot."""
    table = Table(title="Cost per trace (mean over the traces every method scored)")
    rows = cost_rows(costs)
    for name in rows.columns:
        table.add_column(name, justify="left" if name == "method" else "right")
    for row in rows.itertuples(index=False):
        table.add_row(*row)
    return table


def analysis_tables(
    correlations: Correlations,
    costs: pd.DataFrame | None = None,
    localization: Localization | None = None,
    rollouts: RolloutAnalysis | None = None,
) -> list[Table]:
    """What ``cotcredit compare`` prints against a reference: the agreement summary (with the
    credit definition), paired differences, rollout equivalence and ceiling, localization."""
    tables = []
    ref = correlations.reference
    if ref is not None:
        tables.append(frame_table(f"Agreement with {ref} [95% bootstrap CI] — "
                                  + credit_text(correlations), agreement_summary(correlations)))
        paired = paired_table(correlations)
        if paired is not None:
            tables.append(paired)
    if rollouts is not None and len(rollouts.equivalence):
        tables.append(frame_table(
            f"Rollout equivalence (agreement with {rollouts.held_out} held-out rollouts per "
            "boundary; MC cost scaled to n)",
            equivalence_summary(rollouts, costs, ref or "mc", correlations)))
        tables.append(frame_table("Agreement ceiling (error-free values vs N-rollout MC)",
                                  ceiling_summary(rollouts)))
    if localization is not None:
        loc = localization_summary(localization, correlations)
        if not loc.empty:
            tables.append(frame_table(
                f"First-error localization ({localization.counts.get('erroneous', 0)} "
                "erroneous traces)", loc))
    return tables
