"""The bootstrap every interval of the report uses: one set of resamples of the traces
(`Resampler`), shared by every statistic, so both members of a pair, every pair and every paired
difference see the same resamples; percentile intervals; bootstrap p of a mean being 0.

Where traces come in groups (several samples of one problem, which resemble each other), the
resamples draw whole groups (`clusters`): a problem drawn twice brings all its samples twice,
so the interval reflects how many problems were seen, not how many samples.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

_BOOT_CELLS = 2_000_000  # resample weights held at once (bounds memory)


class Resampler:
    """One set of bootstrap resamples of ``n_traces`` traces, shared by every statistic.

    Resample ``b`` draws ``n_traces`` traces with replacement or, with ``clusters`` (one integer
    code per trace: its problem), as many clusters as there are, with replacement, each with
    all its traces; a statistic defined on some of the traces (a column of values with NaN where
    undefined) takes, in that resample, the mean of its values over the drawn traces where it
    is defined. The draws depend only on ``n_boot``, the traces (or clusters) and ``seed``.
    """

    def __init__(self, n_traces: int, n_boot: int, seed: int,
                 clusters: np.ndarray | None = None):
        self.n_traces, self.n_boot, self.seed = n_traces, n_boot, seed
        if clusters is not None:
            clusters = np.asarray(clusters, dtype="int64")
            if clusters.shape != (n_traces,):
                raise ValueError(f"clusters: one code per trace expected ({n_traces}), got "
                                 f"{clusters.shape}")
            _, clusters = np.unique(clusters, return_inverse=True)  # codes 0..C-1
        self.clusters = clusters
        self._counts: np.ndarray | None = None

    @property
    def n_units(self) -> int:
        """What one resample draws: clusters, or traces without them."""
        return int(self.clusters.max()) + 1 if self.clusters is not None and len(
            self.clusters) else self.n_traces

    def counts(self) -> np.ndarray:
        """(n_boot, n_traces) how often each trace is drawn in each resample (its cluster's
        count); drawn once and kept (one byte per cell: 200 MB for 2,000 resamples of 100,000
        traces)."""
        if self._counts is None:
            rng = np.random.default_rng(self.seed)
            n = self.n_units
            out = np.empty((self.n_boot, n), dtype=np.uint8)
            chunk = max(1, _BOOT_CELLS // max(n, 1))
            for start in range(0, self.n_boot, chunk):
                size = min(chunk, self.n_boot - start)
                idx = rng.integers(0, n, size=(size, n)) + (np.arange(size) * n)[:, None]
                # a unit drawn more than 255 times in n draws: never at n >= 2 in practice
                drawn = np.bincount(idx.ravel(), minlength=size * n)
                out[start : start + size] = np.minimum(drawn, 255).reshape(size, n)
            self._counts = out if self.clusters is None else out[:, self.clusters]
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
                  seed: int = 0, clusters: np.ndarray | None = None
                  ) -> tuple[float, float, float]:
    """Mean of per-trace ``values`` (NaN = undefined, left out) and its 95% percentile-bootstrap
    interval, from ``Resampler(len(values), n_boot, seed, clusters)``: it depends on these
    values and the seed alone, never on which statistics were computed before it, and two
    columns of equal length see the same resamples (pass a paired difference ``a - b`` for a
    paired interval)."""
    values = np.asarray(values, dtype="float64")
    defined = values[np.isfinite(values)]
    if not len(defined):
        return float("nan"), float("nan"), float("nan")
    low, high = Resampler(len(values), n_boot, seed, clusters).intervals(values)
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


def cluster_codes(trace_ids: Sequence[str] | np.ndarray,
                  clusters: Mapping[str, object] | None) -> np.ndarray | None:
    """One integer code per trace of ``trace_ids`` from ``clusters`` (trace id -> its problem,
    a Series or a dict); a trace without one is a cluster of its own. None without clusters."""
    if clusters is None:
        return None
    get = clusters.get
    keys = [get(str(t)) for t in trace_ids]
    keys = [("trace", str(t)) if k is None or k != k else ("cluster", str(k))
            for t, k in zip(trace_ids, keys, strict=True)]
    index: dict[tuple[str, str], int] = {}
    return np.array([index.setdefault(k, len(index)) for k in keys], dtype="int64")
