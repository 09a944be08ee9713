"""Agreement statistics between methods: correlations, bootstrap intervals, reference analyses.

For every pair of methods and every trace scored by both, three correlations are computed over the
trace's segments (Pearson, Spearman, Kendall tau-b; the values of ``scipy.stats``' functions).
They are then summarised

* across traces: ``mean_<stat>`` = the mean of the per-trace values, with a 95% percentile
  bootstrap interval obtained by resampling traces with replacement (``n`` = traces used);
* pooled: ``pooled_<stat>`` = one correlation over all segments of the traces used (``n`` =
  segments).

A trace enters a pair's statistics only if it has at least ``min_segments`` segments and both
methods give it finite, non-constant scores; every trace left out is counted, with its reason, in
``Correlations.skipped``, so no average is ever taken over NaNs. The same set of traces feeds every
statistic of that pair, the pooled ones included.

Against a reference method (Monte Carlo by default), two more analyses:

* position: each trace's segments are split at relative position ``segment / n_segments`` = 0.5
  into an early and a late half; ``early_<stat>`` and ``late_<stat>`` are pooled correlations of
  a method with the reference within each half;
* top-1 agreement: the fraction of traces whose highest-scored segment is the same for the method
  and the reference (traces where either maximum is tied are left out and counted).

Split-half reliability: when a method's rows carry ``score_half_a`` and ``score_half_b`` (Monte
Carlo credits from the even- and the odd-indexed rollouts of each boundary), the two halves are
correlated per trace (``split_half_<stat>``, ``method_a == method_b``), averaged over traces
(``mean_split_half_<stat>``, bootstrap CI) and stepped up to the full number of rollouts by the
Spearman–Brown formula 2r / (1 + r) (``spearman_brown_<stat>``, CI = the formula applied to the
interval's ends). That is how well two independent runs of the method would agree: the level at
which another method's agreement with it is as good as its own noise allows.

Rows about a reference always have ``method_a`` = the method and ``method_b`` = the reference; rows
about a pair otherwise follow the registry's method order (``cotcredit.methods.method_order``).
Aggregate rows carry ``trace_id == "all"``; their statistic names (``mean_*``, ``pooled_*``,
``early_*``, ``late_*``, ``top1_agreement``, ``spearman_brown_*``) never clash with the per-trace
ones (``pearson``, ``spearman``, ``kendall``, ``split_half_*``), so filter on ``statistic``.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
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

# Per-trace statistics are computed here rather than by calling scipy.stats for every trace and
# pair (its per-call overhead made 1000 traces x 21 pairs take over a minute); they equal
# scipy.stats.pearsonr / spearmanr / kendalltau to rounding, which the tests check.
_KENDALL_PAIRWISE_MAX = 256  # longer inputs go to scipy.stats.kendalltau (O(n log n))
_BOOT_CELLS = 1_000_000  # bootstrap indices generated per chunk (bounds memory)


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
        methods: the methods in display order (the registry's).
        reference: the reference method, or None when it is not in the table.
        n_traces: distinct traces in the input.
        params: the options used (n_boot, seed, min_segments, reference).
    """

    table: pd.DataFrame
    skipped: pd.DataFrame
    matrix: pd.DataFrame
    methods: list[str]
    reference: str | None
    n_traces: int
    params: dict[str, Any] = field(default_factory=dict)

    def aggregates(self) -> pd.DataFrame:
        """The aggregate rows (means with CI, pooled, position, top-1) of ``table``."""
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


