"""Compare credit-assignment methods on one segmentation: correlations, figures and the report.

Input is the tidy score table every method writes (one row per trace, segment and method). For
every pair of methods and every trace scored by both, three correlations are computed over the
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

Rows about a reference always have ``method_a`` = the method and ``method_b`` = the reference; rows
about a pair otherwise follow the canonical method order (rredcot, mc, loo, shapley, gradient-*,
then the others alphabetically). Aggregate rows carry ``trace_id == "all"``; their statistic
names (``mean_*``, ``pooled_*``, ``early_*``, ``late_*``, ``top1_agreement``) never clash with the
per-trace ones (``pearson``, ``spearman``, ``kendall``), so filter on ``statistic``.

Figures are drawn with matplotlib's Agg canvas (no pyplot, so a notebook's backend is left alone)
and the report is written both as Markdown (figures linked) and as one self-contained HTML file
(figures embedded as base64 data URIs, inline CSS, no external resource).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
import re
import uuid
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from matplotlib import colormaps, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure
from PIL import Image
from rich.table import Table
from scipy import stats

from cotcredit.errors import UserError

__all__ = [
    "CORRELATION_COLUMNS",
    "Correlations",
    "ReportFiles",
    "check_segmentations",
    "correlate",
    "load_scores",
    "method_order",
    "plot_credit_strip",
    "plot_heatmap",
    "plot_scatter_matrix",
    "strip_filename",
    "summary_table",
    "write_report",
]

#: Columns the report needs in a score table (other columns are carried along, unused).
REQUIRED_COLUMNS = ("trace_id", "segment", "method", "score", "char_start", "char_end", "text")
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
#: Known methods first, in this order; any other method follows alphabetically.
KNOWN_METHODS = (
    "rredcot",
    "mc",
    "loo",
    "shapley",
    "gradient-ig",
    "gradient-saliency",
    "gradient-ixg",
)
STATISTICS = ("pearson", "spearman", "kendall")
ALL = "all"

# Per-trace statistics are computed here rather than by calling scipy.stats for every trace and
# pair (its per-call overhead made 1000 traces x 21 pairs take over a minute); they equal
# scipy.stats.pearsonr / spearmanr / kendalltau to rounding, which the tests check.
_KENDALL_PAIRWISE_MAX = 256  # longer inputs go to scipy.stats.kendalltau (O(n log n))
#: Advance width of DejaVu Sans Mono (1233/2048 em), the font of the credit strips.
_MONO_ADVANCE = 1233 / 2048
#: Suffix of skip reasons that concern only the reference analyses, not the pair's correlations.
_REFERENCE_ONLY = "only)"
_BOOT_CELLS = 1_000_000  # bootstrap indices generated per chunk (bounds memory)


# --------------------------------------------------------------------------------------------
# Loading and checking score tables
# --------------------------------------------------------------------------------------------


def method_order(methods: Iterable[str]) -> list[str]:
    """Return the distinct ``methods`` in canonical order: known methods first, others sorted."""
    distinct = set(methods)
    known = [m for m in KNOWN_METHODS if m in distinct]
    return known + sorted(distinct - set(KNOWN_METHODS))


def _one_line(text: object) -> str:
    """Collapse whitespace (newlines included) so an error message stays on one line."""
    return " ".join(str(text).split())


def _normalize(scores: pd.DataFrame, where: str = "score table") -> pd.DataFrame:
    """Check the required columns and give them the types the report relies on (a copy)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in scores.columns]
    if missing:
        raise UserError(
            f"{where}: missing column(s) {', '.join(missing)}; expected a cotcredit score table "
            f"with {', '.join(REQUIRED_COLUMNS)}"
        )
    out = scores.copy()
    for col in ("trace_id", "method"):
        if out[col].isna().any():
            raise UserError(f"{where}: column {col!r} has empty values; every row needs one")
        out[col] = out[col].astype(str)
    for col in ("segment", "char_start", "char_end"):
        values = pd.to_numeric(out[col], errors="coerce")
        if values.isna().any():
            raise UserError(f"{where}: column {col!r} has missing or non-numeric values")
        out[col] = values.astype("int64")
    try:
        out["score"] = pd.to_numeric(out["score"], errors="raise").astype("float64")
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: column 'score' is not numeric ({_one_line(exc)})") from None
    out["text"] = out["text"].fillna("").astype(str)
    return out


def _read_one(path: Path) -> pd.DataFrame:
    """Read one Parquet score table, turning every failure into a one-line ``UserError``."""
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory; pass the Parquet file(s) of scores")
    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise UserError(f"{path}: cannot be read as Parquet ({_one_line(exc)})") from None
    return _normalize(frame, str(path))


