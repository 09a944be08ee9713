"""What each method cost: seconds and model tokens per trace, and the ratio to a baseline.

Each method writes, on every row of a trace, what a run of it alone would pay: ``cost_seconds``,
``cost_forward_tokens`` (the shared trace pass if it reads it, its probes, rollout prompts) and
``cost_generated_tokens``. The summary averages them over the traces every costed method scored
and divides by the baseline's (RREDCoT by default).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cotcredit.methods import method_order

#: Per-trace cost columns of a score table.
COST_COLUMNS = ("cost_seconds", "cost_forward_tokens", "cost_generated_tokens")
#: Columns of ``cost_summary``'s table and of ``costs.parquet``, in this order.
COST_SUMMARY_COLUMNS = (
    "method",
    "traces",
    "seconds",
    "forward_tokens",
    "generated_tokens",
    "tokens",
    "seconds_ratio",
    "tokens_ratio",
)


def cost_summary(scores: pd.DataFrame, baseline: str = "rredcot") -> pd.DataFrame | None:
    """Mean cost per trace of every method that recorded one; None when none did.

    Columns (``COST_SUMMARY_COLUMNS``): ``seconds``, ``forward_tokens``, ``generated_tokens``
    and ``tokens`` (forward + generated) are means per trace over the traces shared by all the
    costed methods (``traces`` of them); ``seconds_ratio`` and ``tokens_ratio`` divide them by
    the baseline's means (NaN when the baseline recorded no cost).
    """
    present = [c for c in COST_COLUMNS if c in scores.columns]
    if not present:
        return None
    costs = scores[["trace_id", "method", *present]].copy()
    for col in present:
        costs[col] = pd.to_numeric(costs[col], errors="coerce")
    # One value per trace and method (repeated on its rows); first non-null wins.
    per_trace = costs.groupby(["method", "trace_id"], sort=False)[present].first()
    per_trace = per_trace.loc[per_trace.notna().any(axis=1)]
    if per_trace.empty:
        return None
    methods = method_order(per_trace.index.get_level_values("method").unique())
    traces_of = {m: set(per_trace.loc[m].index) for m in methods}
    shared = set.intersection(*traces_of.values())
    if not shared:
        return None  # no trace scored by every costed method: nothing to compare on

    rows = []
    for method in methods:
        own = per_trace.loc[method]
        own = own.loc[own.index.isin(shared)]
        means = {c: float(own[c].mean()) if c in own else np.nan for c in COST_COLUMNS}
        forward = means["cost_forward_tokens"]
        generated = means["cost_generated_tokens"]
        # Methods that generate nothing leave generated tokens empty: count them as 0.
        recorded = np.isfinite([forward, generated])
        tokens = np.nansum([forward, generated]) if recorded.any() else np.nan
        rows.append(
            {
                "method": method,
                "traces": len(own),
                "seconds": means["cost_seconds"],
                "forward_tokens": forward,
                "generated_tokens": generated,
                "tokens": float(tokens),
            }
        )
    table = pd.DataFrame(rows)
    base = table.loc[table["method"] == baseline]
    for what in ("seconds", "tokens"):
        denominator = float(base[what].iloc[0]) if len(base) else np.nan
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (
                table[what] / denominator if denominator and np.isfinite(denominator) else np.nan
            )
        table[f"{what}_ratio"] = ratio
    return table[list(COST_SUMMARY_COLUMNS)].astype({"method": "str", "traces": "int64"})