def _bootstrap_ci(values: np.ndarray, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """95% percentile bootstrap interval of the column means of ``values`` (traces x stats).

    All columns share the same resamples of traces. The generator is re-seeded for every call, so
    a pair's interval does not depend on which other pairs were computed before it.
    """
    n, k = values.shape
    if n_boot == 0 or n == 0:
        nan = np.full(k, np.nan)
        return nan, nan.copy()
    rng = np.random.default_rng(seed)
    means = np.empty((n_boot, k))
    chunk = max(1, _BOOT_CELLS // n)
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        idx = rng.integers(0, n, size=(size, n))
        means[start : start + size] = values[idx].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return low, high


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r, computed as ``scipy.stats.pearsonr`` does (normalised centred dot product)."""
    xm = x - x.mean()
    ym = y - y.mean()
    r = float(np.dot(xm / np.linalg.norm(xm), ym / np.linalg.norm(ym)))
    return max(-1.0, min(1.0, r))


def _ranks(a: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), as ``scipy.stats.rankdata`` gives them."""
    order = np.argsort(a, kind="mergesort")
    ordered = a[order]
    new = np.concatenate(([True], ordered[1:] != ordered[:-1]))
    dense = np.empty(len(a), dtype=np.intp)
    dense[order] = np.cumsum(new)
    bounds = np.concatenate((np.flatnonzero(new), [len(a)]))
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's r of the average ranks (``scipy.stats.spearmanr``)."""
    return _pearson(_ranks(x), _ranks(y))


def _kendall(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b (``scipy.stats.kendalltau``); exact pair counting for short inputs."""
    if len(x) > _KENDALL_PAIRWISE_MAX:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(stats.kendalltau(x, y).statistic)
    sx = np.sign(x[:, None] - x[None, :])
    sy = np.sign(y[:, None] - y[None, :])
    return float((sx * sy).sum() / math.sqrt((sx * sx).sum() * (sy * sy).sum()))


def _stat(name: str, x: np.ndarray, y: np.ndarray) -> float:
    """One correlation statistic; callers ensure finite, non-constant inputs of length >= 2."""
    return _STAT_FUNCS[name](x, y)


_STAT_FUNCS = {"pearson": _pearson, "spearman": _spearman, "kendall": _kendall}


def _pooled(x: np.ndarray, y: np.ndarray, names: Sequence[str]) -> dict[str, float] | None:
    """Correlations over pooled points, or None when fewer than 3 points or a side is constant."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return {name: _stat(name, x, y) for name in names}


def _row(
    trace_id: str,
    method_a: str,
    method_b: str,
    statistic: str,
    value: float,
    n: int,
    ci: tuple[float, float] = (math.nan, math.nan),
) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "method_a": method_a,
        "method_b": method_b,
        "statistic": statistic,
        "value": float(value),
        "ci_low": float(ci[0]),
        "ci_high": float(ci[1]),
        "n": int(n),
    }


def correlate(
    scores: pd.DataFrame,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    min_segments: int = 3,
    reference: str = "mc",
) -> Correlations:
    """Correlate every pair of methods in ``scores`` (see the module docstring for definitions).

    Args:
        scores: a tidy score table (``load_scores`` output or any DataFrame with the columns).
        n_boot: bootstrap resamples of traces for the CI of the means (0: no interval, NaN).
        seed: seed of the bootstrap generator.
        min_segments: traces with fewer segments are left out (and counted); at least 2.
        reference: method for the position analysis and top-1 agreement, skipped if absent.
    """
    if n_boot < 0:
        raise UserError(f"n_boot must be >= 0, got {n_boot}")
    if min_segments < 2:
        raise UserError(
            f"min_segments must be >= 2 (a correlation needs 2 points), got {min_segments}"
        )
    scores = normalize(scores)
    check_segmentations(scores)
    methods = method_order(scores["method"])
    ref = reference if reference in methods else None
    trace_ids = sorted(pd.unique(scores["trace_id"]))

    # trace -> method -> scores ordered by segment
    arrays: dict[str, dict[str, np.ndarray]] = {}
    ordered = scores.sort_values(["trace_id", "method", "segment"], kind="stable")
    for (tid, method), group in ordered.groupby(["trace_id", "method"], sort=False):
        arrays.setdefault(str(tid), {})[str(method)] = group["score"].to_numpy(dtype="float64")

    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    matrix = pd.DataFrame(np.nan, index=methods, columns=methods, dtype="float64")
    for m in methods:
        matrix.loc[m, m] = 1.0
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            pair = _pair_stats(a, b, trace_ids, arrays, ref, n_boot, seed, min_segments)
            rows.extend(pair.rows)
            skipped.extend(pair.skipped)
            matrix.loc[a, b] = matrix.loc[b, a] = pair.mean_spearman
    for method in methods:
        half_rows, half_skipped = _split_half_stats(ordered, method, n_boot, seed, min_segments)
        rows.extend(half_rows)
        skipped.extend(half_skipped)

    table = pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))
    table = table.astype(
        {
            "trace_id": "str",
            "method_a": "str",
            "method_b": "str",
            "statistic": "str",
            "value": "float64",
            "ci_low": "float64",
            "ci_high": "float64",
            "n": "int64",
        }
    )
    skipped_df = pd.DataFrame(skipped, columns=list(SKIPPED_COLUMNS)).astype(
        {"method_a": "str", "method_b": "str", "reason": "str", "n_traces": "int64"}
    )
    return Correlations(
        table=table,
        skipped=skipped_df,
        matrix=matrix,
        methods=methods,
        reference=ref,
        n_traces=len(trace_ids),
        params={
            "n_boot": n_boot,
            "seed": seed,
            "min_segments": min_segments,
            "reference": reference,
        },
    )


