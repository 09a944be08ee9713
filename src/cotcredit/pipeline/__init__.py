"""The analysis path and the Python API of the commands. Its modules:

* ``run``: ``score`` and ``run_analysis``, the one path every analysis takes (traces -> encode
  -> one forward pass -> segments -> methods -> rows appended per trace to Parquet tables):
  which traces a run reads, and every check a run can make before its model loads;
* ``summary``: ``RunSummary``, what a run did, and reading its rows back;
* ``api``: ``segment`` and one function per method command, made from the registry
  (``cotcredit.redistribute``, ...);
* ``generate``: sampling graded traces from a problem set;
* ``scores``: reading score tables back (checked to share one segmentation), and finding
  each method's table in a folder;
* ``export``: one method's segment credits as JSON Lines (e.g. process reward model labels).
"""

from __future__ import annotations

from cotcredit._lazy import lazy_index

_WHERE = {
    "problem_key": "cotcredit.data.trace",
    **dict.fromkeys((
        "score", "scorer_for", "fields_spec", "segment_columns", "run_analysis",
        "with_rendered_prompt", "InputOptions", "parse_shard", "in_shard", "stream_traces",
        "select", "load_traces", "check_inputs", "SiblingIndex", "sibling_index",
    ), "cotcredit.pipeline.run"),
    **dict.fromkeys(("SEGMENTS", "RunSummary"), "cotcredit.pipeline.summary"),
    **dict.fromkeys(("segment", "command_function", "command_functions"),
                    "cotcredit.pipeline.api"),
    **dict.fromkeys((
        "GenerateOptions", "GenerateSummary", "generate_traces",
    ), "cotcredit.pipeline.generate"),
    **dict.fromkeys((
        "EXPORT_FORMATS", "ExportResult", "export_scores", "ExportOptions",
    ), "cotcredit.pipeline.export"),
    **dict.fromkeys((
        "REQUIRED_COLUMNS", "normalize", "read_columns", "read_scores", "load_scores",
        "check_segmentations", "ScoreTablesNotFound", "labels_in", "find_score_tables",
    ), "cotcredit.pipeline.scores"),
}

__all__ = sorted(_WHERE)
# The method commands' functions (redistribute, mc_baseline, attribute, ...) are made from the
# registry: `api.command_functions`.
__getattr__, __dir__ = lazy_index(__name__, _WHERE, "cotcredit.pipeline.api:command_functions")
