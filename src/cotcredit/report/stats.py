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
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from cotcredit.errors import UserError
from cotcredit.methods import method_order
from cotcredit.report.scores import check_segmentations, normalize

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

_KENDALL_PAIRWISE_MAX = 256  # longer traces go to scipy.stats.kendalltau (O(n log n))
_KENDALL_CELLS = 4_000_000  # sign matrices computed per chunk of traces (bounds memory)
_BOOT_CELLS = 2_000_000  # resample weights held at once (bounds memory)

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


# ----------------------------------------------------------------------------- the bootstrap


class Resampler:
    """One set of bootstrap resamples of ``n_traces`` traces, shared by every statistic.

    Resample ``b`` draws ``n_traces`` traces with replacement; a statistic defined on some of
    the traces (a column of values with NaN where undefined) takes, in that resample, the mean
    of its values over the drawn traces where it is defined. The draws depend only on
    ``n_boot``, ``n_traces`` and ``seed``.
    """

    def __init__(self, n_traces: int, n_boot: int, seed: int):
        self.n_traces, self.n_boot, self.seed = n_traces, n_boot, seed
        self._counts: np.ndarray | None = None

    def counts(self) -> np.ndarray:
        """(n_boot, n_traces) how often each trace is drawn in each resample; drawn once and
        kept (one byte per cell: 200 MB for 2,000 resamples of 100,000 traces)."""
        if self._counts is None:
            rng = np.random.default_rng(self.seed)
            n = self.n_traces
            out = np.empty((self.n_boot, n), dtype=np.uint8)
            chunk = max(1, _BOOT_CELLS // max(n, 1))
            for start in range(0, self.n_boot, chunk):
                size = min(chunk, self.n_boot - start)
                idx = rng.integers(0, n, size=(size, n)) + (np.arange(size) * n)[:, None]
                # a trace drawn more than 255 times in n draws: never at n >= 2 in practice
                drawn = np.bincount(idx.ravel(), minlength=size * n)
                out[start : start + size] = np.minimum(drawn, 255).reshape(size, n)
            self._counts = out
        return self._counts

    def means(self, values: np.ndarray) -> np.ndarray:
        """Resampled means of each column of ``values`` (traces x columns, NaN = undefined):
        an array (n_boot, columns), NaN where a resample drew no trace of that column."""
        values = np.asarray(values, dtype="float64").reshape(self.n_traces, -1)
        out = np.full((self.n_boot, values.shape[1]), np.nan)
        if self.n_boot == 0 or self.n_traces == 0 or values.shape[1] == 0:
            return out
        defined = np.isfinite(values)
        filled = np.where(defined, values, 0.0)
        used = defined.astype("float64")
        counts = self.counts()
        chunk = max(1, _BOOT_CELLS // max(self.n_traces, 1))
        for start in range(0, self.n_boot, chunk):
            w = counts[start : start + chunk].astype("float64")
            num, den = w @ filled, w @ used
            with np.errstate(invalid="ignore", divide="ignore"):
                out[start : start + len(w)] = num / den
        return out

    def intervals(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """95% percentile intervals of the column means (NaN without resamples)."""
        return percentile_interval(self.means(values))


def percentile_interval(boot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2.5th and 97.5th percentiles of each column of resampled values (NaN-aware)."""
    if boot.shape[0] == 0:
        nan = np.full(boot.shape[1], np.nan)
        return nan, nan.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns give NaN
        low, high = np.nanpercentile(boot, [2.5, 97.5], axis=0)
    return low, high


def mean_interval(values: Sequence[float] | np.ndarray, n_boot: int = 2000,
                  seed: int = 0) -> tuple[float, float, float]:
    """Mean of per-trace ``values`` (NaN = undefined, left out) and its 95% percentile-bootstrap
    interval, from ``Resampler(len(values), n_boot, seed)``: it depends on these values and the
    seed alone, never on which statistics were computed before it, and two columns of equal
    length see the same resamples (pass a paired difference ``a - b`` for a paired interval)."""
    values = np.asarray(values, dtype="float64")
    defined = values[np.isfinite(values)]
    if not len(defined):
        return float("nan"), float("nan"), float("nan")
    low, high = Resampler(len(values), n_boot, seed).intervals(values)
    return float(defined.mean()), float(low[0]), float(high[0])


def bootstrap_p(boot: np.ndarray) -> np.ndarray:
    """Two-sided bootstrap p of each column's mean being 0: twice the smaller fraction of
    resampled values on either side of 0 (at most 1; NaN without resamples)."""
    finite = np.isfinite(boot)
    n = finite.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        below = (np.where(finite, boot, 0) <= 0).sum(axis=0) - (~finite).sum(axis=0)
        above = (np.where(finite, boot, 0) >= 0).sum(axis=0) - (~finite).sum(axis=0)
        p = np.minimum(1.0, 2 * np.minimum(below, above) / n)
    return np.where(n > 0, p, np.nan)


# ----------------------------------------------------------------------------- per-trace statistics


def average_ranks(a: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank), as
    ``scipy.stats.rankdata`` gives them."""
    return stats.rankdata(a, method="average", axis=-1)


def _rowwise_pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson's r of each row pair (as ``scipy.stats.pearsonr``: normalised centred dot)."""
    xm = x - x.mean(axis=-1, keepdims=True)
    ym = y - y.mean(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        xm = xm / np.linalg.norm(xm, axis=-1, keepdims=True)
        ym = ym / np.linalg.norm(ym, axis=-1, keepdims=True)
        r = (xm * ym).sum(axis=-1)
    return np.clip(r, -1.0, 1.0)


def _rowwise_kendall(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b of each row pair (``scipy.stats.kendalltau``): exact pair counting for
    short rows, scipy for long ones."""
    n, k = x.shape
    out = np.empty(n)
    if k > _KENDALL_PAIRWISE_MAX:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(n):
                out[i] = stats.kendalltau(x[i], y[i]).statistic
        return out
    chunk = max(1, _KENDALL_CELLS // (k * k))
    for s in range(0, n, chunk):
        xs, ys = x[s : s + chunk], y[s : s + chunk]
        sx = np.sign(xs[:, :, None] - xs[:, None, :])
        sy = np.sign(ys[:, :, None] - ys[:, None, :])
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s : s + chunk] = (sx * sy).sum(axis=(1, 2)) / np.sqrt(
                (sx * sx).sum(axis=(1, 2)) * (sy * sy).sum(axis=(1, 2))
            )
    return out


def rowwise(
    name: str,
    x: np.ndarray,
    y: np.ndarray,
    ranks: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
) -> np.ndarray:
    """One correlation statistic for each row of two (traces, segments) arrays; ``ranks``:
    their average ranks when already computed (Spearman reuses them)."""
    if name == "pearson":
        return _rowwise_pearson(x, y)
    if name == "spearman":
        rx = average_ranks(x) if ranks[0] is None else ranks[0]
        ry = average_ranks(y) if ranks[1] is None else ranks[1]
        return _rowwise_pearson(rx, ry)
    return _rowwise_kendall(x, y)


def _stat(name: str, x: np.ndarray, y: np.ndarray) -> float:
    """One correlation over two 1-D arrays (pooled segments)."""
    if name == "kendall" and len(x) > _KENDALL_PAIRWISE_MAX:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(stats.kendalltau(x, y).statistic)
    return float(rowwise(name, x[None, :], y[None, :])[0])


def _pooled(x: np.ndarray, y: np.ndarray, names: Sequence[str]) -> dict[str, float] | None:
    """Correlations over pooled points, or None when fewer than 3 points or a side is constant."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return {name: _stat(name, x, y) for name in names}


# ----------------------------------------------------------------------------- traces as arrays


@dataclass
class _Group:
    """The traces with ``k`` segments: their codes and one (traces, k) array per series."""

    k: int
    traces: np.ndarray
    values: dict[str, np.ndarray]
    present: dict[str, np.ndarray]
    _ranks: dict[str, np.ndarray] = field(default_factory=dict)

    def ranks(self, name: str) -> np.ndarray:
        """Average ranks of one series' rows, computed once (rows with NaN: never used)."""
        if name not in self._ranks:
            v = self.values[name]
            self._ranks[name] = average_ranks(np.where(np.isfinite(v), v, 0.0))
        return self._ranks[name]


@dataclass
class Wide:
    """Score series as arrays, one group per segment count (so per-trace work vectorises)."""

    trace_ids: np.ndarray  # sorted distinct trace ids; a trace's code is its index here
    n_segments: np.ndarray  # segments per trace
    groups: list[_Group]

    def series(self, name: str) -> list[tuple[_Group, np.ndarray, np.ndarray]]:
        """(group, values, present) of one series in every group."""
        return [(g, g.values[name], g.present[name]) for g in self.groups if name in g.values]


def wide(scores: pd.DataFrame, series: dict[str, tuple[str, str]]) -> Wide:
    """Arrange score rows as arrays: ``series`` maps a name to (method, column); its values
    are that method's column, ordered by segment within each trace (NaN where absent)."""
    codes, uniques = pd.factorize(scores["trace_id"], sort=True)
    m_codes, m_uniques = pd.factorize(scores["method"])
    n_t, n_m = len(uniques), max(len(m_uniques), 1)
    key = codes.astype("int64") * n_m + m_codes
    order = np.lexsort((scores["segment"].to_numpy(), key))
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    run = np.cumsum(np.r_[True, sorted_key[1:] != sorted_key[:-1]]) - 1
    pos = np.empty(len(key), dtype="int64")
    pos[order] = np.arange(len(key)) - starts[run]
    counts = np.bincount(key, minlength=n_t * n_m).reshape(n_t, n_m)
    n_seg = counts.max(axis=1) if n_t else np.zeros(0, dtype="int64")
    local = np.empty(n_t, dtype="int64")
    groups: list[_Group] = []
    row_k = n_seg[codes]
    method_of = {m: i for i, m in enumerate(m_uniques)}
    for k in np.unique(n_seg):
        members = np.flatnonzero(n_seg == k)
        local[members] = np.arange(len(members))
        values: dict[str, np.ndarray] = {}
        present: dict[str, np.ndarray] = {}
        in_k = row_k == k
        for name, (method, column) in series.items():
            if method not in method_of or column not in scores.columns:
                continue
            rows = np.flatnonzero(in_k & (m_codes == method_of[method]))
            arr = np.full((len(members), int(k)), np.nan)
            col = pd.to_numeric(scores[column], errors="coerce").to_numpy(dtype="float64")
            arr[local[codes[rows]], pos[rows]] = col[rows]
            has = np.zeros(len(members), dtype=bool)
            has[local[codes[rows]]] = True
            values[name], present[name] = arr, has
        groups.append(_Group(int(k), members, values, present))
    return Wide(np.asarray(uniques, dtype=object), n_seg, groups)


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


def _rows(**columns: Any) -> pd.DataFrame:
    n = max((len(v) for v in columns.values() if isinstance(v, np.ndarray | list)), default=1)
    frame = {}
    for c in CORRELATION_COLUMNS:
        v = columns.get(c, np.nan)
        frame[c] = v if isinstance(v, np.ndarray | list) else [v] * n
    return pd.DataFrame(frame)


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
    boot = Resampler(n_t, n_boot, seed)

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
                pooled = _pooled(x_all, y_all, STATISTICS)
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
        pooled = _pooled(x_all, y_all, ("spearman", "pearson"))
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
