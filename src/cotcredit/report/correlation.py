"""Correlations of many traces at once: Pearson, Spearman and Kendall tau-b of each trace's
two score vectors (`rowwise`, equal to ``scipy.stats``' functions), and the score table laid out
as arrays of traces grouped by segment count (`wide`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

_KENDALL_PAIRWISE_MAX = 256  # longer traces go to scipy.stats.kendalltau (O(n log n))
_KENDALL_CELLS = 4_000_000  # sign matrices computed per chunk of traces (bounds memory)


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


def correlation(name: str, x: np.ndarray, y: np.ndarray) -> float:
    """One correlation over two 1-D arrays (pooled segments)."""
    if name == "kendall" and len(x) > _KENDALL_PAIRWISE_MAX:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return float(stats.kendalltau(x, y).statistic)
    return float(rowwise(name, x[None, :], y[None, :])[0])


def pooled_correlations(x: np.ndarray, y: np.ndarray,
                        names: Sequence[str]) -> dict[str, float] | None:
    """Correlations over pooled points, or None when fewer than 3 points or a side is constant."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return {name: correlation(name, x, y) for name in names}


# ----------------------------------------------------------------------------- traces as arrays


@dataclass
class TraceGroup:
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
    groups: list[TraceGroup]

    def series(self, name: str) -> list[tuple[TraceGroup, np.ndarray, np.ndarray]]:
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
    groups: list[TraceGroup] = []
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
        groups.append(TraceGroup(int(k), members, values, present))
    return Wide(np.asarray(uniques, dtype=object), n_seg, groups)
