"""What is correlated: one declared credit definition for every value-based method.

RREDCoT's ``score`` carries g_0 and the terminal correction, Monte Carlo's does not, so
correlating ``score`` columns compares bookkeeping as much as estimates. For every method with
value columns (``MethodSpec.value_columns``) the report uses:

* ``differences`` (default): v_k − v_(k−1), no start value, no terminal correction;
* ``return``: the same plus v_0 on the first segment and ζ − v_K on the last (sums to ζ);
* ``score``: the ``score`` column as written (before 0.3).

Attributions (leave-one-out, Shapley, gradients) keep their ``score`` under every definition.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cotcredit.errors import UserError
from cotcredit.methods import registry

#: The credit definitions ``value_credit`` knows.
CREDITS = ("differences", "return", "score")


def value_column_pairs() -> list[tuple[str, str]]:
    """(before, after) value columns of the value-based methods (`MethodSpec.value_columns`),
    checked in registry order: rredcot's (g_before, g_after), mc's (value_before, value_after),
    then any other method's. Rows whose method label is not registered (a `--label` variant)
    are matched by the columns they carry."""
    pairs = [spec.value_columns for spec in registry().values() if spec.value_columns]
    return list(dict.fromkeys(pairs))


def trace_outcomes(scores: pd.DataFrame) -> pd.Series:
    """Each trace's outcome ζ from the ``outcome`` column of any rows that carry it (trace id
    -> float; empty when no table records outcomes)."""
    if "outcome" not in scores.columns:
        return pd.Series(dtype="float64")
    known = scores[["trace_id", "outcome"]].dropna()
    return pd.to_numeric(known["outcome"]).groupby(known["trace_id"]).first()


def _value_columns(rows: pd.DataFrame) -> tuple[str, str] | None:
    for before, after in value_column_pairs():
        if before in rows.columns and after in rows.columns and rows[[before, after]].notna().all(
            axis=None
        ):
            return before, after
    return None


def value_methods(scores: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """Methods whose every row carries value columns: method -> (before, after) columns."""
    found = {}
    for method, rows in scores.groupby("method", sort=False):
        cols = _value_columns(rows)
        if cols is not None:
            found[str(method)] = cols
    return found


def value_credit(scores: pd.DataFrame, credit: str = "differences") -> pd.DataFrame:
    """``scores`` with the ``score`` of value-based methods replaced by ``credit`` (a copy;
    the original score is kept in ``score_as_written``)."""
    if credit not in CREDITS:
        raise UserError(f"--credit: unknown definition {credit!r} (known: {', '.join(CREDITS)})")
    out = scores.copy(deep=False)  # copy-on-write: only the replaced column is new
    if credit == "score":
        return out
    methods = value_methods(out)
    if not methods:
        return out
    out["score_as_written"] = out["score"]
    outcomes = trace_outcomes(out) if credit == "return" else None
    for method, (before, after) in methods.items():
        rows = out["method"] == method
        part = out.loc[rows, ["trace_id", "segment", before, after]]
        v0 = pd.to_numeric(part[before]).to_numpy(dtype="float64")
        v1 = pd.to_numeric(part[after]).to_numpy(dtype="float64")
        score = v1 - v0
        if outcomes is not None:
            seg = part["segment"]
            first = (seg == seg.groupby(part["trace_id"]).transform("min")).to_numpy()
            last = (seg == seg.groupby(part["trace_id"]).transform("max")).to_numpy()
            zeta = part["trace_id"].map(outcomes).to_numpy(dtype="float64")
            if np.isnan(zeta).any():
                tid = part["trace_id"].to_numpy()[np.isnan(zeta)][0]
                raise UserError(
                    f"--credit return: trace {tid!r} has no outcome in any score table (column "
                    "'outcome'); use --credit differences or add the rredcot table"
                )
            score = score + np.where(first, v0, 0.0) + np.where(last, zeta - v1, 0.0)
        out.loc[rows, "score"] = score
    return out