@dataclass
class _PairResult:
    rows: list[dict[str, Any]]
    skipped: list[dict[str, Any]]
    mean_spearman: float = math.nan


def _usable(x: np.ndarray, y: np.ndarray, min_segments: int) -> str | None:
    """Why a trace cannot enter a correlation of ``x`` with ``y``, or None when it can."""
    if len(x) < min_segments:
        return f"fewer than {min_segments} segments"
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        return "NaN or infinite score"
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return "constant scores"
    return None


def _pair_stats(
    a: str,
    b: str,
    trace_ids: Sequence[str],
    arrays: dict[str, dict[str, np.ndarray]],
    ref: str | None,
    n_boot: int,
    seed: int,
    min_segments: int,
) -> _PairResult:
    """Per-trace, mean and pooled correlations of one pair, and the reference analyses."""
    result = _PairResult([], [])
    reasons: Counter[str] = Counter()
    used: list[str] = []
    per_trace: list[list[float]] = []
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for tid in trace_ids:
        by_method = arrays[tid]
        has_a, has_b = a in by_method, b in by_method
        if not (has_a or has_b):
            continue
        if not (has_a and has_b):
            reasons["scored by only one of the two methods"] += 1
            continue
        x, y = by_method[a], by_method[b]
        reason = _usable(x, y, min_segments)
        if reason is not None:
            reasons[reason] += 1
            continue
        vals = [_stat(s, x, y) for s in STATISTICS]
        if not all(math.isfinite(v) for v in vals):
            reasons["correlation undefined"] += 1
            continue
        used.append(tid)
        per_trace.append(vals)
        xs.append(x)
        ys.append(y)
        for s, v in zip(STATISTICS, vals, strict=True):
            result.rows.append(_row(tid, a, b, s, v, len(x)))
    for reason, count in reasons.items():
        result.skipped.append({"method_a": a, "method_b": b, "reason": reason, "n_traces": count})
    if not used:
        return result

    values = np.asarray(per_trace, dtype="float64")
    low, high = _bootstrap_ci(values, n_boot, seed)
    means = values.mean(axis=0)
    for k, s in enumerate(STATISTICS):
        result.rows.append(_row(ALL, a, b, f"mean_{s}", means[k], len(used), (low[k], high[k])))
    result.mean_spearman = float(means[STATISTICS.index("spearman")])
    x_all, y_all = np.concatenate(xs), np.concatenate(ys)
    pooled = _pooled(x_all, y_all, STATISTICS)
    if pooled is not None:  # cannot fail: every used trace is non-constant
        for s, v in pooled.items():
            result.rows.append(_row(ALL, a, b, f"pooled_{s}", v, len(x_all)))

    if ref is not None and ref in (a, b):
        other = b if a == ref else a
        other_xs, ref_xs = (ys, xs) if a == ref else (xs, ys)
        rows_ref, skipped_ref = _reference_stats(other, ref, other_xs, ref_xs, n_boot, seed)
        result.rows.extend(rows_ref)
        result.skipped.extend(skipped_ref)
    return result


def spearman_brown(r: float) -> float:
    """Reliability of the full-length measure from the correlation ``r`` of its two halves."""
    return 2 * r / (1 + r) if math.isfinite(r) and r > -1 else math.nan


