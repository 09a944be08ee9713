"""The rollout pool: Monte Carlo's saved rollouts in compact form, and Monte Carlo with fewer
rollouts computed from it.

Monte Carlo draws rollout j of a boundary from its own random stream (the seed, the trace, the
boundary and j; ``cotcredit.lm.sampling``), so the first n rollouts of a run with N ≥ n are
exactly what a run with n rollouts draws. One run with many rollouts per boundary therefore
holds Monte Carlo at every smaller budget: ``pool_counts(pool, n)`` gives the per-boundary
counts of the first n, and ``mc_rows`` the credits Monte Carlo with n rollouts writes.

The compact form (``pack_pool``): one row per (trace, boundary) with the rollouts' outcomes as
bits (bit j: rollout j counted correct; a cut-off rollout counts wrong unless
``drop_truncated``, then it is left out of the total as Monte Carlo's ``drop`` policy does), the
number of rollouts and the generated tokens of the first 4, 8, 16 and all of them (what a
budget costs). 32 rollouts take 4 bytes a boundary.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

#: Columns of a packed pool.
POOL_COLUMNS = ("trace_id", "boundary", "rollouts", "bits", "kept")
#: Budgets whose generated tokens the packed pool keeps (``tokens_<n>``; all: ``tokens``).
TOKEN_BUDGETS = (4, 8, 16)


def pack_pool(rollouts: pd.DataFrame, drop_truncated: bool = False) -> pd.DataFrame:
    """The compact pool of a saved rollouts table (``--save-rollouts``: trace_id, boundary,
    sample, correct, truncated, n_tokens): ``POOL_COLUMNS`` plus ``tokens`` and
    ``tokens_<n>`` for each of ``TOKEN_BUDGETS``. ``bits``: bit j set when rollout j is
    correct; ``kept``: bit j set when rollout j counts in the total (all of them unless
    ``drop_truncated`` leaves the cut-off ones out). At most 64 rollouts per boundary."""
    r = rollouts[["trace_id", "boundary", "sample", "correct", "truncated", "n_tokens"]].copy()
    r["trace_id"] = r["trace_id"].astype(str)
    sample = r["sample"].to_numpy(dtype="int64")
    if len(sample) and (sample.min() < 0 or sample.max() > 63):
        raise ValueError("pack_pool: rollout indices must lie in 0..63")
    truncated = r["truncated"].astype(bool).to_numpy()
    correct = r["correct"].astype(bool).to_numpy() & ~truncated
    kept = ~truncated if drop_truncated else np.ones(len(r), bool)
    one = np.left_shift(np.uint64(1), sample.astype("uint64"))
    r["bits"] = np.where(correct & kept, one, np.uint64(0))
    r["kept"] = np.where(kept, one, np.uint64(0))
    tokens = r["n_tokens"].to_numpy(dtype="int64")
    r["tokens"] = tokens
    for n in TOKEN_BUDGETS:
        r[f"tokens_{n}"] = np.where(sample < n, tokens, 0)
    keys = ["trace_id", "boundary"]
    grouped = r.groupby(keys, sort=True)
    out = grouped[["tokens", *(f"tokens_{n}" for n in TOKEN_BUDGETS)]].sum()
    out["rollouts"] = grouped["sample"].max() + 1
    out["bits"] = grouped["bits"].agg(np.bitwise_or.reduce).astype("uint64")
    out["kept"] = grouped["kept"].agg(np.bitwise_or.reduce).astype("uint64")
    out = out.reset_index()
    return out[[*POOL_COLUMNS, "tokens", *(f"tokens_{n}" for n in TOKEN_BUDGETS)]]


def _popcount(x: np.ndarray) -> np.ndarray:
    """Set bits of each uint64."""
    x = x.astype("uint64")
    as_bytes = x.view(np.uint8).reshape(-1, 8)
    return np.unpackbits(as_bytes, axis=1).sum(axis=1).astype("int64")


def pool_counts(pool: pd.DataFrame, n: int | None = None) -> pd.DataFrame:
    """Correct and total rollouts per (trace_id, boundary) among the first ``n`` rollouts of
    each boundary (None: all), from a packed pool: what ``counts_from_rollouts`` gives for a
    run with ``n`` rollouts. A boundary with fewer than ``n`` rollouts is a ``ValueError``."""
    rollouts = pool["rollouts"].to_numpy(dtype="int64")
    if n is not None and (rollouts < n).any():
        raise ValueError(f"pool_counts: a boundary has {int(rollouts.min())} rollouts, "
                         f"fewer than {n}")
    every = np.uint64(2**64 - 1)  # the bits past a boundary's rollouts are 0 anyway
    first_n = every if n is None or n >= 64 else (np.uint64(1) << np.uint64(n)) - np.uint64(1)
    mask = np.full(len(pool), first_n, dtype="uint64")
    bits = pool["bits"].to_numpy(dtype="uint64") & mask
    kept = pool["kept"].to_numpy(dtype="uint64") & mask
    return pd.DataFrame({"trace_id": pool["trace_id"].astype(str).to_numpy(),
                         "boundary": pool["boundary"].to_numpy(dtype="int64"),
                         "correct": _popcount(bits), "total": _popcount(kept)})


def mc_rows(segments: pd.DataFrame, counts: pd.DataFrame, label: str) -> pd.DataFrame:
    """Monte Carlo's score rows from per-boundary ``counts`` (``pool_counts``), on the
    segmentation ``segments`` (one row per trace and segment, boundaries 0..K for K
    segments): ``value_before`` / ``value_after`` = correct / total at the segment's start and
    end boundary, ``score`` their difference, ``n_rollouts`` / ``n_correct`` at its end.
    Traces whose boundaries are not all in ``counts`` get no rows."""
    seg = segments.drop_duplicates(["trace_id", "segment"]).copy()
    seg["trace_id"] = seg["trace_id"].astype(str)
    seg = seg.sort_values(["trace_id", "segment"], kind="stable")
    seg["rank"] = seg.groupby("trace_id").cumcount()
    c = counts.set_index(["trace_id", "boundary"])
    value = (c["correct"] / c["total"]).astype("float64")

    def at(boundary: pd.Series) -> pd.Series:
        key = pd.MultiIndex.from_arrays([seg["trace_id"], boundary])
        return pd.Series(value.reindex(key).to_numpy(), index=seg.index)

    seg["value_before"] = at(seg["rank"])
    seg["value_after"] = at(seg["rank"] + 1)
    end = pd.MultiIndex.from_arrays([seg["trace_id"], seg["rank"] + 1])
    seg["n_rollouts"] = c["total"].reindex(end).to_numpy()
    seg["n_correct"] = c["correct"].reindex(end).to_numpy()
    whole = seg[["value_before", "value_after"]].notna().all(axis=1)
    whole = whole.groupby(seg["trace_id"]).transform("all")
    out = seg.loc[whole].drop(columns="rank")
    out["score"] = out["value_after"] - out["value_before"]
    out["method"] = label
    return out.reset_index(drop=True)


def budget_rows(segments: pd.DataFrame, pool: pd.DataFrame, budgets: Sequence[int],
                reference: pd.DataFrame | None = None, prefix: str = "mc") -> pd.DataFrame:
    """The rows ``<prefix>-<n>`` of Monte Carlo with n rollouts per boundary, for each n of
    ``budgets``, from the pool. With ``reference`` (the full run's score rows, one row per
    segment with its cost columns), each budget's cost per trace: the run's forward tokens
    (the prefixes are read once, whatever n), and its generated tokens and seconds scaled by
    the share of the generated tokens the first n rollouts took."""
    parts = []
    tokens = pool.groupby(pool["trace_id"].astype(str))["tokens"].sum()
    for n in budgets:
        rows = mc_rows(segments, pool_counts(pool, n), f"{prefix}-{n}")
        if reference is not None and "cost_generated_tokens" in reference.columns:
            column = f"tokens_{n}" if n in TOKEN_BUDGETS else None
            spent = (pool.groupby(pool["trace_id"].astype(str))[column].sum() if column
                     else tokens)
            share = (spent / tokens.where(tokens > 0)).fillna(0.0)
            cost = reference.drop_duplicates("trace_id").set_index(
                reference.drop_duplicates("trace_id")["trace_id"].astype(str))
            tid = rows["trace_id"]
            frac = tid.map(share).to_numpy(dtype="float64")
            if "cost_forward_tokens" in cost.columns:
                rows["cost_forward_tokens"] = tid.map(cost["cost_forward_tokens"]).to_numpy()
            rows["cost_generated_tokens"] = tid.map(spent).to_numpy(dtype="float64")
            if "cost_seconds" in cost.columns:
                rows["cost_seconds"] = tid.map(cost["cost_seconds"]).to_numpy() * frac
        parts.append(rows)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