def load_scores(paths: Sequence[Path | str]) -> pd.DataFrame:
    """Read and concatenate score tables, one or more methods per file.

    Refuses (``UserError``) a method that appears in two files, a (trace, segment, method) that
    appears twice, and a trace whose segmentation differs between methods (segment count or any
    segment's ``char_start``/``char_end``): correlating such scores would silently pair unrelated
    spans of text.
    """
    if not paths:
        raise UserError("no score files given; pass one or more Parquet files of scores")
    frames: list[pd.DataFrame] = []
    source: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw)
        frame = _read_one(path)
        for method in pd.unique(frame["method"]):
            if method in source:
                raise UserError(
                    f"method {method!r} is in both {source[method]} and {path}; "
                    "pass each method's scores once"
                )
            source[method] = path
        frames.append(frame)
    scores = pd.concat(frames, ignore_index=True)
    check_segmentations(scores, sources=source)
    return scores


def check_segmentations(
    scores: pd.DataFrame, sources: Mapping[str, Path | str] | None = None
) -> None:
    """Raise ``UserError`` unless all methods scored each trace on the same segmentation.

    ``sources`` maps a method to the file it came from, only to name files in the message.
    """

    def where(method: str) -> str:
        return f" ({sources[method]})" if sources and method in sources else ""

    key = ["trace_id", "method", "segment"]
    dup = scores.duplicated(key)
    if dup.any():
        row = scores.loc[dup].iloc[0]
        raise UserError(
            f"trace {row['trace_id']!r}: method {row['method']!r}{where(row['method'])} has "
            f"segment {int(row['segment'])} more than once; remove the duplicated rows"
        )
    spans = scores[["trace_id", "method", "segment", "char_start", "char_end"]]
    if spans.empty:
        return
    rank = {m: i for i, m in enumerate(method_order(spans["method"]))}
    first_rank = spans["method"].map(rank).groupby(spans["trace_id"]).transform("min")
    is_base = spans["method"].map(rank) == first_rank
    base = spans.loc[is_base]
    others = spans.loc[~is_base]
    if others.empty:
        return
    base_method = base.groupby("trace_id")["method"].first()

    counts = spans.groupby(["trace_id", "method"], sort=False).size().rename("count").reset_index()
    base_counts = base.groupby("trace_id").size()
    counts["base"] = counts["trace_id"].map(base_counts)
    bad_count = counts.loc[counts["count"] != counts["base"]]
    if not bad_count.empty:
        row = bad_count.iloc[0]
        tid, method = row["trace_id"], row["method"]
        ref = base_method[tid]
        raise UserError(
            f"trace {tid!r}: segmentations differ between {ref!r}{where(ref)} and "
            f"{method!r}{where(method)}: {int(row['base'])} vs {int(row['count'])} segments; "
            "score every method on one shared segmentation"
        )

    merged = others.merge(
        base[["trace_id", "segment", "char_start", "char_end"]],
        on=["trace_id", "segment"],
        how="left",
        suffixes=("", "_base"),
    )
    mismatch = (
        merged["char_start_base"].isna()
        | (merged["char_start"] != merged["char_start_base"])
        | (merged["char_end"] != merged["char_end_base"])
    )
    if mismatch.any():
        row = merged.loc[mismatch].iloc[0]
        tid, method, seg = row["trace_id"], row["method"], int(row["segment"])
        ref = base_method[tid]
        if pd.isna(row["char_start_base"]):
            detail = f"segment {seg} exists only in {method!r}"
        else:
            detail = (
                f"segment {seg} spans chars {int(row['char_start_base'])}-"
                f"{int(row['char_end_base'])} in {ref!r} but {int(row['char_start'])}-"
                f"{int(row['char_end'])} in {method!r}"
            )
        raise UserError(
            f"trace {tid!r}: segmentations differ between {ref!r}{where(ref)} and "
            f"{method!r}{where(method)}: {detail}; score every method on one shared segmentation"
        )


# --------------------------------------------------------------------------------------------
# Correlations
# --------------------------------------------------------------------------------------------