def _split_half_stats(
    ordered: pd.DataFrame, method: str, n_boot: int, seed: int, min_segments: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split-half reliability of ``method`` (nothing when its rows lack the half columns)."""
    if not all(c in ordered.columns for c in HALF_COLUMNS):
        return [], []
    own = ordered.loc[ordered["method"] == method, ["trace_id", *HALF_COLUMNS]]
    if own.empty or own[list(HALF_COLUMNS)].isna().all().all():
        return [], []  # the method does not write halves (another method's columns)
    rows: list[dict[str, Any]] = []
    reasons: Counter[str] = Counter()
    per_trace: list[list[float]] = []
    for tid, group in own.groupby("trace_id", sort=False):
        x, y = (pd.to_numeric(group[c]).to_numpy(dtype="float64") for c in HALF_COLUMNS)
        reason = _usable(x, y, min_segments)
        vals = [] if reason else [_stat(s, x, y) for s in STATISTICS]
        if reason is None and not all(math.isfinite(v) for v in vals):
            reason = "correlation undefined"
        if reason is not None:
            reasons[reason.replace("score", "half score") + " (split-half only)"] += 1
            continue
        per_trace.append(vals)
        for s, v in zip(SPLIT_HALF, vals, strict=True):
            rows.append(_row(str(tid), method, method, s, v, len(x)))
    skipped = [
        {"method_a": method, "method_b": method, "reason": reason, "n_traces": count}
        for reason, count in reasons.items()
    ]
    if not per_trace:
        return rows, skipped
    values = np.asarray(per_trace, dtype="float64")
    low, high = _bootstrap_ci(values, n_boot, seed)
    means = values.mean(axis=0)
    n = len(per_trace)
    for k, s in enumerate(STATISTICS):
        ci = (low[k], high[k])
        rows.append(_row(ALL, method, method, f"mean_split_half_{s}", means[k], n, ci))
        stepped = spearman_brown(means[k])
        if math.isfinite(stepped):
            ci_sb = (spearman_brown(ci[0]), spearman_brown(ci[1]))
            rows.append(_row(ALL, method, method, f"spearman_brown_{s}", stepped, n, ci_sb))
    return rows, skipped


def _reference_stats(
    method: str,
    ref: str,
    method_scores: list[np.ndarray],
    ref_scores: list[np.ndarray],
    n_boot: int,
    seed: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Position analysis and top-1 agreement of ``method`` against ``ref`` on the used traces."""
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    halves: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {
        "early": ([], []),
        "late": ([], []),
    }
    hits: list[float] = []
    ties = 0
    for x, y in zip(method_scores, ref_scores, strict=True):
        n = len(x)
        early = np.arange(n) / n < 0.5
        halves["early"][0].append(x[early])
        halves["early"][1].append(y[early])
        halves["late"][0].append(x[~early])
        halves["late"][1].append(y[~early])
        if (x == x.max()).sum() > 1 or (y == y.max()).sum() > 1:
            ties += 1
        else:
            hits.append(float(np.argmax(x) == np.argmax(y)))
    for half, (hx, hy) in halves.items():
        x_all, y_all = np.concatenate(hx), np.concatenate(hy)
        pooled = _pooled(x_all, y_all, ("spearman", "pearson"))
        if pooled is None:
            skipped.append(
                {
                    "method_a": method,
                    "method_b": ref,
                    "reason": f"{half} half: fewer than 3 segments or constant scores "
                    "(position analysis only)",
                    "n_traces": len(method_scores),
                }
            )
            continue
        for s, v in pooled.items():
            rows.append(_row(ALL, method, ref, f"{half}_{s}", v, len(x_all)))
    if ties:
        skipped.append(
            {
                "method_a": method,
                "method_b": ref,
                "reason": "tied maximum score (top-1 agreement only)",
                "n_traces": ties,
            }
        )
    if hits:
        agree = np.asarray(hits)[:, None]
        low, high = _bootstrap_ci(agree, n_boot, seed)
        rows.append(
            _row(ALL, method, ref, "top1_agreement", agree.mean(), len(hits), (low[0], high[0]))
        )
    return rows, skipped
