"""Agreement statistics between methods: correlations, bootstrap intervals, paired differences.

For every pair of methods and every trace scored by both, three correlations are computed over the
trace's segments (Pearson, Spearman, Kendall tau-b; the values of ``scipy.stats``' functions).
They are then summarised

* across traces: ``mean_<stat>`` = the mean of the per-trace values, with a 95% percentile
  bootstrap interval (``n`` = traces used);
* pooled: ``pooled_<stat>`` = one correlation over all segments of the traces used (``n`` =
  segments).

A trace enters a pair's statistics only if it has at least ``min_segments`` segments and both
methods give it finite, non-constant scores; every trace left out is counted, with its reason, in
``Correlations.skipped``, so no average is ever taken over NaNs. The same set of traces feeds every
statistic of that pair, the pooled ones included. One exception: a *baseline* (``baselines``,
rows added by ``cotcredit.report.baselines``) that is constant on a trace orders nothing there,
so its per-trace correlations are 0 by definition and, when its maximum is tied, its top-1
agreement is the chance of hitting the reference's segment when the tie is broken at random.

The bootstrap: one matrix of resamples of *all* traces (``n_boot`` rows, drawn once from
``seed``) serves every statistic; a statistic's resampled value is its mean over the traces it
uses among those drawn. So both members of a pair, every pair and every paired difference see the
same resamples, and a pair's interval does not depend on which other pairs were computed.

Against a reference method (Monte Carlo by default), more analyses:

* position: each trace's segments are split at relative position ``segment / n_segments`` = 0.5
  into an early and a late half; ``early_<stat>`` and ``late_<stat>`` are pooled correlations of
  a method with the reference within each half;
* top-1 agreement: the fraction of traces whose highest-scored segment is the same for the method
  and the reference (traces where either maximum is tied are left out and counted);
* paired differences (``Correlations.paired``, rows ``paired_mean_<stat>`` and
  ``paired_top1_agreement``): for every two methods or baselines A and B other than the
  reference, the mean over traces of A's per-trace agreement with the reference minus B's, over
  the traces where both are defined, with its bootstrap interval and a two-sided bootstrap p
  (twice the smaller fraction of resampled differences on either side of 0). A "better than"
  rests on this interval, not on which of two marginal intervals excludes 0.

Split-half: when a method's rows carry ``score_half_a`` and ``score_half_b`` (Monte Carlo credits
from the even- and the odd-indexed rollouts of each boundary), the two halves are correlated per
trace (``split_half_<stat>``, ``method_a == method_b``) and averaged over traces
(``mean_split_half_<stat>``, bootstrap CI): how well two independent runs with half the rollouts
agree. It is not stepped up to the full number of rollouts: the Spearman–Brown formula applies to
a reliability coefficient, not to a mean of per-trace rank correlations over a few points. The
ceiling and rollout equivalence (``cotcredit.report.rollouts``) answer that question.

Rows about a reference always have ``method_a`` = the method and ``method_b`` = the reference; rows
about a pair otherwise follow the registry's method order (``cotcredit.methods.method_order``),
baselines last. Aggregate rows carry ``trace_id == "all"``; their statistic names (``mean_*``,
``pooled_*``, ``early_*``, ``late_*``, ``top1_agreement``, ``paired_*``) never clash with the
per-trace ones (``pearson``, ``spearman``, ``kendall``, ``split_half_*``), so filter on
``statistic``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from cotcredit.errors import UserError
from cotcredit.methods import method_order
from cotcredit.pipeline.scores import check_segmentations, normalize
from cotcredit.report.bootstrap import (
    Resampler,
    bootstrap_p,
    cluster_codes,
    mean_interval,
    percentile_interval,
)
from cotcredit.report.correlation import (
    Wide,
    average_ranks,
    pooled_correlations,
    rowwise,
    wide,
)

# `correlate` and `Correlations` are this module's; the bootstrap (`bootstrap`) and the
# per-trace correlations (`correlation`) it is built on are importable from here too.
__all__ = [
    "ALL", "ANALYSIS_ONLY", "CORRELATION_COLUMNS", "HALF_COLUMNS", "PAIRED_COLUMNS",
    "PER_TRACE_STATISTICS", "SKIPPED_COLUMNS", "SPLIT_HALF", "STATISTICS", "Correlations",
    "Resampler", "Wide", "average_ranks", "bootstrap_p", "correlate", "mean_interval",
    "percentile_interval", "rowwise", "wide",
]

#: Columns of ``Correlations.table`` and of ``correlations.parquet``, in this order.
CORRELATION_COLUMNS = (
    "trace_id",
    "method_a",
    "method_b",
    "statistic",
    "value",
    "ci_low",
    "ci_high",
    "n",
)
#: Columns of ``Correlations.paired`` (and ``paired.parquet``).
PAIRED_COLUMNS = (
    "method",
    "versus",
    "reference",
    "statistic",
    "difference",
    "ci_low",
    "ci_high",
    "p_boot",
    "n",
)
SKIPPED_COLUMNS = ("method_a", "method_b", "reason", "n_traces")
STATISTICS = ("pearson", "spearman", "kendall")
#: Columns of a method's split-half credits (Monte Carlo: even- and odd-indexed rollouts).
HALF_COLUMNS = ("score_half_a", "score_half_b")
SPLIT_HALF = tuple(f"split_half_{s}" for s in STATISTICS)
#: Statistic names of per-trace rows; every other statistic is an aggregate (trace_id "all").
PER_TRACE_STATISTICS = STATISTICS + SPLIT_HALF
ALL = "all"
#: Suffix of skip reasons that concern only one analysis, not a pair's correlations.
ANALYSIS_ONLY = "only)"


# Why a trace is left out of a pair, by code (0: used).
_REASONS = {
    1: "scored by only one of the two methods",
    2: None,  # fewer than min_segments segments (text depends on min_segments)
    3: "NaN or infinite score",
    4: "constant scores",
    5: "correlation undefined",
}


@dataclass
class Correlations:
    """Everything ``correlate`` computed; ``table`` is what ``correlations.parquet`` holds.

    Attributes:
        table: tidy rows with columns ``CORRELATION_COLUMNS``. Per-trace rows (statistic
            pearson/spearman/kendall/split_half_*) have ``n`` = segments and NaN CI; aggregate
            rows have ``trace_id == "all"``.
        skipped: traces left out of a pair's statistics: method_a, method_b, reason, n_traces.
        matrix: method x method mean per-trace Spearman (diagonal 1, NaN where no trace was
            usable).
        methods: the methods in display order (the registry's), baselines last.
        reference: the reference method, or None when it is not in the table.
        n_traces: distinct traces in the input.
        params: the options used (n_boot, seed, min_segments, reference, credit...).
        baselines: the rows of ``methods`` that are text-free baselines.
        paired: paired differences of agreement with the reference (``PAIRED_COLUMNS``).
        per_trace_agreement: trace -> (method, statistic) agreement with the reference, NaN
            where a trace was not used (what the paired differences and rollout equivalence
            are computed from).
    """

    table: pd.DataFrame
    skipped: pd.DataFrame
    matrix: pd.DataFrame
    methods: list[str]
    reference: str | None
    n_traces: int
    params: dict[str, Any] = field(default_factory=dict)
    baselines: list[str] = field(default_factory=list)
    paired: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PAIRED_COLUMNS))
    per_trace_agreement: pd.DataFrame | None = None

    def aggregates(self) -> pd.DataFrame:
        """The aggregate rows (means with CI, pooled, position, top-1, paired) of ``table``."""
        keep = ~self.table["statistic"].isin(PER_TRACE_STATISTICS)
        return self.table.loc[keep].reset_index(drop=True)

    def per_trace(self) -> pd.DataFrame:
        """The per-trace rows of ``table``."""
        keep = self.table["statistic"].isin(PER_TRACE_STATISTICS)
        return self.table.loc[keep].reset_index(drop=True)

    def value(self, method_a: str, method_b: str, statistic: str) -> float:
        """One aggregate value (either method order), NaN when it was not computed."""
        agg = self.aggregates()
        hit = agg.loc[
            (agg["statistic"] == statistic)
            & (
                ((agg["method_a"] == method_a) & (agg["method_b"] == method_b))
                | ((agg["method_a"] == method_b) & (agg["method_b"] == method_a))
            )
        ]
        return float(hit["value"].iloc[0]) if len(hit) else math.nan

    def pairs(self) -> list[tuple[str, str]]:
        """Every pair of methods, in display order."""
        return [(a, b) for i, a in enumerate(self.methods) for b in self.methods[i + 1 :]]

    def split_half_methods(self) -> list[str]:
        """Methods with split-half rows (Monte Carlo when its table has the half columns)."""
        rows = self.table.loc[self.table["statistic"] == "mean_split_half_spearman"]
        return [m for m in self.methods if m in set(rows["method_a"])]

    def compared(self) -> list[str]:
        """The methods and baselines compared with the reference (all but the reference)."""
        return [m for m in self.methods if m != self.reference]

    def label(self, method: str) -> str:
        """How a row is named in the report: baselines are marked."""
        return f"{method} (baseline)" if method in self.baselines else method


# ----------------------------------------------------------------------------- one pair


@dataclass
class _Pair:
    """Per-trace values of one pair: (traces, statistics) with NaN where unused."""

    values: np.ndarray
    reasons: dict[str, int]
    x: list[np.ndarray]  # the used traces' arrays per group (for pooled and position)
    y: list[np.ndarray]
    top1: np.ndarray | None = None  # per trace, NaN where not defined (reference pairs)
    ties: int = 0


def _pair(
    data: Wide,
    a: str,
    b: str,
    min_segments: int,
    baseline_sides: tuple[bool, bool] = (False, False),
    top1: bool = False,
) -> _Pair:
    """Per-trace correlations of series ``a`` with ``b``; ``baseline_sides``: which side is a
    baseline (constant there means correlation 0, see the module docstring)."""
    n_t = len(data.trace_ids)
    values = np.full((n_t, len(STATISTICS)), np.nan)
    hits = np.full(n_t, np.nan) if top1 else None
    reasons: dict[str, int] = {}
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    ties = 0

    def count(reason: str, n: int) -> None:
        if n:
            reasons[reason] = reasons.get(reason, 0) + n

    for g in data.groups:
        if a not in g.values or b not in g.values:
            only = g.present.get(a, np.zeros(len(g.traces), bool)) ^ g.present.get(
                b, np.zeros(len(g.traces), bool)
            )
            count(_REASONS[1], int(only.sum()))
            continue
        x, y = g.values[a], g.values[b]
        pa, pb = g.present[a], g.present[b]
        both = pa & pb
        count(_REASONS[1], int((pa ^ pb).sum()))
        if g.k < min_segments:
            count(f"fewer than {min_segments} segments", int(both.sum()))
            continue
        finite = np.isfinite(x).all(axis=1) & np.isfinite(y).all(axis=1)
        count(_REASONS[3], int((both & ~finite).sum()))
        ok = both & finite
        const_x = np.ptp(np.where(np.isfinite(x), x, 0), axis=1) == 0
        const_y = np.ptp(np.where(np.isfinite(y), y, 0), axis=1) == 0
        blocked = (const_x & (not baseline_sides[0])) | (const_y & (not baseline_sides[1]))
        count(_REASONS[4], int((ok & blocked).sum()))
        ok &= ~blocked
        if not ok.any():
            continue
        xo, yo = x[ok], y[ok]
        zero = const_x[ok] | const_y[ok]  # a constant baseline orders nothing
        ranks = (g.ranks(a)[ok], g.ranks(b)[ok])
        vals = np.column_stack([rowwise(s, xo, yo, ranks) for s in STATISTICS])
        vals[zero] = 0.0
        good = np.isfinite(vals).all(axis=1)
        count(_REASONS[5], int((~good).sum()))
        rows = g.traces[ok][good]
        values[rows] = vals[good]
        xs.append(xo[good])
        ys.append(yo[good])
        if hits is not None:
            h, t = _top1(xo[good], yo[good], baseline_sides)
            hits[rows] = h
            ties += t
    return _Pair(values, reasons, xs, ys, hits, ties)


def _top1(x: np.ndarray, y: np.ndarray, baseline_sides: tuple[bool, bool]) -> tuple[np.ndarray, int]:
    """Per trace: 1 when the highest-scored segments agree, 0 when not, NaN when a maximum is
    tied (a baseline's tie: the chance of agreeing when the tie is broken at random)."""
    top_x = x == x.max(axis=1, keepdims=True)
    top_y = y == y.max(axis=1, keepdims=True)
    nx, ny = top_x.sum(axis=1), top_y.sum(axis=1)
    shared = (top_x & top_y).sum(axis=1)
    out = np.where((nx == 1) & (ny == 1), shared.astype("float64"), np.nan)
    for side, (n_tops, other_n) in enumerate(((nx, ny), (ny, nx))):
        if baseline_sides[side]:
            chance = (other_n == 1) & (n_tops > 1)
            out[chance] = shared[chance] / n_tops[chance]
    return out, int(np.isnan(out).sum())


# ----------------------------------------------------------------------------- rows


def _agg_row(a: str, b: str, statistic: str, value: float, n: int,
             ci: tuple[float, float] = (math.nan, math.nan)) -> dict[str, Any]:
    return {"trace_id": ALL, "method_a": a, "method_b": b, "statistic": statistic,
            "value": float(value), "ci_low": float(ci[0]), "ci_high": float(ci[1]), "n": int(n)}


def correlate(
    scores: pd.DataFrame,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    min_segments: int = 3,
    reference: str = "mc",
    baselines: Sequence[str] = (),
    params: dict[str, Any] | None = None,
    checked: bool = False,
    clusters: Mapping[str, Any] | None = None,
) -> Correlations:
    """Correlate every pair of methods in ``scores`` (see the module docstring for definitions).

    Args:
        scores: a tidy score table (``load_scores`` output or any DataFrame with the columns).
        n_boot: bootstrap resamples of traces for the CIs (0: no interval, NaN).
        seed: seed of the bootstrap generator.
        min_segments: traces with fewer segments are left out (and counted); at least 2.
        reference: method for the position, top-1 and paired analyses, skipped if absent.
        baselines: row labels in ``scores`` that are text-free baselines (shown last, marked).
        params: more options to record in ``Correlations.params`` (credit definition...).
        checked: the rows were already normalized and checked for one segmentation
            (``load_scores`` does both); skips doing it again.
        clusters: trace id -> its problem: the bootstrap resamples problems, each with all
            its traces (``cotcredit.report.bootstrap``); None: single traces.
    """
    if n_boot < 0:
        raise UserError(f"n_boot must be >= 0, got {n_boot}")
    if min_segments < 2:
        raise UserError(
            f"min_segments must be >= 2 (a correlation needs 2 points), got {min_segments}"
        )
    if not checked:
        scores = normalize(scores)
        check_segmentations(scores)
    present = list(pd.unique(scores["method"]))
    base = [b for b in baselines if b in present]
    methods = method_order(m for m in present if m not in base) + base
    ref = reference if reference in methods and reference not in base else None

    series = {m: (m, "score") for m in methods}
    halves = [m for m in methods if m not in base and _has_halves(scores, m)]
    for m in halves:
        series[f"{m}#a"], series[f"{m}#b"] = (m, HALF_COLUMNS[0]), (m, HALF_COLUMNS[1])
    data = wide(scores, series)
    n_t = len(data.trace_ids)
    boot = Resampler(n_t, n_boot, seed, cluster_codes(data.trace_ids, clusters))

    per_trace: list[pd.DataFrame] = []
    agg: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    # Columns whose bootstrap intervals are filled in at the end, in one pass of the resamples.
    pending: list[tuple[dict[str, Any], np.ndarray]] = []  # (aggregate row, per-trace values)
    matrix = pd.DataFrame(np.nan, index=methods, columns=methods, dtype="float64")
    for m in methods:
        matrix.loc[m, m] = 1.0
    against_ref: dict[str, _Pair] = {}

    def summarise(a: str, b: str, pair: _Pair, names: Sequence[str], prefix: str,
                  into: list[dict[str, Any]], trace_rows: list[pd.DataFrame]) -> None:
        used = np.isfinite(pair.values[:, 0])
        if not used.any():
            return
        codes = np.flatnonzero(used)
        trace_rows.append(pd.DataFrame({
            "trace_id": np.repeat(data.trace_ids[codes], len(names)).astype(str),
            "method_a": a, "method_b": b,
            "statistic": np.tile(np.asarray(names, dtype=object), len(codes)),
            "value": pair.values[used].ravel(), "ci_low": np.nan, "ci_high": np.nan,
            "n": np.repeat(data.n_segments[used], len(names)),
        }))
        for j, s in enumerate(STATISTICS):
            into.append(_agg_row(a, b, f"{prefix}{s}", pair.values[used, j].mean(), used.sum()))
            pending.append((into[-1], pair.values[:, j]))

    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            with_ref = ref is not None and ref in (a, b)
            m, r = (b, a) if a == ref else (a, b)
            if not with_ref:
                m, r = a, b
            pair = _pair(data, m, r, min_segments, (m in base, r in base), top1=with_ref)
            # A pair's rows follow display order; the reference analyses put the reference second.
            first, second = a, b
            for reason, n in pair.reasons.items():
                skipped.append({"method_a": first, "method_b": second, "reason": reason,
                                "n_traces": n})
            summarise(first, second, pair, STATISTICS, "mean_", agg, per_trace)
            used = np.isfinite(pair.values[:, 0])
            if used.any():
                matrix.loc[a, b] = matrix.loc[b, a] = float(pair.values[used, 1].mean())
                x_all = np.concatenate([x.ravel() for x in pair.x])
                y_all = np.concatenate([y.ravel() for y in pair.y])
                pooled = pooled_correlations(x_all, y_all, STATISTICS)
                if pooled is not None:
                    for s, v in pooled.items():
                        agg.append(_agg_row(first, second, f"pooled_{s}", v, len(x_all)))
            if with_ref:
                against_ref[m] = pair
                if used.any():
                    agg.extend(_position_rows(m, r, pair, skipped, int(used.sum())))
                    _top1_rows(m, r, pair, agg, pending, skipped)

    paired = _paired(against_ref, ref, methods, boot) if ref is not None else None

    split_rows: list[pd.DataFrame] = []
    split_agg: list[dict[str, Any]] = []
    for m in halves:
        pair = _pair(data, f"{m}#a", f"{m}#b", min_segments)
        for reason, n in pair.reasons.items():
            if reason == _REASONS[1]:
                continue  # rows without halves: another method's columns
            skipped.append({"method_a": m, "method_b": m, "n_traces": n,
                            "reason": reason.replace("score", "half score") + " (split-half only)"})
        summarise(m, m, pair, SPLIT_HALF, "mean_split_half_", split_agg, split_rows)

    _fill_intervals(pending, boot)
    parts = [*per_trace, pd.DataFrame(agg, columns=list(CORRELATION_COLUMNS))]
    if paired is not None and len(paired):
        parts.append(pd.DataFrame({
            "trace_id": ALL, "method_a": paired["method"], "method_b": paired["versus"],
            "statistic": "paired_" + paired["statistic"], "value": paired["difference"],
            "ci_low": paired["ci_low"], "ci_high": paired["ci_high"], "n": paired["n"],
        }))
    parts += [*split_rows, pd.DataFrame(split_agg, columns=list(CORRELATION_COLUMNS))]
    table = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(
        len(p) for p in parts) else pd.DataFrame(columns=list(CORRELATION_COLUMNS))
    table = table[list(CORRELATION_COLUMNS)].astype(
        {"trace_id": "str", "method_a": "str", "method_b": "str", "statistic": "str",
         "value": "float64", "ci_low": "float64", "ci_high": "float64", "n": "int64"}
    )
    skipped_df = pd.DataFrame(skipped, columns=list(SKIPPED_COLUMNS)).astype(
        {"method_a": "str", "method_b": "str", "reason": "str", "n_traces": "int64"}
    )
    agreement = None
    if against_ref:
        agreement = pd.DataFrame(
            {(m, s): p.values[:, j] for m, p in against_ref.items()
             for j, s in enumerate(STATISTICS)} | {(m, "top1"): p.top1 for m, p in
                                                  against_ref.items() if p.top1 is not None},
            index=pd.Index(data.trace_ids.astype(str), name="trace_id"),
        )
    return Correlations(
        table=table,
        skipped=skipped_df,
        matrix=matrix,
        methods=methods,
        reference=ref,
        n_traces=n_t,
        params={"n_boot": n_boot, "seed": seed, "min_segments": min_segments,
                "reference": reference, "baselines": list(base), **(params or {})},
        baselines=base,
        paired=paired if paired is not None else pd.DataFrame(columns=list(PAIRED_COLUMNS)),
        per_trace_agreement=agreement,
    )


def _has_halves(scores: pd.DataFrame, method: str) -> bool:
    if not all(c in scores.columns for c in HALF_COLUMNS):
        return False
    own = scores.loc[scores["method"] == method, list(HALF_COLUMNS)]
    return not own.empty and not own.isna().all().all()


def _fill_intervals(pending: list[tuple[dict[str, Any], np.ndarray]], boot: Resampler) -> None:
    """Bootstrap intervals of every pending mean row, from one pass over the shared resamples."""
    if not pending:
        return
    low, high = boot.intervals(np.column_stack([v for _, v in pending]))
    for (row, _), lo, hi in zip(pending, low, high, strict=True):
        row["ci_low"], row["ci_high"] = float(lo), float(hi)


def _position_rows(
    method: str, ref: str, pair: _Pair, skipped: list[dict[str, Any]], n_used: int
) -> list[dict[str, Any]]:
    """Pooled correlations with the reference within the early and the late half of traces."""
    rows = []
    for half in ("early", "late"):
        hx, hy = [], []
        for x, y in zip(pair.x, pair.y, strict=True):
            k = x.shape[1]
            early = np.arange(k) / k < 0.5
            keep = early if half == "early" else ~early
            hx.append(x[:, keep].ravel())
            hy.append(y[:, keep].ravel())
        x_all, y_all = np.concatenate(hx), np.concatenate(hy)
        pooled = pooled_correlations(x_all, y_all, ("spearman", "pearson"))
        if pooled is None:
            skipped.append({
                "method_a": method, "method_b": ref, "n_traces": n_used,
                "reason": f"{half} half: fewer than 3 segments or constant scores "
                "(position analysis only)",
            })
            continue
        rows.extend(_agg_row(method, ref, f"{half}_{s}", v, len(x_all)) for s, v in pooled.items())
    return rows


def _top1_rows(method: str, ref: str, pair: _Pair, agg: list, pending: list, skipped: list) -> None:
    if pair.ties:
        skipped.append({"method_a": method, "method_b": ref, "n_traces": pair.ties,
                        "reason": "tied maximum score (top-1 agreement only)"})
    hits = pair.top1
    if hits is None or not np.isfinite(hits).any():
        return
    used = np.isfinite(hits)
    agg.append(_agg_row(method, ref, "top1_agreement", hits[used].mean(), used.sum()))
    pending.append((agg[-1], hits))


def _paired(
    against_ref: dict[str, _Pair], ref: str, methods: list[str], boot: Resampler
) -> pd.DataFrame:
    """Paired differences of agreement with ``ref`` between every two compared rows."""
    names = [m for m in methods if m in against_ref]
    stats_of = {**{s: j for j, s in enumerate(STATISTICS)}, "top1_agreement": None}
    combos, columns = [], []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for s, j in stats_of.items():
                va = against_ref[a].top1 if j is None else against_ref[a].values[:, j]
                vb = against_ref[b].top1 if j is None else against_ref[b].values[:, j]
                if va is None or vb is None:
                    continue
                d = va - vb  # NaN unless both are defined on the trace
                if not np.isfinite(d).any():
                    continue
                combos.append((a, b, s if j is None else f"mean_{s}", d))
                columns.append(d)
    if not combos:
        return pd.DataFrame(columns=list(PAIRED_COLUMNS))
    values = np.column_stack(columns)
    resampled = boot.means(values)
    low, high = percentile_interval(resampled)
    p = bootstrap_p(resampled)
    rows = []
    for (a, b, s, d), lo, hi, pv in zip(combos, low, high, p, strict=True):
        used = np.isfinite(d)
        rows.append({"method": a, "versus": b, "reference": ref, "statistic": s,
                     "difference": float(d[used].mean()), "ci_low": float(lo),
                     "ci_high": float(hi), "p_boot": float(pv), "n": int(used.sum())})
    return pd.DataFrame(rows, columns=list(PAIRED_COLUMNS))
