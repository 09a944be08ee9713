"""First-error localization: does a method give its lowest credit to the first wrong step?

When traces carry the character offset where the first wrong step starts (the shared column
``error_char`` of every score table, or another name given with ``--error-field``: int, −1 = no
error, null = unknown, the same value on every row of a trace, in the coordinates of
``char_start``/``char_end``), each method and baseline is scored on the erroneous traces, with no
Monte Carlo needed:

* the erroneous segment is the one whose span ``[char_start, char_end)`` holds the offset;
* ``top1``: the fraction of erroneous traces whose lowest-credit segment is that segment (a tied
  minimum counts 1/m when the segment is among the m tied ones: a random tie-break);
* ``mean_rank``: the mean rank of that segment by ascending credit (1 = lowest; ties share their
  mean rank);
* chance: ``chance_top1`` = mean 1/K and ``chance_rank`` = mean (K + 1)/2 over the same traces,
  what a method that orders segments at random gets;
* ``top1_minus_<row>``: the per-trace paired difference of top-1 with every baseline and with
  chance, so "better than position" rests on an interval.

CIs are 95% percentile bootstraps over the erroneous traces, or over their problems when
``clusters`` says which problem each trace answers (one set of resamples for every row). An
offset at or beyond the end of the last segment (the error is in the final answer, not the
reasoning) or in no segment's span is counted under ``after_reasoning`` / ``outside_segments``
and left out; so are traces with −1 (``no_error``) or null (``unknown``). In a table, a trace
whose offset differs between rows, an offset below −1 or a value that is not an integer is a
one-line error naming the table, the trace and the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.errors import UserError
from cotcredit.report.bootstrap import Resampler, cluster_codes, percentile_interval
from cotcredit.report.correlation import wide

#: Default name of the column with the first wrong step's character offset.
ERROR_FIELD = "error_char"
LOCALIZATION_COLUMNS = ("method", "statistic", "value", "ci_low", "ci_high", "n")


@dataclass
class Localization:
    """What ``localize`` computed.

    Attributes:
        table: one row per (method, statistic) with columns ``LOCALIZATION_COLUMNS``.
        counts: traces by status: erroneous (used), no_error, unknown, after_reasoning,
            outside_segments.
        methods: methods and baselines, in report order.
        baselines: which of ``methods`` are baselines.
        field: the column read.
    """

    table: pd.DataFrame
    counts: dict[str, int]
    methods: list[str]
    baselines: list[str] = field(default_factory=list)
    field: str = ERROR_FIELD

    def value(self, method: str, statistic: str) -> float:
        """One statistic of one method (NaN when it was not computed)."""
        hit = self.table.loc[(self.table["method"] == method)
                             & (self.table["statistic"] == statistic), "value"]
        return float(hit.iloc[0]) if len(hit) else float("nan")


def error_offsets(
    scores: pd.DataFrame, error_field: str = ERROR_FIELD,
    sources: Mapping[str, Path | str] | None = None,
) -> pd.Series | None:
    """Each trace's error offset (trace id -> Int64, <NA> unknown), or None without the column.

    Raises ``UserError`` (one line: table, trace, field) for a non-integer value, a value below
    −1, or two different values within one trace."""
    if error_field not in scores.columns:
        return None
    raw = scores[["trace_id", "method", error_field]]
    known = raw.loc[raw[error_field].notna()]

    def where(method: str) -> str:
        return str(sources[method]) if sources and method in sources else f"{method} rows"

    values = pd.to_numeric(known[error_field], errors="coerce")
    bad = values.isna() | (values != np.floor(values)) | (values < -1)
    if bad.any():
        row = known.loc[bad].iloc[0]
        raise UserError(
            f"{where(row['method'])}: trace {row['trace_id']!r}: field {error_field!r} is "
            f"{row[error_field]!r}; expected an integer character offset (−1: no error)"
        )
    known = known.assign(**{error_field: values.astype("int64")})
    spread = known.groupby("trace_id")[error_field].agg(["min", "max"])
    clash = spread.loc[spread["min"] != spread["max"]]
    if len(clash):
        tid = clash.index[0]
        rows = known.loc[known["trace_id"] == tid].drop_duplicates(error_field)
        a, b = rows.iloc[0], rows.iloc[1]
        raise UserError(
            f"{where(b['method'])}: trace {tid!r}: field {error_field!r} is {int(b[error_field])}"
            f" but {int(a[error_field])} in {where(a['method'])}; every row of a trace must "
            "carry the same offset"
        )
    every = pd.Index(pd.unique(scores["trace_id"]))
    return spread["min"].reindex(every).astype("Int64")


def localize(
    scores: pd.DataFrame,
    offsets: pd.Series,
    methods: Sequence[str],
    *,
    baselines: Sequence[str] = (),
    n_boot: int = 2000,
    seed: int = 0,
    error_field: str = ERROR_FIELD,
    clusters: Mapping[str, object] | None = None,
) -> Localization:
    """Localization statistics of ``methods`` (and ``baselines``, which are rows of ``scores``
    too) on the traces whose ``offsets`` mark an error (see the module docstring); ``clusters``
    (trace id -> problem): the bootstrap resamples problems, all samples of one together."""
    seg = scores[["trace_id", "segment", "char_start", "char_end"]].drop_duplicates(
        ["trace_id", "segment"]).sort_values(["trace_id", "segment"], kind="stable")
    seg["rank"] = seg.groupby("trace_id").cumcount()
    end = seg.groupby("trace_id")["char_end"].max()
    off = offsets.reindex(end.index)
    counts = {"no_error": int((off == -1).sum()), "unknown": int(off.isna().sum())}
    erroneous = off.loc[off.notna() & (off >= 0)].astype("int64")
    after = erroneous >= end.reindex(erroneous.index)
    counts["after_reasoning"] = int(after.sum())
    erroneous = erroneous.loc[~after]
    hit = seg.merge(erroneous.rename("offset"), left_on="trace_id", right_index=True)
    hit = hit.loc[(hit["char_start"] <= hit["offset"]) & (hit["offset"] < hit["char_end"])]
    wrong_segment = hit.groupby("trace_id")["rank"].first()
    counts["outside_segments"] = int(len(erroneous) - len(wrong_segment))
    counts["erroneous"] = int(len(wrong_segment))

    rows_of = scores.loc[scores["trace_id"].isin(wrong_segment.index)]
    names = list(methods)
    data = wide(rows_of, {m: (m, "score") for m in names})
    n_t = len(data.trace_ids)
    target = wrong_segment.reindex(pd.Index(data.trace_ids.astype(str))).to_numpy()
    top1 = {m: np.full(n_t, np.nan) for m in names}
    rank = {m: np.full(n_t, np.nan) for m in names}
    k_of = data.n_segments.astype("float64")
    for g in data.groups:
        e = target[g.traces].astype("int64")
        for m in names:
            if m not in g.values:
                continue
            x = g.values[m]
            ok = g.present[m] & np.isfinite(x).all(axis=1)
            if not ok.any():
                continue
            x, e_ok, rows = x[ok], e[ok], g.traces[ok]
            mine = x[np.arange(len(x)), e_ok]
            low = x == x.min(axis=1, keepdims=True)
            top1[m][rows] = low[np.arange(len(x)), e_ok] / low.sum(axis=1)
            below, tied = (x < mine[:, None]).sum(axis=1), (x == mine[:, None]).sum(axis=1)
            rank[m][rows] = below + (tied + 1) / 2
    chance_top1, chance_rank = 1.0 / k_of, (k_of + 1) / 2

    columns: list[tuple[str, str, np.ndarray]] = []
    for m in names:
        columns += [(m, "top1", top1[m]), (m, "mean_rank", rank[m])]
        defined = np.isfinite(top1[m])
        columns += [(m, "chance_top1", np.where(defined, chance_top1, np.nan)),
                    (m, "chance_rank", np.where(defined, chance_rank, np.nan)),
                    (m, "top1_minus_chance", top1[m] - chance_top1)]
        for b in baselines:
            if b != m and b in top1:
                columns.append((m, f"top1_minus_{b}", top1[m] - top1[b]))
    rows = []
    if n_t and columns:
        values = np.column_stack([c for _, _, c in columns])
        boot = Resampler(n_t, n_boot, seed, cluster_codes(data.trace_ids, clusters))
        low, high = percentile_interval(boot.means(values))
        for (m, s, v), lo, hi in zip(columns, low, high, strict=True):
            used = np.isfinite(v)
            if not used.any():
                continue
            rows.append({"method": m, "statistic": s, "value": float(v[used].mean()),
                         "ci_low": float(lo), "ci_high": float(hi), "n": int(used.sum())})
    table = pd.DataFrame(rows, columns=list(LOCALIZATION_COLUMNS))
    return Localization(table, counts, names, [b for b in baselines if b in names], error_field)
