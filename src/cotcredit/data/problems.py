"""Problem sets: a prompt and a reference answer per record, optionally a reference solution
and an id, read from any input the analysis commands read, with the same field aliases and
line-numbered errors as traces (default id: the line number). `cotcredit generate` samples traces
from them; `cotcredit train` trains on them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cotcredit.data.readers import open_records
from cotcredit.data.trace import FieldNames, FieldOptions, TraceError, format_names
from cotcredit.data.traces import parse_trace
from cotcredit.errors import UserError
from cotcredit.options import option

_RESPONSE_KEY = "\x00cotcredit-response"  # placeholder response field: problems have none


@dataclass
class ProblemInputOptions(FieldOptions):
    """Which problems are read and how bad lines are treated."""

    on_error: str = option(
        "raise", choices=("raise", "skip"),
        help="raise: stop at the first bad problem; skip: skip it, report it, go on.",
    )
    max_problems: int | None = option(None, help="Sample at most this many problems.")


@dataclass(frozen=True)
class Problem:
    """One problem: prompt, reference answer, optional reference solution."""

    id: str
    prompt: str
    answer: str
    solution: str | None = None
    source: str = "<memory>"
    line: int = 0
    extra: dict = field(default_factory=dict, compare=False, repr=False)
    notes: tuple[str, ...] = field(default=(), compare=False, repr=False)  # how it was read


def parse_problem(obj: object, src: str, line: int, names: FieldNames = FieldNames()) -> Problem:
    """A `Problem` from one decoded JSON value, validated exactly like a trace (minus the
    response), or a `TraceError`."""
    if isinstance(obj, dict):
        obj = {**obj, _RESPONSE_KEY: "."}
    t = parse_trace(obj, src, line, names.override(response=_RESPONSE_KEY))
    return Problem(t.id, t.prompt, t.answer, t.solution, src, line, t.extra, t.notes)


def read_problems(path: str | Path, names: FieldNames = FieldNames(), on_error: str = "raise",
                  max_problems: int | None = None, *, split: str | None = None,
                  subset: str | None = None, notes: list[str] | None = None,
                  ) -> tuple[list[Problem], list[str]]:
    """Problems of an input (any form `readers.open_records` reads: JSONL, JSON, Parquet, a
    `datasets` folder or id with `split`/`subset`) and the messages of records skipped with
    on_error="skip". How the input was read (e.g. answers taken from `#### N`) is appended to
    `notes`."""
    records = open_records(path, split=split, subset=subset)
    src = records.name
    problems: list[Problem] = []
    skipped: list[str] = []
    seen: dict[str, int] = {}
    for n, obj, err in records:
        try:
            if err:
                raise TraceError(src, n, err)
            p = parse_problem(obj, src, n, names)
            if p.id in seen:
                raise TraceError(src, n, f"duplicate id '{p.id}' (first on line {seen[p.id]})")
            seen[p.id] = n
        except TraceError as e:
            if on_error != "skip":
                raise
            skipped.append(str(e))
            continue
        problems.append(p)
        if notes is not None:
            notes.extend(x for x in p.notes if x not in notes)
        if max_problems is not None and len(problems) >= max_problems:
            break
    if not problems and not skipped:
        raise UserError(f"{src}: no problems (the input is empty)")
    return problems, skipped


def load_problems(path: str | Path, data_format: str | None = None, split: str | None = None
                  ) -> list[Problem]:
    """The problems of an input (`read_problems` with the field names of a `--format` preset,
    e.g. "gsm8k"; `split` of a dataset); the first bad record is a `TraceError`."""
    problems, _ = read_problems(path, format_names(data_format), split=split)
    return problems