@dataclass
class Correlations:
    """Everything ``correlate`` computed; ``table`` is what ``correlations.parquet`` holds.

    Attributes:
        table: tidy rows with columns ``CORRELATION_COLUMNS``. Per-trace rows (statistic
            pearson/spearman/kendall) have ``n`` = segments and NaN CI; aggregate rows have
            ``trace_id == "all"``.
        skipped: traces left out of a pair's statistics: method_a, method_b, reason, n_traces.
        matrix: method x method mean per-trace Spearman (diagonal 1, NaN where no trace was
            usable).
        methods: the methods in canonical order.
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
        return self.table.loc[~self.table["statistic"].isin(STATISTICS)].reset_index(drop=True)

    def per_trace(self) -> pd.DataFrame:
        """The per-trace rows of ``table``."""
        return self.table.loc[self.table["statistic"].isin(STATISTICS)].reset_index(drop=True)

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
    scores = _normalize(scores)
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

    short_reason = f"fewer than {min_segments} segments"
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
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
                if len(x) < min_segments:
                    reasons[short_reason] += 1
                elif not (np.isfinite(x).all() and np.isfinite(y).all()):
                    reasons["NaN or infinite score"] += 1
                elif np.ptp(x) == 0 or np.ptp(y) == 0:
                    reasons["constant scores"] += 1
                else:
                    vals = [_stat(s, x, y) for s in STATISTICS]
                    if not all(math.isfinite(v) for v in vals):
                        reasons["correlation undefined"] += 1
                        continue
                    used.append(tid)
                    per_trace.append(vals)
                    xs.append(x)
                    ys.append(y)
                    for s, v in zip(STATISTICS, vals, strict=True):
                        rows.append(_row(tid, a, b, s, v, len(x)))
            for reason, count in reasons.items():
                skipped.append({"method_a": a, "method_b": b, "reason": reason, "n_traces": count})
            if not used:
                continue

            values = np.asarray(per_trace, dtype="float64")
            low, high = _bootstrap_ci(values, n_boot, seed)
            means = values.mean(axis=0)
            for k, s in enumerate(STATISTICS):
                rows.append(_row(ALL, a, b, f"mean_{s}", means[k], len(used), (low[k], high[k])))
            matrix.loc[a, b] = matrix.loc[b, a] = means[STATISTICS.index("spearman")]
            x_all, y_all = np.concatenate(xs), np.concatenate(ys)
            pooled = _pooled(x_all, y_all, STATISTICS)
            if pooled is not None:  # cannot fail: every used trace is non-constant
                for s, v in pooled.items():
                    rows.append(_row(ALL, a, b, f"pooled_{s}", v, len(x_all)))

            if ref is not None and ref in (a, b):
                other = b if a == ref else a
                other_xs, ref_xs = (ys, xs) if a == ref else (xs, ys)
                rows_ref, skipped_ref = _reference_stats(other, ref, other_xs, ref_xs, n_boot, seed)
                rows.extend(rows_ref)
                skipped.extend(skipped_ref)

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


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Figure:
    """A matplotlib Figure on an Agg canvas, independent of pyplot and its global state."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _save_png(fig: Figure, path: Path, *, dpi: int, colors: int | None = None) -> None:
    """Save a figure as PNG; with ``colors``, as a palette PNG (text-heavy figures shrink ~4x)."""
    if colors is None:
        fig.savefig(path, dpi=dpi)
        return
    fig.set_dpi(dpi)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3]  # type: ignore[attr-defined]
    image = Image.fromarray(np.ascontiguousarray(rgb))
    image.quantize(colors=colors, method=Image.Quantize.FASTOCTREE).save(path, format="PNG")


def _pairs(correlations: Correlations) -> list[tuple[str, str]]:
    methods = correlations.methods
    return [(a, b) for i, a in enumerate(methods) for b in methods[i + 1 :]]


def plot_heatmap(correlations: Correlations, path: Path) -> Path:
    """Write the method x method mean per-trace Spearman heatmap, cells annotated."""
    matrix = correlations.matrix
    n = len(matrix)
    fig = _figure(1.1 * n + 3.0, 0.9 * n + 2.2)
    ax = fig.add_subplot()
    cmap = ListedColormap(_cmap_colors("RdBu"), name="rdbu_grey").with_extremes(bad="#d9d9d9")
    image = ax.imshow(matrix.to_numpy(dtype="float64"), cmap=cmap, vmin=-1, vmax=1)
    ax.set_xticks(range(n), labels=list(matrix.columns), rotation=40, ha="right")
    ax.set_yticks(range(n), labels=list(matrix.index))
    for i in range(n):
        for j in range(n):
            v = matrix.iat[i, j]
            label = "n/a" if not math.isfinite(v) else f"{v:.2f}"
            color = "white" if math.isfinite(v) and abs(v) > 0.6 else "black"
            ax.text(j, i, label, ha="center", va="center", color=color, fontsize=10)
    fig.colorbar(image, ax=ax, label="mean per-trace Spearman")
    ax.set_title("Method agreement: mean per-trace Spearman")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _cmap_colors(name: str, lighten: float = 0.0) -> np.ndarray:
    """256 RGB colours of a named matplotlib colormap, optionally blended towards white."""
    rgb = colormaps[name](np.linspace(0, 1, 256))[:, :3]
    return rgb * (1 - lighten) + lighten


