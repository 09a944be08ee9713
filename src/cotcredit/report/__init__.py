"""Compare credit-assignment methods on one segmentation: statistics, figures and the report.

Input is the tidy score table every method writes. The modules, each importing only those
before it:

* ``bootstrap``: one set of bootstrap resamples of the traces, shared by every interval;
* ``correlation``: per-trace correlations of many traces at once, traces as arrays;
* ``stats``: correlations per trace, means with bootstrap CIs, pooled, position, top-1 and
  split-half reliability (definitions in its docstring);
* ``credit``, ``baselines``: what is correlated, and the text-free baselines;
* ``localization``, ``rollouts``: first-error localization, ceiling and rollout equivalence;
* ``costs``: seconds and tokens per trace of each method, ratio to RREDCoT;
* ``figures``: heatmap, scatter matrix and credit strips (PNG and PDF);
* ``summaries``: the report's tables as formatted strings;
* ``sections``: the report's sections as blocks;
* ``render``: the blocks rendered to Markdown, HTML and LaTeX;
* ``writer``: ``write_report``, the report folder;
* ``terminal``: the summary printed by ``cotcredit compare``;
* ``compare``: ``cotcredit compare`` (runs the methods or finds their tables, then reports).
"""

from __future__ import annotations

from cotcredit._lazy import lazy_index

_WHERE = {
    **dict.fromkeys((
        "REQUIRED_COLUMNS", "check_segmentations", "load_scores", "normalize", "read_scores",
    ), "cotcredit.pipeline.scores"),
    **dict.fromkeys((
        "CORRELATION_COLUMNS", "PAIRED_COLUMNS", "Correlations", "correlate",
    ), "cotcredit.report.stats"),
    **dict.fromkeys((
        "COST_COLUMNS", "COST_SUMMARY_COLUMNS", "cost_summary",
    ), "cotcredit.report.costs"),
    **dict.fromkeys((
        "pdf_path", "plot_credit_strip", "plot_credit_strips", "plot_heatmap",
        "plot_rollout_equivalence", "plot_scatter_matrix", "strip_filename",
    ), "cotcredit.report.figures"),
    **dict.fromkeys(("ReportFiles", "ReportInput", "report_blocks"), "cotcredit.report.sections"),
    **dict.fromkeys(("agreement_summary",), "cotcredit.report.summaries"),
    **dict.fromkeys(("analysis_tables", "cost_table", "summary_table"),
                    "cotcredit.report.terminal"),
    **dict.fromkeys(("write_report",), "cotcredit.report.writer"),
    **dict.fromkeys(("CompareResult", "ReportOptions", "analyse"), "cotcredit.report.compare"),
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_index(__name__, _WHERE)
