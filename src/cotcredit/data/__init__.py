"""Reading input: every form traces and problems come in, the `Trace` record, and grading.
Its modules, each building on those before it:

* ``readers``: records from JSONL, gzip, JSON, Parquet, ``datasets`` folders and ids;
* ``grading``: extracting a final answer and checking it against the reference;
* ``trace``: the ``Trace`` record, where its reasoning ends, where it departs from a
  reference solution, which problem it answers (``problem_key``), its outcome ζ, and which keys
  hold each of its fields (``FieldNames``, the ``--format`` presets);
* ``traces``: one input record -> its traces (``parse_record``), and a whole input, streamed or
  into memory;
* ``problems``: problem sets (prompt, answer, optional solution).
"""
from __future__ import annotations

from cotcredit._lazy import lazy_index

_WHERE = {
    **dict.fromkeys((
        "BATCH_ROWS", "decode_json", "Records", "parquet_files", "open_records",
    ), "cotcredit.data.readers"),
    **dict.fromkeys((
        "last_boxed", "extract_answer", "GradeResult", "grade", "grade_completion",
    ), "cotcredit.data.grading"),
    **dict.fromkeys((
        "THINK_OPEN", "THINK_CLOSE", "Trace", "TraceError", "one_line", "reasoning_end",
        "first_departure", "PROBLEM_FIELD", "problem_key", "trace_outcome",
        "FieldNames", "FORMATS", "format_names", "FieldOptions", "MISSING", "get_path", "pick",
    ), "cotcredit.data.trace"),
    **dict.fromkeys((
        "STEP_SEPARATOR", "final_answer", "parse_record", "parse_trace",
        "ReadResult", "SeenIds", "iter_traces", "read_traces",
    ), "cotcredit.data.traces"),
    **dict.fromkeys((
        "ProblemInputOptions", "Problem", "parse_problem", "read_problems", "load_problems",
    ), "cotcredit.data.problems"),
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_index(__name__, _WHERE)
