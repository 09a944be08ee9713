"""Traces: the `Trace` record, JSONL reading with field aliases, and the reasoning/answer split.

A trace line holds a prompt, the model's response, the reference answer and optionally a
reference solution and an outcome. Every user mistake in a file becomes a `TraceError` naming
file, line and field; `read_traces(..., on_error="skip")` collects them instead of stopping.
`iter_traces` reads the same way as a stream, one line at a time, for files of any size.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cotcredit.errors import UserError
from cotcredit.options import option

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# Lines that state the final answer; the reasoning ends where the last run of them starts.
_FINAL_LINE = re.compile(
    r"(\\boxed\s*\{|\\fbox\s*\{|final answer|the answer is|^\W*answer\s*:)", re.IGNORECASE
)


@dataclass(frozen=True)
class FieldNames:
    """Which JSON keys hold each part of a trace; the first key present wins."""

    prompt: tuple[str, ...] = ("prompt", "question", "problem")
    response: tuple[str, ...] = ("response", "completion", "generation", "output")
    answer: tuple[str, ...] = ("answer", "reference_answer", "gt_answer")
    solution: tuple[str, ...] = ("solution", "reference_solution")
    outcome: tuple[str, ...] = ("correct", "reward")
    id: tuple[str, ...] = ("id",)

    def override(self, **names: str | None) -> FieldNames:
        """Return a copy where each given field is read from the one named key only."""
        updates = {k: (v,) for k, v in names.items() if v}
        return FieldNames(**{**self.__dict__, **updates})


@dataclass
class FieldOptions:
    """Which JSON keys hold each part of a trace (or problem)."""

    prompt_field: str | None = option(None, help="JSON key of the prompt.")
    response_field: str | None = option(None, help="JSON key of the response.")
    answer_field: str | None = option(None, help="JSON key of the reference answer.")
    solution_field: str | None = option(None, help="JSON key of the reference solution.")
    outcome_field: str | None = option(None, help="JSON key of the outcome (bool or number).")
    id_field: str | None = option(None, help="JSON key of the trace id.")
    # The keys tried for each part (Python API); a *_field option names the one key to read.
    fields: FieldNames = field(default_factory=FieldNames)

    def names(self) -> FieldNames:
        """The JSON keys read for each part of a trace."""
        return self.fields.override(
            prompt=self.prompt_field, response=self.response_field, answer=self.answer_field,
            solution=self.solution_field, outcome=self.outcome_field, id=self.id_field,
        )


@dataclass(frozen=True)
class Trace:
    """One reasoning trace. `line` is the 1-based line in `source` (0 for traces built in code)."""

    id: str
    prompt: str
    response: str
    answer: str
    solution: str | None = None
    outcome: float | None = None
    source: str = "<memory>"
    line: int = 0
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def where(self) -> str:
        """`file:line` for messages."""
        return f"{self.source}:{self.line}" if self.line else f"trace {self.id}"

    @property
    def reasoning_end(self) -> int:
        """Character offset in `response` where the reasoning ends (see `reasoning_end`)."""
        return reasoning_end(self.response)

    @property
    def reasoning(self) -> str:
        return self.response[: self.reasoning_end]


class TraceError(UserError):
    """A bad trace line; str() is the one-line message `file:line: reason`."""

    def __init__(self, source: str, line: int, reason: str):
        reason = one_line(reason)
        super().__init__(f"{source}:{line}: {reason}")
        self.source, self.line, self.reason = source, line, reason


# Every character str.splitlines() breaks a line at.
_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """`text` safe to print as one line: line breaks and lone surrogates escaped."""
    text = _LINE_BREAK.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _bad_text(value: str) -> str | None:
    """Why a JSON string cannot be used as text (NUL, lone surrogate), or None."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"contains a lone surrogate (\\u{ord(value[e.start]):04x}) at character {e.start}"
    return None


