"""Anyone's labelled traces as a regime: ``cotcredit bench --traces FILE --model M``.

Any input the analysis commands read (``cotcredit.data``: a response, chat turns or pre-split
``steps``; presets such as ``--format processbench``) whose traces carry a first-error label:
``steps`` with a ``label`` (the first wrong step, −1 none; or per-step ratings), or an
``error_char`` field (the character where the first error starts, −1 none), or the keys named
with ``--label-field`` / ``--error-field``. Each trace also needs its reference answer (the
methods force and grade it); its outcome is its ``correct``/``reward`` field, else its final
answer graded against the reference (math-verify).

The traces become a regime like the shipped ones: one segment per step (traces with steps) or
per reasoning line, every method, Monte Carlo and every baseline, the same leaderboard. False
blame on valid paths is measured where a right trace with no wrong step departs from its
reference solution (``first_departure``); without solutions there is no such set (and no
``refdiff``). The development split (which chooses each row's baseline) and the held-out split
(which reports) are disjoint by problem: the ``problem_id`` field, else the prompt; the
problems in the order of a hash of their key, the first half dev. ``split_field`` names a field
whose values (``dev``/``test``) say instead.

Every problem with the labels is one line before any model loads: a label out of range (a step
index past the last step, an offset past the response), a ``label`` on a trace without steps, a
split value that is not dev or test, or no trace with a label at all.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cotcredit.data.readers import open_records
from cotcredit.data.trace import (
    MISSING,
    FieldOptions,
    Trace,
    TraceError,
    first_departure,
    get_path,
    pick,
)
from cotcredit.data.traces import STEP_SEPARATOR, parse_record
from cotcredit.errors import UserError
from cotcredit.lm.loading import ModelOptions

SPLIT_VALUES = ("dev", "test")


@dataclass
class LabelledTraces:
    """A user's labelled traces as a bench regime (module docstring); ``read`` checks them."""

    path: Path
    model_options: ModelOptions = field(default_factory=ModelOptions)
    fields: FieldOptions = field(default_factory=FieldOptions)
    split_field: str | None = None
    name: str = ""
    # what the bench reads of a regime: none of these apply to a user's traces
    exit_string: str | None = None  # the methods' own answer forcing
    sampling: dict = field(default_factory=dict)  # Monte Carlo's own sampling settings
    unavailable: str = ""
    hypothesis: str = "the user's own traces and model"
    records: dict[str, list[dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.name = self.name or "traces"

    @property
    def description(self) -> str:
        model = self.model_options.model or "the embedded model"
        return f"The labelled traces of {self.path.name}, scored with {model}."

    def model(self) -> str:
        """What loads the model: the ``--model`` given (the embedded model by default)."""
        return self.model_options.model or "embedded"

    def read(self) -> dict[str, list[dict]]:
        """The traces of each split as bench records (``records``), every label checked."""
        names = self.fields.names()
        src = str(self.path)
        traces: list[tuple[Trace, dict]] = []
        label_keys = names.label
        for line, obj, error in open_records(self.path, split=self.fields.split,
                                             subset=self.fields.subset):
            if error:
                raise TraceError(src, line, error)
            for trace in parse_record(obj, src, line, names):
                if trace.steps is None and label_keys:
                    key, value = pick(obj, label_keys)
                    if key is not None and value is not None:
                        raise TraceError(src, line, f"field '{key}' labels steps but the trace "
                                         f"has none (a 'steps' list; --steps-field names "
                                         f"another key); or give the first error's offset "
                                         f"(--error-field)")
                traces.append((trace, obj))
        if not traces:
            raise UserError(f"{src}: no traces")
        seen: dict[str, int] = {}
        for t, _ in traces:
            if t.id in seen:
                raise TraceError(src, t.line, f"trace id '{t.id}' also on line {seen[t.id]}")
            seen[t.id] = t.line
        if all(t.error_char is None for t, _ in traces):
            raise UserError(f"{src}: no trace has a first-error label (steps with a 'label', "
                            "or an 'error_char' field; --label-field / --error-field name "
                            "other keys)")
        split_of = self._splits(traces, src)
        self.records = {s: [] for s in SPLIT_VALUES}
        for t, _ in traces:
            self.records[split_of[t.id]].append(bench_record(t, split_of[t.id]))
        for split, rows in self.records.items():
            if not rows:
                self.notes.append(f"the {split} split is empty")
        return self.records

    def _splits(self, traces: list[tuple[Trace, dict]], src: str) -> dict[str, str]:
        """Trace id -> dev or test (``split_field``, else half the problems by hash)."""
        if self.split_field:
            out = {}
            for t, obj in traces:
                value = get_path(obj, self.split_field)
                if value is MISSING or value not in SPLIT_VALUES:
                    shown = "missing" if value is MISSING else repr(value)
                    raise TraceError(src, t.line, f"field '{self.split_field}' is {shown}; "
                                     "expected dev or test (--split-field)")
                out[t.id] = value
            return out
        keys = sorted({problem_key(t) for t, _ in traces},
                      key=lambda k: hashlib.sha256(k.encode()).hexdigest())
        dev = set(keys[: len(keys) // 2])
        return {t.id: "dev" if problem_key(t) in dev else "test" for t, _ in traces}

    def write(self, split: str, path: Path) -> Path:
        """The split's records as a traces file the bench scores (``read`` first)."""
        from cotcredit.store import io

        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.records[split])
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            io.write_atomic(path, text)
        return path


def problem_key(trace: Trace) -> str:
    """The problem a trace answers: its ``problem_id`` field, else its prompt."""
    pid = trace.extra.get("problem_id")
    return f"id:{pid}" if pid is not None else f"prompt:{trace.prompt}"


def bench_record(trace: Trace, split: str) -> dict[str, Any]:
    """A trace as the bench's labelled record: what the methods read (prompt or chat turns,
    response or steps, answer, solution, solutions) and the labels the metrics read."""
    from cotcredit.data.trace import trace_outcome

    correct = trace_outcome(trace) >= 0.5
    error = -1 if trace.error_char is None else trace.error_char
    departure = first_departure(trace.response, trace.solution) if trace.solution else -1
    record: dict[str, Any] = {"id": trace.id,
                              "problem_id": str(trace.extra.get("problem_id",
                                                                _digest(trace.prompt)))}
    if trace.messages is not None:
        record["messages"] = [*trace.messages, {"role": "assistant", "content": trace.response}]
    else:
        record["prompt"] = trace.prompt
        if trace.steps is not None:
            record["steps"] = [trace.response[a:b].removesuffix(STEP_SEPARATOR)
                               if k < len(trace.steps) - 1 else trace.response[a:b]
                               for k, (a, b) in enumerate(trace.steps)]
        else:
            record["response"] = trace.response
    solutions = trace.extra.get("solutions")
    record |= {"answer": trace.answer, "solution": trace.solution,
               **({"solutions": solutions} if solutions else {}),
               "correct": correct, "outcome": float(correct),
               "error_char": error if trace.error_char is not None else None,
               "departure_char": departure,
               "valid_departure": bool(correct and error < 0 and trace.error_char is not None
                                       and departure >= 0),
               "split": split}
    return record


def _digest(text: str) -> str:
    return "p-" + hashlib.sha256(text.encode()).hexdigest()[:12]
