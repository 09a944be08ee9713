"""Figures of the report, drawn with matplotlib: heatmap, scatter matrix and credit strips.

Figures are drawn on matplotlib's Agg canvas (no pyplot, so a notebook's backend is left alone).
Each is saved twice: a PNG for the HTML and Markdown report and a PDF of the same name (vector,
text kept as TrueType fonts) for a paper. Only the scatter points are rasterized in the PDF, so
a pair with 20,000 points stays small.
"""

from __future__ import annotations

import hashlib
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure
from PIL import Image

from cotcredit.methods import method_order
from cotcredit.report.stats import Correlations

#: Advance width of DejaVu Sans Mono (1233/2048 em), the font of the credit strips.
_MONO_ADVANCE = 1233 / 2048
#: Embed fonts as TrueType (Type 42): text in the PDFs stays selectable and editable.
_PDF_RC = {"pdf.fonttype": 42}


def pdf_path(png: Path) -> Path:
    """The PDF saved next to a figure's PNG."""
    return Path(png).with_suffix(".pdf")


def _figure(width: float, height: float) -> Figure:
    """A matplotlib Figure on an Agg canvas, independent of pyplot and its global state."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _save_png(
    fig: Figure, path: Path, *, dpi: int, colors: int | None = None, **kwargs: object
) -> None:
    """Save a figure as PNG; with ``colors``, as a palette PNG (text-heavy figures shrink ~4x).

    ``kwargs`` go to ``savefig`` (only without ``colors``).
    """
    if colors is None:
        fig.savefig(path, dpi=dpi, **kwargs)  # type: ignore[arg-type]
        return
    fig.set_dpi(dpi)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3]  # type: ignore[attr-defined]
    image = Image.fromarray(np.ascontiguousarray(rgb))
    image.quantize(colors=colors, method=Image.Quantize.FASTOCTREE).save(path, format="PNG")


def _save(
    fig: Figure, path: Path, *, dpi: int, colors: int | None = None, **kwargs: object
) -> None:
    """Save a figure as ``path`` (PNG) and as the PDF of the same name."""
    _save_png(fig, path, dpi=dpi, colors=colors, **kwargs)
    with rc_context(_PDF_RC):
        fig.savefig(pdf_path(path), format="pdf", dpi=dpi, **kwargs)  # type: ignore[arg-type]


def plot_heatmap(correlations: Correlations, path: Path) -> Path:
    """Write the method x method mean per-trace Spearman heatmap, cells annotated."""
    matrix = correlations.matrix
    n = len(matrix)
    fig = _figure(1.1 * n + 3.0, 0.9 * n + 2.2)
    ax = fig.add_subplot()
    cmap = ListedColormap(_cmap_colors("RdBu"), name="rdbu_grey").with_extremes(bad="#d9d9d9")
    image = ax.imshow(matrix.to_numpy(dtype="float64"), cmap=cmap, vmin=-1, vmax=1)
    names = [correlations.label(m) for m in matrix.columns]  # baselines marked
    ax.set_xticks(range(n), labels=names, rotation=40, ha="right")
    ax.set_yticks(range(n), labels=names)
    for i in range(n):
        for j in range(n):
            v = matrix.iat[i, j]
            label = "n/a" if not math.isfinite(v) else f"{v:.2f}"
            color = "white" if math.isfinite(v) and abs(v) > 0.6 else "black"
            ax.text(j, i, label, ha="center", va="center", color=color, fontsize=10)
    fig.colorbar(image, ax=ax, label="mean per-trace Spearman")
    ax.set_title("Method agreement: mean per-trace Spearman")
    _save(fig, path, dpi=110, bbox_inches="tight")
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
    pairs = correlations.pairs()
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
        la, lb = correlations.label(a), correlations.label(b)
        ax.set_title(f"{la} vs {lb}\n{sub}, {len(both)} points", fontsize=9)
        ax.set_xlabel(la, fontsize=8)
        ax.set_ylabel(lb, fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("Per-segment scores, pooled over traces")
    fig.tight_layout()
    _save(fig, path, dpi=100)
    return path


def _safe_name(trace_id: str) -> str:
    """A filename-safe form of a trace id; a short hash keeps altered ids distinct."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", trace_id).strip("._-")[:60] or "trace"
    if safe != trace_id:
        safe += "-" + hashlib.sha1(trace_id.encode("utf-8")).hexdigest()[:8]
    return safe


def strip_filename(trace_id: str) -> str:
    """The credit-strip file name of a trace: ``strip_<sanitized id>.png`` (and ``.pdf``)."""
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
            _save(fig, path, dpi=90, colors=64)
    return path


def plot_credit_strips(
    scores: pd.DataFrame, out_dir: Path, max_strips: int
) -> tuple[list[str], list[Path]]:
    """Credit strips of the first ``max_strips`` traces (in table order), methods in display
    order; returns the trace ids and the PNG paths."""
    trace_ids = [str(t) for t in pd.unique(scores["trace_id"])[: max(0, max_strips)]]
    order = {m: i for i, m in enumerate(method_order(pd.unique(scores["method"])))}
    paths: list[Path] = []
    for tid in trace_ids:
        rows = scores.loc[scores["trace_id"] == tid]
        by_method = {
            m: g.sort_values("segment")
            for m, g in sorted(rows.groupby("method"), key=lambda kv: order[kv[0]])
        }
        texts = next(iter(by_method.values()))["text"].tolist()
        values = {m: g["score"].to_numpy(dtype="float64") for m, g in by_method.items()}
        paths.append(plot_credit_strip(tid, texts, values, out_dir / strip_filename(tid)))
    return trace_ids, paths


def plot_rollout_equivalence(analysis, path: Path, labels: Mapping[str, str] | None = None) -> Path:
    """Agreement with held-out rollouts: the MC(n) curve (95% band), each method as a
    horizontal line, the ceiling for the held-out half as a dashed line (PNG and PDF)."""
    curve = analysis.curve
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    ax.fill_between(curve["rollouts"], curve["ci_low"], curve["ci_high"], color="#9ecae1",
                    alpha=0.5, linewidth=0)
    ax.plot(curve["rollouts"], curve["agreement"], "o-", color="#08519c", label="MC(n)")
    colors = colormaps["tab10"].colors
    for i, row in enumerate(analysis.equivalence.itertuples(index=False)):
        name = (labels or {}).get(row.method, row.method)
        style = ":" if name.endswith("(baseline)") else "-"  # baselines read no text
        ax.axhline(row.agreement, color=colors[(i + 1) % 10], linewidth=1.2, linestyle=style,
                   label=name)
    half = analysis.ceiling.loc[analysis.ceiling["rollouts"] == analysis.held_out, "ceiling"]
    if len(half):
        ax.axhline(float(half.iloc[0]), color="#444444", linestyle="--", linewidth=1,
                   label="ceiling (error-free values)")
    ax.set_xlabel("rollouts per boundary n")
    ax.set_ylabel(f"Spearman with {analysis.held_out} held-out rollouts")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path, dpi=150)
    return path