def plot_scatter_matrix(
    scores: pd.DataFrame, correlations: Correlations, path: Path, *, max_points: int = 20000
) -> Path:
    """Write one scatter panel per method pair: per-segment scores pooled over traces.

    Points are all segments where both scores are finite (subsampled to ``max_points`` with a
    fixed seed); the panel title quotes the pooled Spearman of the pair's usable traces.
    """
    pairs = _pairs(correlations)
    wide = scores.pivot_table(
        index=["trace_id", "segment"],
        columns="method",
        values="score",
        aggfunc="first",
        dropna=False,
    )
    ncols = max(1, math.ceil(math.sqrt(len(pairs))))
    nrows = max(1, math.ceil(len(pairs) / ncols))
    fig = _figure(3.6 * ncols, 3.4 * nrows)
    rng = np.random.default_rng(0)
    for k, (a, b) in enumerate(pairs):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        both = wide[[a, b]].dropna() if a in wide and b in wide else pd.DataFrame(columns=[a, b])
        both = both.loc[np.isfinite(both[a]) & np.isfinite(both[b])]
        if len(both) > max_points:
            both = both.iloc[np.sort(rng.choice(len(both), size=max_points, replace=False))]
        ax.axhline(0, color="#bbbbbb", lw=0.6, zorder=0)
        ax.axvline(0, color="#bbbbbb", lw=0.6, zorder=0)
        ax.scatter(both[a], both[b], s=6, alpha=0.45, color="#1f5fa8", rasterized=True)
        rho = correlations.value(a, b, "pooled_spearman")
        sub = f"pooled Spearman {rho:.2f}" if math.isfinite(rho) else "no usable trace"
        ax.set_title(f"{a} vs {b}\n{sub}, {len(both)} points", fontsize=9)
        ax.set_xlabel(a, fontsize=8)
        ax.set_ylabel(b, fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("Per-segment scores, pooled over traces")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _safe_name(trace_id: str) -> str:
    """A filename-safe form of a trace id; a short hash keeps altered ids distinct."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", trace_id).strip("._-")[:60] or "trace"
    if safe != trace_id:
        safe += "-" + hashlib.sha1(trace_id.encode("utf-8")).hexdigest()[:8]
    return safe


def strip_filename(trace_id: str) -> str:
    """The credit-strip file name of a trace: ``strip_<sanitized id>.png``."""
    return f"strip_{_safe_name(trace_id)}.png"


def _layout(
    texts: Sequence[str], width: int, max_chars: int
) -> tuple[list[list[tuple[int, int, str]]], int, list[tuple[int, int]]]:
    """Word-wrap the segments' concatenated text into lines of at most ``width`` characters.

    Returns the lines (each a list of (column, segment, text) runs of one segment), the number of
    characters cut by ``max_chars``, and the (line, column) where each shown segment starts.
    """
    chars: list[str] = []
    owner: list[int] = []
    for seg, text in enumerate(texts):
        clean = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "    ")
        clean = "".join(c if c == "\n" or c.isprintable() else " " for c in clean)
        chars.extend(clean)
        owner.extend([seg] * len(clean))
    total = len(chars)
    chars, owner = chars[:max_chars], owner[:max_chars]
    full = "".join(chars)

    placed: list[tuple[int, int, int, int]] = []  # (line, col, start, length)
    line, col = 0, 0
    for match in re.finditer(r"\n|[^\S\n]+|\S+", full):
        token, start = match.group(), match.start()
        if token == "\n":
            line, col = line + 1, 0
            continue
        if token.isspace():
            take = min(len(token), width - col)
            if take > 0:
                placed.append((line, col, start, take))
                col += take
            continue
        if col > 0 and col + len(token) > width:
            line, col = line + 1, 0
        while len(token) > width - col:
            take = width - col
            placed.append((line, col, start, take))
            token, start = token[take:], start + take
            line, col = line + 1, 0
        if token:
            placed.append((line, col, start, len(token)))
            col += len(token)

    lines: list[list[tuple[int, int, str]]] = [[] for _ in range(line + 1)]
    starts: dict[int, tuple[int, int]] = {}
    for ln, c, start, length in placed:
        run_start = start
        for pos in range(start, start + length + 1):
            if pos == start + length or owner[pos] != owner[run_start]:
                seg = owner[run_start]
                column = c + (run_start - start)
                lines[ln].append((column, seg, full[run_start:pos]))
                starts.setdefault(seg, (ln, column))
                run_start = pos
    while len(lines) > 1 and not lines[-1]:
        lines.pop()
    return lines, total - len(full), [starts[s] for s in sorted(starts)]


def plot_credit_strip(
    trace_id: str,
    texts: Sequence[str],
    scores_by_method: Mapping[str, np.ndarray],
    path: Path,
    *,
    width_chars: int = 100,
    max_chars: int = 2000,
) -> Path:
    """Draw a trace's reasoning text once per method, each segment shaded by its score.

    Colours are diverging and centred at 0 (red < 0 < blue), scaled per method to the largest
    absolute score of the trace; NaN scores are grey. Thin dark bars mark segment starts.
    """
    lines, cut, seg_starts = _layout(texts, width_chars, max_chars)
    cmap = ListedColormap(_cmap_colors("RdBu", lighten=0.3), name="strip").with_extremes(
        bad="#d9d9d9"
    )
    fig_w = 12.0
    left_in, right_in, cbar_in = 0.25, 0.9, 0.12
    text_w = fig_w - left_in - right_in
    fontsize = text_w * 72 / (width_chars * 0.64)
    line_h = fontsize * 1.45 / 72
    title_h, gap_h, top_h, bottom_h = 0.32, 0.18, 0.55, 0.15
    methods = list(scores_by_method)
    panel_h = [max(len(lines), 1) * line_h for _ in methods]
    fig_h = top_h + bottom_h + sum(h + title_h + gap_h for h in panel_h)
    fig = _figure(fig_w, fig_h)
    heading = f"Credit strip: trace {trace_id}"
    if cut:
        heading += f"  (first {max_chars} of {max_chars + cut} characters)"
    fig.text(left_in / fig_w, 1 - 0.3 / fig_h, heading, fontsize=12, va="center", parse_math=False)

    y_top = fig_h - top_h
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # glyphs missing from the font, mostly
        for method, height in zip(methods, panel_h, strict=True):
            y_top -= title_h
            bottom = y_top - height
            ax = fig.add_axes((left_in / fig_w, bottom / fig_h, text_w / fig_w, height / fig_h))
            values = np.asarray(scores_by_method[method], dtype="float64")
            finite = values[np.isfinite(values)]
            scale = float(np.abs(finite).max()) if finite.size else 0.0
            scale = scale if scale > 0 else 1.0
            norm = Normalize(-scale, scale)
            seg_colors = cmap(norm(np.where(np.isfinite(values), values, np.nan)))
            # One data unit = one character advance, so each line is one text artist and the
            # shaded boxes (one collection) line up with it.
            ax.set_xlim(0, text_w * 72 / (_MONO_ADVANCE * fontsize))
            ax.set_ylim(max(len(lines), 1), 0)
            ax.set_axis_off()
            ax.set_title(
                f"{method}   (scale ±{scale:.3g}; red < 0 < blue)",
                fontsize=9,
                loc="left",
                parse_math=False,
            )
            boxes, colors = [], []
            for ln, runs in enumerate(lines):
                for col, seg, text in runs:
                    colors.append(seg_colors[seg] if seg < len(values) else (0.85, 0.85, 0.85, 1))
                    end = col + len(text)
                    boxes.append([(col, ln), (end, ln), (end, ln + 1), (col, ln + 1)])
                if runs:
                    ax.text(
                        runs[0][0],
                        ln + 0.5,
                        "".join(text for _, _, text in runs),
                        va="center_baseline",
                        ha="left",
                        fontsize=fontsize,
                        fontfamily="DejaVu Sans Mono",
                        parse_math=False,
                    )
            ax.add_collection(
                PolyCollection(boxes, facecolors=colors, linewidths=0, zorder=0), autolim=False
            )
            ax.add_collection(
                LineCollection(
                    [[(col, ln + 0.05), (col, ln + 0.95)] for ln, col in seg_starts],
                    colors="#333333",
                    linewidths=0.8,
                ),
                autolim=False,
            )
            cax = fig.add_axes(
                ((fig_w - right_in + 0.2) / fig_w, bottom / fig_h, cbar_in / fig_w, height / fig_h)
            )
            fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=cax)
            cax.tick_params(labelsize=6)
            y_top = bottom - gap_h
        # No hinting: hinted glyph advances are rounded to whole pixels and drift off the grid.
        with rc_context({"text.hinting": "no_hinting"}):
            _save_png(fig, path, dpi=90, colors=64)
    return path


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


@dataclass
class ReportFiles:
    """Paths written by ``write_report`` (figures None when there was nothing to draw)."""

    out_dir: Path
    correlations: Path
    markdown: Path
    html: Path
    heatmap: Path | None
    scatter: Path | None
    strips: list[Path]

    def all(self) -> list[Path]:
        """Every file written."""
        files = [self.correlations, self.markdown, self.html, self.heatmap, self.scatter]
        return [p for p in files if p is not None] + list(self.strips)


def _fmt(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}f}" if v is not None and math.isfinite(v) else "–"


def _fmt_ci(value: float, low: float, high: float) -> str:
    if math.isfinite(low) and math.isfinite(high):
        return f"{_fmt(value)} [{_fmt(low)}, {_fmt(high)}]"
    return _fmt(value)


# A report is a list of blocks rendered twice (Markdown, HTML):
# ("h1"|"h2"|"h3"|"p", text) | ("table", headers, rows) | ("img", filename, alt)
Block = tuple[Any, ...]


def _blocks(
    scores: pd.DataFrame,
    corr: Correlations,
    title: str,
    notes: Mapping[str, Any] | None,
    files: ReportFiles,
    strip_ids: Sequence[str],
) -> list[Block]:
    agg = corr.aggregates()
    blocks: list[Block] = [("h1", title)]
    n_segments = scores.groupby("method").size()
    n_traces = scores.groupby("method")["trace_id"].nunique()
    blocks.append(
        (
            "p",
            f"{len(corr.methods)} method(s), {corr.n_traces} trace(s). Correlations are computed "
            f"per trace over its segments, then averaged across traces (95% percentile bootstrap "
            f"CI over traces, {corr.params.get('n_boot')} resamples, seed "
            f"{corr.params.get('seed')}) and pooled over all segments. Traces with fewer than "
            f"{corr.params.get('min_segments')} segments, NaN scores or constant scores are left "
            "out of a pair's statistics and counted below.",
        )
    )
    blocks.append(
        (
            "table",
            ["method", "traces", "segments"],
            [
                [m, str(int(n_traces.get(m, 0))), str(int(n_segments.get(m, 0)))]
                for m in corr.methods
            ],
        )
    )
    if notes:
        blocks.append(("h2", "Notes"))
        blocks.append(("table", ["key", "value"], [[str(k), _note(v)] for k, v in notes.items()]))

    pairs = _pairs(corr)
    blocks.append(("h2", "Mean per-trace correlation"))
    if not pairs:
        blocks.append(("p", "Only one method in the table: there is nothing to correlate."))
    else:
        rows = []
        for a, b in pairs:
            sel = agg.loc[(agg["method_a"] == a) & (agg["method_b"] == b)].set_index("statistic")
            if "mean_spearman" not in sel.index:
                rows.append([a, b, "–", "–", "–", "0"])
                continue
            cells = [
                _fmt_ci(*sel.loc[f"mean_{s}", ["value", "ci_low", "ci_high"]])
                for s in ("spearman", "pearson", "kendall")
            ]
            rows.append([a, b, *cells, str(int(sel.loc["mean_spearman", "n"]))])
        blocks.append(
            (
                "table",
                [
                    "method A",
                    "method B",
                    "Spearman [95% CI]",
                    "Pearson [95% CI]",
                    "Kendall [95% CI]",
                    "traces",
                ],
                rows,
            )
        )
        if files.heatmap is not None:
            blocks.append(("img", files.heatmap.name, "Mean per-trace Spearman heatmap"))

        blocks.append(("h2", "Pooled over segments"))
        rows = []
        for a, b in pairs:
            sel = agg.loc[(agg["method_a"] == a) & (agg["method_b"] == b)].set_index("statistic")
            if "pooled_spearman" not in sel.index:
                rows.append([a, b, "–", "–", "–", "0"])
                continue
            rows.append(
                [a, b]
                + [
                    _fmt(sel.loc[f"pooled_{s}", "value"])
                    for s in ("spearman", "pearson", "kendall")
                ]
                + [str(int(sel.loc["pooled_spearman", "n"]))]
            )
        blocks.append(
            ("table", ["method A", "method B", "Spearman", "Pearson", "Kendall", "segments"], rows)
        )
        if files.scatter is not None:
            blocks.append(("img", files.scatter.name, "Pairwise scatter of per-segment scores"))

    blocks.append(("h2", "Skipped traces"))
    if corr.skipped.empty:
        blocks.append(("p", "None: every trace entered every pair's statistics."))
    else:
        blocks.append(
            (
                "table",
                ["method A", "method B", "reason", "traces"],
                [
                    [r.method_a, r.method_b, r.reason, str(r.n_traces)]
                    for r in corr.skipped.itertuples(index=False)
                ],
            )
        )

    ref = corr.reference
    blocks.append(("h2", "Position analysis" + (f" (reference: {ref})" if ref else "")))
    others = [m for m in corr.methods if m != ref]
    if ref is None:
        blocks.append(
            (
                "p",
                f"The reference method {corr.params.get('reference')!r} is not in the table: "
                "position analysis and top-1 agreement are omitted.",
            )
        )
    else:
        blocks.append(
            (
                "p",
                "Pooled correlation with the reference within the early half (relative "
                "position < 0.5) and the late half (>= 0.5) of each trace's segments.",
            )
        )
        rows = []
        for m in others:
            sel = agg.loc[(agg["method_a"] == m) & (agg["method_b"] == ref)].set_index("statistic")

            def cell(stat: str, sel: pd.DataFrame = sel) -> str:
                return _fmt(sel.loc[stat, "value"]) if stat in sel.index else "–"

            def count(stat: str, sel: pd.DataFrame = sel) -> str:
                return str(int(sel.loc[stat, "n"])) if stat in sel.index else "0"

            rows.append(
                [
                    m,
                    cell("early_spearman"),
                    cell("late_spearman"),
                    cell("early_pearson"),
                    cell("late_pearson"),
                    count("early_spearman"),
                    count("late_spearman"),
                ]
            )
        blocks.append(
            (
                "table",
                [
                    "method",
                    "early Spearman",
                    "late Spearman",
                    "early Pearson",
                    "late Pearson",
                    "early segments",
                    "late segments",
                ],
                rows,
            )
        )

        blocks.append(("h2", f"Top-1 agreement with {ref}"))
        blocks.append(
            (
                "p",
                "Fraction of traces whose highest-scored segment is the reference's "
                "(95% bootstrap CI over traces; traces with a tied maximum are left out).",
            )
        )
        rows = []
        for m in others:
            sel = agg.loc[
                (agg["method_a"] == m)
                & (agg["method_b"] == ref)
                & (agg["statistic"] == "top1_agreement")
            ]
            if sel.empty:
                rows.append([m, "–", "0"])
            else:
                r = sel.iloc[0]
                rows.append([m, _fmt_ci(r["value"], r["ci_low"], r["ci_high"]), str(int(r["n"]))])
        blocks.append(("table", ["method", "agreement [95% CI]", "traces"], rows))

    blocks.append(("h2", "Credit strips"))
    if files.strips:
        blocks.append(
            (
                "p",
                f"The first {len(files.strips)} trace(s): each segment's text shaded by its "
                "score, one panel per method (red < 0 < blue, scaled per method; bars mark "
                "segment starts).",
            )
        )
        for tid, path in zip(strip_ids, files.strips, strict=True):
            blocks.append(("h3", f"Trace {tid}"))
            blocks.append(("img", path.name, f"Credit strip of trace {tid}"))
    else:
        blocks.append(("p", "No strips drawn."))

    blocks.append(("h2", "Files"))
    blocks.append(
        (
            "p",
            f"All statistics are in {files.correlations.name}: "
            "pd.read_parquet('correlations.parquet'); aggregate rows have trace_id 'all'.",
        )
    )
    return blocks


def _note(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def _md_cell(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _render_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + " ".join(str(block[1]).split()))
        elif kind == "p":
            out.append(str(block[1]))
        elif kind == "table":
            headers, rows = block[1], block[2]
            out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows)
        elif kind == "img":
            out.append(f"![{_md_cell(block[2])}]({block[1]})")
        out.append("")
    return "\n".join(out)


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: left; }
th { background: #f3f3f3; }
tr:nth-child(even) td { background: #fafafa; }
td { font-variant-numeric: tabular-nums; }
img { max-width: 100%; height: auto; display: block; margin: 1em 0; border: 1px solid #eee; }
footer { margin-top: 3em; color: #777; font-size: 12px; }
"""


def _render_html(blocks: Sequence[Block], out_dir: Path, title: str) -> str:
    esc = html.escape
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            body.append(f"<{kind}>{esc(str(block[1]))}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{esc(str(block[1]))}</p>")
        elif kind == "table":
            headers, rows = block[1], block[2]
            head = "".join(f"<th>{esc(str(h))}</th>" for h in headers)
            trs = "".join(
                "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode((out_dir / block[1]).read_bytes()).decode("ascii")
            body.append(f'<img src="data:image/png;base64,{data}" alt="{esc(str(block[2]))}">')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n<footer>Generated by cotcredit. Self-contained: figures are embedded.</footer>\n"
        "</body>\n</html>\n"
    )


def _write_atomic(path: Path, data: str | bytes) -> None:
    """Write a file via a temporary sibling and a rename, so a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_correlations(correlations: Correlations, path: Path) -> None:
    table = pa.Table.from_pandas(correlations.table, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"cotcredit.correlate"] = json.dumps(
        {**correlations.params, "methods": correlations.methods}
    ).encode("utf-8")
    table = table.replace_schema_metadata(meta)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def write_report(
    scores: pd.DataFrame,
    correlations: Correlations,
    out_dir: Path,
    *,
    title: str = "cotcredit report",
    notes: Mapping[str, Any] | None = None,
    max_strips: int = 20,
) -> ReportFiles:
    """Write ``correlations.parquet``, ``report.md``, ``report.html`` and the PNG figures.

    Args:
        scores: the score table ``correlations`` was computed from (for scatter and strips).
        correlations: ``correlate``'s result.
        out_dir: created if missing; existing files of the same names are replaced.
        title: report title.
        notes: key/value pairs shown in a Notes table (model, input files, command line...).
        max_strips: credit strips are drawn for the first this-many traces (in table order).
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot create the report folder ({_one_line(exc)})") from None
    scores = _normalize(scores)
    has_pairs = bool(_pairs(correlations))
    heatmap = plot_heatmap(correlations, out_dir / "heatmap.png") if has_pairs else None
    scatter = (
        plot_scatter_matrix(scores, correlations, out_dir / "scatter_matrix.png")
        if has_pairs
        else None
    )

    strip_ids = [str(t) for t in pd.unique(scores["trace_id"])[: max(0, max_strips)]]
    strips: list[Path] = []
    order = {m: i for i, m in enumerate(method_order(scores["method"]))}
    for tid in strip_ids:
        rows = scores.loc[scores["trace_id"] == tid]
        by_method = {
            m: g.sort_values("segment")
            for m, g in sorted(rows.groupby("method"), key=lambda kv: order[kv[0]])
        }
        first = next(iter(by_method.values()))
        texts = first["text"].tolist()
        values = {m: g["score"].to_numpy(dtype="float64") for m, g in by_method.items()}
        strips.append(plot_credit_strip(tid, texts, values, out_dir / strip_filename(tid)))

    files = ReportFiles(
        out_dir=out_dir,
        correlations=out_dir / "correlations.parquet",
        markdown=out_dir / "report.md",
        html=out_dir / "report.html",
        heatmap=heatmap,
        scatter=scatter,
        strips=strips,
    )
    _write_correlations(correlations, files.correlations)
    blocks = _blocks(scores, correlations, title, notes, files, strip_ids)
    _write_atomic(files.markdown, _render_markdown(blocks))
    _write_atomic(files.html, _render_html(blocks, out_dir, title))
    return files


def summary_table(correlations: Correlations) -> Table:
    """A rich Table of each pair's mean per-trace correlations (95% CI) for the terminal."""
    table = Table(title="Method agreement: mean per-trace correlation [95% bootstrap CI]")
    for name, justify in (
        ("method A", "left"),
        ("method B", "left"),
        ("Spearman", "right"),
        ("Pearson", "right"),
        ("Kendall", "right"),
        ("pooled Spearman", "right"),
        ("traces", "right"),
        ("skipped", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    agg = correlations.aggregates()
    skipped = correlations.skipped
    for a, b in _pairs(correlations):
        sel = agg.loc[(agg["method_a"] == a) & (agg["method_b"] == b)].set_index("statistic")
        n_skip = int(
            skipped.loc[
                (skipped["method_a"] == a)
                & (skipped["method_b"] == b)
                & ~skipped["reason"].str.endswith(_REFERENCE_ONLY),
                "n_traces",
            ].sum()
        )
        if "mean_spearman" not in sel.index:
            table.add_row(a, b, "–", "–", "–", "–", "0", str(n_skip))
            continue
        cells = [
            _fmt_ci(*sel.loc[f"mean_{s}", ["value", "ci_low", "ci_high"]])
            for s in ("spearman", "pearson", "kendall")
        ]
        pooled = (
            _fmt(sel.loc["pooled_spearman", "value"]) if "pooled_spearman" in sel.index else "–"
        )
        table.add_row(a, b, *cells, pooled, str(int(sel.loc["mean_spearman", "n"])), str(n_skip))
    return table
