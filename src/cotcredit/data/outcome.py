"""A trace's outcome ζ: its own correct/reward field, else its final answer graded."""

from __future__ import annotations

from cotcredit.data.grading import grade_completion
from cotcredit.data.trace import Trace


def trace_outcome(trace: Trace) -> float:
    """ζ for a trace: the `correct`/`reward` field when present, else 1.0 if the response's
    final answer is equivalent to the reference answer (math-verify), else 0.0."""
    if trace.outcome is not None:
        return float(trace.outcome)
    return 1.0 if grade_completion(trace.response, trace.answer).correct else 0.0