def decode_line(text: str, src: str, line: int) -> object:
    """json.loads one line; every failure becomes a `TraceError` naming file and line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(src, line, f"invalid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise TraceError(src, line, "invalid JSON (nested too deeply)") from None
    except ValueError as e:  # e.g. an integer literal over 4300 digits
        raise TraceError(src, line, f"invalid JSON ({str(e).split(';')[0]})") from None


def reasoning_end(response: str) -> int:
    """Where the reasoning part of a response ends.

    Up to `</think>` when the response has one; otherwise up to the start of the final-answer
    statement (the last lines mentioning `\\boxed{`, "final answer", "the answer is" or
    "Answer:"); otherwise the whole response.
    """
    close = response.find(THINK_CLOSE)
    if close >= 0:
        return close
    lines = response.splitlines(keepends=True)
    starts, pos = [], 0
    for ln in lines:
        starts.append(pos)
        pos += len(ln)
    i = len(lines) - 1
    while i >= 0 and not lines[i].strip():
        i -= 1
    if i < 0 or not _FINAL_LINE.search(lines[i]):
        return len(response)
    # Walk up over a contiguous block of answer lines (blank lines allowed between them).
    end = i
    j = i - 1
    while j >= 0:
        if not lines[j].strip():
            j -= 1
            continue
        if _FINAL_LINE.search(lines[j]):
            end = j
            j -= 1
            continue
        break
    # The answer is often stated at the end of the last reasoning line itself
    # ("... so 3 + 4 = 7. The final answer is \boxed{7}."): cut inside that line.
    line = lines[end]
    m = re.search(r"(the final answer|final answer|the answer is|\\boxed)", line, re.IGNORECASE)
    cut = starts[end]
    if m and line[: m.start()].strip():
        cut = starts[end] + m.start()
    return cut


def _pick(obj: dict, names: tuple[str, ...]) -> tuple[str | None, object]:
    for n in names:
        if n in obj:
            return n, obj[n]
    return None, None


def _parse_outcome(value: object, key: str, src: str, line: int) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond float range
            number = math.inf
        if math.isfinite(number):
            return number
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return float(value.strip().lower() == "true")
    raise TraceError(
        src, line, f"field '{key}' must be a boolean or a finite number, got {type(value).__name__}"
    )


def parse_trace(obj: object, src: str, line: int, names: FieldNames = FieldNames()) -> Trace:
    """Build a `Trace` from one decoded JSON value, or raise `TraceError`."""
    if not isinstance(obj, dict):
        raise TraceError(src, line, f"expected a JSON object, got {type(obj).__name__}")

    def text(kind: str, required: bool) -> str | None:
        aliases = getattr(names, kind)
        key, value = _pick(obj, aliases)
        label = {"answer": "reference answer", "solution": "reference solution"}.get(kind, kind)
        if key is None or value is None:
            if required:
                raise TraceError(src, line, f"missing {label} (tried {', '.join(aliases)})")
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and kind == "answer":
            if isinstance(value, float) and not math.isfinite(value):
                raise TraceError(src, line, f"field '{key}' must be a string, got {value}")
            value = str(value)
        if not isinstance(value, str):
            raise TraceError(
                src, line, f"field '{key}' must be a string, got {type(value).__name__}"
            )
        bad = _bad_text(value)
        if bad:
            raise TraceError(src, line, f"field '{key}' {bad}")
        if required and not value.strip():
            raise TraceError(src, line, f"field '{key}' is empty")
        return value if value.strip() else None

    prompt = text("prompt", True)
    response = text("response", True)
    answer = text("answer", True)
    solution = text("solution", False)
    okey, oval = _pick(obj, names.outcome)
    outcome = _parse_outcome(oval, okey or "", src, line)
    ikey, ival = _pick(obj, names.id)
    if ival is None:
        tid = str(line)
    elif isinstance(ival, (str, int)) and not isinstance(ival, bool) and str(ival).strip():
        tid = str(ival)
        bad = _bad_text(tid)
        if bad:
            raise TraceError(src, line, f"field '{ikey}' {bad}")
    else:
        raise TraceError(src, line, f"field '{ikey}' must be a non-empty string or integer")
    used = {k for group in names.__dict__.values() for k in group}
    extra = {k: v for k, v in obj.items() if k not in used}
    trace = Trace(tid, prompt, response, answer, solution, outcome, src, line, extra)
    body = trace.reasoning.strip()
    if body.startswith(THINK_OPEN):  # an empty thinking block ("<think>\n\n</think>") is none
        body = body[len(THINK_OPEN) :].strip()
    if not body:
        raise TraceError(src, line, "response has no reasoning before its final answer")
    return trace


@dataclass
class ReadResult:
    """Traces read from a file, and the lines skipped with `on_error="skip"`."""

    traces: list[Trace]
    skipped: list[TraceError]


def check_jsonl_file(path: str | Path) -> Path:
    """`path` as a Path if it is a readable file, else a one-line UserError."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a JSONL file")
    try:
        open(path, "rb").close()
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror or e})") from None
    return path


def iter_lines(path: Path) -> Iterator[tuple[int, str | None, str | None]]:
    """Yield (line number, text, error) for each non-blank line; bad UTF-8 gives an error."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                s = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield n, None, f"not valid UTF-8 (byte {e.start})"
                continue
            if s.startswith("\ufeff") and n == 1:
                s = s[1:]
            if s.strip():
                yield n, s, None


def iter_traces(
    path: str | Path,
    names: FieldNames = FieldNames(),
    on_error: str = "raise",
) -> Iterator[Trace | TraceError]:
    """Stream a JSONL file of traces, one line at a time.

    Yields each good `Trace`; a bad line raises its `TraceError` (on_error="raise") or is
    yielded as one (on_error="skip"), so a caller keeps the file's order and reads no line
    twice. Duplicate ids are an error (results are keyed by trace id). The path is checked when
    this is called; an empty file (no line at all) is a UserError when the stream ends.
    """
    path = check_jsonl_file(path)
    return _iter_traces(path, names, on_error)


def _iter_traces(path: Path, names: FieldNames, on_error: str) -> Iterator[Trace | TraceError]:
    src = str(path)
    seen: dict[str, int] = {}
    any_line = False
    for n, line, err in iter_lines(path):
        any_line = True
        try:
            if err:
                raise TraceError(src, n, err)
            trace = parse_trace(decode_line(line, src, n), src, n, names)
            if trace.id in seen:
                raise TraceError(
                    src, n, f"duplicate id '{trace.id}' (first on line {seen[trace.id]})"
                )
            seen[trace.id] = n
        except TraceError as e:
            if on_error != "skip":
                raise
            yield e
            continue
        yield trace
    if not any_line:
        raise UserError(f"{src}: no traces (the file is empty)")


def read_traces(
    path: str | Path,
    names: FieldNames = FieldNames(),
    on_error: str = "raise",
    max_traces: int | None = None,
) -> ReadResult:
    """Read a JSONL file of traces into memory (`iter_traces` streams it).

    on_error="raise" stops at the first bad line with a `TraceError`; "skip" collects the errors
    and keeps going. Duplicate ids are an error (results are keyed by trace id).
    """
    traces: list[Trace] = []
    skipped: list[TraceError] = []
    for item in iter_traces(path, names, on_error):
        if isinstance(item, TraceError):
            skipped.append(item)
            continue
        traces.append(item)
        if max_traces is not None and len(traces) >= max_traces:
            break
    return ReadResult(traces, skipped)
