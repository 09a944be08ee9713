"""The report's summary for the terminal, as rich tables."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from cotcredit.report.format import EMPTY, fmt, fmt_ci
from cotcredit.report.render import cost_rows
from cotcredit.report.stats import ANALYSIS_ONLY, Correlations


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
        if "mean_spearman" not in sel.index:
            table.add_row(a, b, EMPTY, EMPTY, EMPTY, EMPTY, "0", n_skipped(a, b, False))
            continue
        pooled = (
            fmt(sel.loc["pooled_spearman", "value"]) if "pooled_spearman" in sel.index else EMPTY
        )
        n = str(int(sel.loc["mean_spearman", "n"]))
        table.add_row(a, b, *cells(sel, "mean"), pooled, n, n_skipped(a, b, False))
    for m in correlations.split_half_methods():
        table.add_section()
        sel = agg.loc[(agg["method_a"] == m) & (agg["method_b"] == m)].set_index("statistic")
        n = str(int(sel.loc["mean_split_half_spearman", "n"]))
        skip = n_skipped(m, m, True)
        table.add_row(f"{m} split-half", m, *cells(sel, "mean_split_half"), EMPTY, n, skip)
        table.add_row(f"{m} Spearman–Brown", m, *cells(sel, "spearman_brown"), EMPTY, n, skip)
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
