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


def _segmentation(scores: pd.DataFrame) -> pd.DataFrame:
    """One row per (trace, segment) with its span and text, from any method's rows."""
    seg = scores.loc[:, list(_KEEP)].drop_duplicates(["trace_id", "segment"])
    seg = seg.sort_values(["trace_id", "segment"], kind="stable").reset_index(drop=True)
    seg["rank"] = seg.groupby("trace_id").cumcount()
    seg["k"] = seg.groupby("trace_id")["segment"].transform("size")
    return seg


def position_baseline(scores: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Rows of the ``position`` baseline for every trace in ``scores`` (see module docstring)."""
    seg = _segmentation(scores)
    n_bins = int(seg.drop_duplicates("trace_id")["k"].mode().max()) if len(seg) else 1
    seg["bin"] = position_bins(seg["k"].to_numpy(), seg["rank"].to_numpy(), n_bins)
    outcomes = trace_outcomes(scores)
    # Unknown outcomes (NaN) form a group of their own.
    seg["group"] = seg["trace_id"].map(outcomes).astype("float64").fillna(-np.inf)
    ref = scores.loc[scores["method"] == reference, ["trace_id", "segment", "score"]]
    ref = ref.loc[np.isfinite(ref["score"].to_numpy(dtype="float64"))]
    cred = seg.merge(ref, on=["trace_id", "segment"], how="left")
    cred["has"] = cred["score"].notna().astype("float64")
    cred["val"] = cred["score"].fillna(0.0)

    def loto(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        cell = cred.groupby(keys)[["val", "has"]].transform("sum")
        own = cred.groupby([*keys, "trace_id"])[["val", "has"]].transform("sum")
        return (cell["val"] - own["val"]).to_numpy(), (cell["has"] - own["has"]).to_numpy()

    s_same, n_same = loto(["group", "bin"])
    s_any, n_any = loto(["bin"])
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(n_same > 0, s_same / n_same, np.where(n_any > 0, s_any / n_any, 0.0))
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "position"
    out["score"] = value
    out["position_bin"] = seg["bin"].to_numpy()
    return out


def uniform_baseline(scores: pd.DataFrame) -> pd.DataFrame:
    """Rows of the ``uniform`` baseline: ζ / K on every segment (NaN: outcome unknown)."""
    seg = _segmentation(scores)
    zeta = seg["trace_id"].map(trace_outcomes(scores)).astype("float64")
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "uniform"
    out["score"] = (zeta / seg["k"]).to_numpy()
    return out


def baseline_scores(
    scores: pd.DataFrame, baselines: Sequence[str], reference: str | None
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """``scores`` with the rows of ``baselines`` appended.

    Returns (scores, the baselines added, notes on those left out: ``position`` without the
    reference in the table). A score table already holding a row label of a baseline's name is
    refused (the report would mix them up).
    """
    clash = sorted(set(baselines) & set(scores["method"].astype(str)))
    if clash:
        raise UserError(
            f"method label {clash[0]!r} is a baseline's name; relabel those rows (--label) or "
            "leave the baseline out (--baselines)"
        )
    parts, added, notes = [scores], [], []
    for name in baselines:
        if name == "position":
            if reference is None or reference not in set(scores["method"]):
                notes.append(f"position baseline omitted: the reference {reference!r} is not in "
                             "the table")
                continue
            parts.append(position_baseline(scores, reference))
        else:
            parts.append(uniform_baseline(scores))
        added.append(name)
    return pd.concat(parts, ignore_index=True), added, notes
