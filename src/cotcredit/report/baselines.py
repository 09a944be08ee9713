"""Baselines that read no reasoning text: the rows every method must beat.

With a handful of segments per trace, where a segment sits and whether the trace ended right
already say much of what Monte Carlo says about it. Two baselines make that visible; they are
added to the score table as rows of their own (``method`` = the baseline's name) and so appear
in every table, figure and LaTeX output, marked as baselines:

* ``position``: a segment's credit is the mean *reference-method* credit at the same relative
  position among the *other* traces with the same outcome (leave one trace out, so a trace's
  own reference credits never enter its baseline). Relative position binning: with B = the most
  common number of segments per trace, segment k of a trace with K segments falls in bin
  ``min(B − 1, floor((k + 0.5) · B / K))``; when every trace has K segments, bin = k. Outcome:
  the ``outcome`` column of any table's rows (``cotcredit.report.credit.trace_outcomes``);
  traces without one form their own group, and without any outcome all traces form one group.
  A cell with no other trace falls back to the same bin over all outcomes (still leaving the
  trace out), then to 0.
* ``uniform``: the trace's outcome ζ spread evenly, ζ / K on each of its K segments (NaN where
  the outcome is unknown). It is constant within a trace, so it orders nothing: its per-trace
  correlations are 0 and its top-1 and localization are chance (see ``cotcredit.report.stats``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from cotcredit.errors import UserError
from cotcredit.report.credit import trace_outcomes

#: The baselines ``baseline_scores`` knows.
BASELINES = ("position", "uniform")
_KEEP = ("trace_id", "segment", "char_start", "char_end", "text")


def parse_baselines(baselines: str | Sequence[str]) -> list[str]:
    """Baseline names from ``"position,uniform"`` or a list (``""``/``"none"``: none)."""
    names = baselines.split(",") if isinstance(baselines, str) else list(baselines)
    names = list(dict.fromkeys(n.strip() for n in names if n.strip() and n.strip() != "none"))
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise UserError(
            f"--baselines: unknown baseline {unknown[0]!r} (known: {', '.join(BASELINES)}, none)"
        )
    return names


def position_bins(n_segments: np.ndarray, segment_rank: np.ndarray, n_bins: int) -> np.ndarray:
    """Relative-position bin of each segment (see the module docstring)."""
    return np.minimum(n_bins - 1, ((segment_rank + 0.5) * n_bins // n_segments).astype("int64"))


def _segmentation(scores: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """One row per (trace, segment) with its span and text, from any method's rows, sorted by
    trace and segment; with each segment's rank in its trace and its trace's segment count in
    columns ``rank`` and ``k``. Also returns each score row's position in it and the sorted
    (trace, segment) keys (integer work: a table of 100,000 traces hashes no strings here)."""
    codes, _ = pd.factorize(scores["trace_id"], sort=True)
    segment = scores["segment"].to_numpy(dtype="int64")
    width = int(segment.max()) + 1 if len(segment) else 1
    key = codes.astype("int64") * width + segment
    keys, first, row_to_seg = np.unique(key, return_index=True, return_inverse=True)
    seg = scores.iloc[first][list(_KEEP)].reset_index(drop=True)
    code = keys // width
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    sizes = np.diff(np.r_[starts, len(code)])
    group = np.repeat(np.arange(len(starts)), sizes)
    seg["rank"] = np.arange(len(code)) - starts[group]
    seg["k"] = sizes[group]
    seg["code"] = group
    return seg, row_to_seg, keys


def position_baseline(scores: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Rows of the ``position`` baseline for every trace in ``scores`` (see module docstring)."""
    seg, row_to_seg, _ = _segmentation(scores)
    if seg.empty:
        return seg.assign(method="position", score=np.nan)
    k = seg["k"].to_numpy()
    n_bins = int(pd.Series(k[seg["rank"].to_numpy() == 0]).mode().max())
    bins = position_bins(k, seg["rank"].to_numpy(), n_bins)
    outcomes = trace_outcomes(scores)
    zeta = seg["trace_id"].map(outcomes).to_numpy(dtype="float64")
    # Unknown outcomes (NaN) form a group of their own.
    _, group = np.unique(np.where(np.isnan(zeta), -np.inf, zeta), return_inverse=True)
    ref_rows = (scores["method"] == reference).to_numpy()
    credit = scores["score"].to_numpy(dtype="float64")
    val = np.zeros(len(seg))
    has = np.zeros(len(seg))
    use = ref_rows & np.isfinite(credit)
    val[row_to_seg[use]] = credit[use]
    has[row_to_seg[use]] = 1.0
    trace = seg["code"].to_numpy()
    n_t = int(trace.max()) + 1

    def loto(cell: np.ndarray, n_cells: int) -> tuple[np.ndarray, np.ndarray]:
        """Sum and count of the reference credits in each segment's cell, minus its trace's."""
        own_cell = trace * n_cells + cell
        s_all = np.bincount(cell, val, n_cells)[cell]
        n_all = np.bincount(cell, has, n_cells)[cell]
        s_own = np.bincount(own_cell, val, n_t * n_cells)[own_cell]
        n_own = np.bincount(own_cell, has, n_t * n_cells)[own_cell]
        return s_all - s_own, n_all - n_own

    n_groups = int(group.max()) + 1
    s_same, n_same = loto(group * n_bins + bins, n_groups * n_bins)
    s_any, n_any = loto(bins, n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n_same > 0, s_same / n_same, np.where(n_any > 0, s_any / n_any, 0.0))
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "position"
    out["score"] = value
    out["position_bin"] = bins
    return out


def uniform_baseline(scores: pd.DataFrame) -> pd.DataFrame:
    """Rows of the ``uniform`` baseline: ζ / K on every segment (NaN: outcome unknown)."""
    seg, _, _ = _segmentation(scores)
    zeta = seg["trace_id"].map(trace_outcomes(scores)).astype("float64")
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "uniform"
    out["score"] = (zeta / seg["k"]).to_numpy()
    return out


def baseline_scores(
    scores: pd.DataFrame, baselines: Sequence[str], reference: str | None
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """``scores`` with the rows of ``baselines`` appended (``baseline_rows``)."""
    rows, added, notes = baseline_rows(scores, baselines, reference)
    return pd.concat([scores, rows], ignore_index=True), added, notes


def baseline_rows(
    scores: pd.DataFrame, baselines: Sequence[str], reference: str | None
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The rows of ``baselines`` for the traces of ``scores``.

    Returns (rows, the baselines added, notes on those left out: ``position`` without the
    reference in the table). A score table already holding a row label of a baseline's name is
    refused (the report would mix them up).
    """
    labels = {str(m) for m in pd.unique(scores["method"])}
    clash = sorted(set(baselines) & labels)
    if clash:
        raise UserError(
            f"method label {clash[0]!r} is a baseline's name; relabel those rows (--label) or "
            "leave the baseline out (--baselines)"
        )
    parts, added, notes = [], [], []
    for name in baselines:
        if name == "position":
            if reference is None or reference not in labels:
                notes.append(f"position baseline omitted: the reference {reference!r} is not in "
                             "the table")
                continue
            parts.append(position_baseline(scores, reference))
        else:
            parts.append(uniform_baseline(scores))
        added.append(name)
    empty = pd.DataFrame(columns=[*_KEEP, "method", "score"])
    rows = pd.concat(parts, ignore_index=True) if parts else empty
    return rows, added, notes
