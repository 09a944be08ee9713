"""Writing the report folder: correlations and the other tables as Parquet, report.md, a
self-contained report.html, report.tex and the figures (`write_report`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cotcredit.errors import UserError
from cotcredit.pipeline.scores import normalize, one_line
from cotcredit.report.costs import cost_summary
from cotcredit.report.figures import (
    plot_credit_strips,
    plot_heatmap,
    plot_rollout_equivalence,
    plot_scatter_matrix,
)
from cotcredit.report.localization import Localization
from cotcredit.report.render import render_html, render_latex, render_markdown
from cotcredit.report.rollouts import RolloutAnalysis, rollout_table
from cotcredit.report.sections import ReportFiles, ReportInput, report_blocks
from cotcredit.report.stats import Correlations
from cotcredit.store import io


def _write_parquet(frame: pd.DataFrame, path: Path, meta: dict[str, Any]) -> None:
    """Write a DataFrame as Parquet with ``meta`` under the key ``cotcredit.correlate``."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    schema_meta = dict(table.schema.metadata or {})
    schema_meta[b"cotcredit.correlate"] = json.dumps(meta).encode("utf-8")
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(schema_meta), sink)
    io.write_atomic(path, sink.getvalue().to_pybytes())


def write_report(
    scores: pd.DataFrame,
    correlations: Correlations,
    out_dir: Path | str,
    *,
    title: str = "cotcredit report",
    notes: Mapping[str, Any] | None = None,
    max_strips: int = 20,
    localization: Localization | None = None,
    rollouts: RolloutAnalysis | None = None,
) -> ReportFiles:
    """Write the report folder.

    Files: ``correlations.parquet`` (``correlations.table``), ``report.md``, a self-contained
    ``report.html``, ``report.tex`` (booktabs tables of the agreement summary and, when the
    score tables record costs, of the costs), ``costs.parquet`` (``cost_summary``, when costs
    are recorded) and the figures, each as PNG and PDF.

    Args:
        scores: the score table ``correlations`` was computed from (for scatter and strips).
        correlations: ``correlate``'s result.
        out_dir: created if missing; existing files of the same names are replaced.
        title: report title.
        notes: key/value pairs shown in a Notes table (model, input files, command line...).
        max_strips: credit strips are drawn for the first this-many traces (in table order).
        localization: first-error localization (``localization.parquet`` and a section).
        rollouts: ceiling and rollout equivalence (``rollout_equivalence.parquet``, a figure
            and a section).

    The paired differences go to ``paired.parquet`` as well as ``correlations.parquet``.
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out_dir}: cannot create the report folder ({one_line(exc)})") from None
    scores = normalize(scores)
    has_pairs = bool(correlations.pairs())
    heatmap = plot_heatmap(correlations, out_dir / "heatmap.png") if has_pairs else None
    scatter = (
        plot_scatter_matrix(scores, correlations, out_dir / "scatter_matrix.png")
        if has_pairs
        else None
    )
    strip_ids, strips = plot_credit_strips(scores, out_dir, max_strips)
    costs = cost_summary(scores)
    labels = {m: correlations.label(m) for m in correlations.methods}
    equivalence = (
        plot_rollout_equivalence(rollouts, out_dir / "rollout_equivalence.png", labels)
        if rollouts is not None and len(rollouts.curve)
        else None
    )

    files = ReportFiles(
        out_dir=out_dir,
        correlations=out_dir / "correlations.parquet",
        markdown=out_dir / "report.md",
        html=out_dir / "report.html",
        latex=out_dir / "report.tex",
        heatmap=heatmap,
        scatter=scatter,
        strips=strips,
        costs=None if costs is None else out_dir / "costs.parquet",
        paired=out_dir / "paired.parquet" if len(correlations.paired) else None,
        localization=None if localization is None else out_dir / "localization.parquet",
        rollouts=None if rollouts is None else out_dir / "rollout_equivalence.parquet",
        equivalence=equivalence,
    )
    meta = {**correlations.params, "methods": correlations.methods}
    _write_parquet(correlations.table, files.correlations, meta)
    if costs is not None and files.costs is not None:
        _write_parquet(costs, files.costs, meta)
    if files.paired is not None:
        _write_parquet(correlations.paired, files.paired, meta)
    if localization is not None and files.localization is not None:
        loc_meta = {**meta, "counts": localization.counts, "field": localization.field}
        _write_parquet(localization.table, files.localization, loc_meta)
    if rollouts is not None and files.rollouts is not None:
        _write_parquet(rollout_table(rollouts), files.rollouts,
                       {**meta, "held_out": rollouts.held_out, "total": rollouts.total,
                        "source": Path(rollouts.source).name, "splits": rollouts.splits})
    report = ReportInput(
        scores=scores,
        corr=correlations,
        title=title,
        files=files,
        strip_ids=strip_ids,
        notes=dict(notes or {}),
        costs=costs,
        localization=localization,
        rollouts=rollouts,
    )
    blocks = report_blocks(report)
    io.write_atomic(files.markdown, render_markdown(blocks))
    io.write_atomic(files.html, render_html(blocks, out_dir, title))
    io.write_atomic(files.latex, render_latex(blocks))
    return files
