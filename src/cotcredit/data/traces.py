"""Reading traces: one input record -> its traces (`parse_record`), whatever shape it comes in,
and every record of an input, streamed (`iter_traces`) or into memory (`read_traces`), with
duplicate ids and mixed shapes refused. Every mistake is a `TraceError` naming the source, the
line and the field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cotcredit.data.grading import last_boxed
from cotcredit.data.readers import Records, open_records
from cotcredit.data.trace import MISSING, THINK_OPEN, FieldNames, Trace, TraceError, get_path, pick
from cotcredit.errors import UserError

# ---- one record ------------------------------------------------------------------------------
STEP_SEPARATOR = "\n\n"  # joins pre-split `steps` into the response (as ProcessBench renders them)


def _bad_text(value: str) -> str | None:
    """Why a JSON string cannot be used as text (NUL, lone surrogate), or None."""
    if "\x00" in value:
        return "contains a NUL character (\\u0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"contains a lone surrogate (\\u{ord(value[e.start]):04x}) at character {e.start}"
    return None



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



def final_answer(text: str) -> tuple[str, str] | None:
    """(answer, how) from a worked solution: the text after its last `####` (GSM8K), else the
    content of its last `\\boxed{}`; None when it has neither."""
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        if tail:
            number = re.fullmatch(r"-?[\d,]+(\.\d+)?", tail)
            return (tail.replace(",", "") if number else tail), "####"
    boxed = last_boxed(text)
    if boxed:
        return boxed, "\\boxed{}"
    return None



def _looks_worked(text: str) -> bool:
    """An answer field holding a worked solution rather than a final answer."""
    return "####" in text or sum(1 for ln in text.splitlines() if ln.strip()) > 1


_ASSISTANT = ("assistant", "gpt", "model", "bot", "chatgpt")
_ROLE = {"human": "user", "gpt": "assistant", "model": "assistant", "bot": "assistant",
         "chatgpt": "assistant"}


def _turns(value: object, key: str, src: str, line: int) -> list[dict]:
    """Chat turns as [{"role", "content"}], from role/content or from/value dicts."""
    if not isinstance(value, list) or not value:
        raise TraceError(src, line, f"field '{key}' must be a non-empty list of chat turns")
    turns = []
    for i, t in enumerate(value):
        if not isinstance(t, dict):
            raise TraceError(src, line, f"field '{key}' turn {i} must be an object, "
                             f"got {type(t).__name__}")
        role = t.get("role", t.get("from"))
        content = t.get("content", t.get("value"))
        if not isinstance(role, str) or not isinstance(content, str):
            raise TraceError(src, line, f"field '{key}' turn {i} needs string role/content "
                             "(or from/value)")
        bad = _bad_text(content)
        if bad:
            raise TraceError(src, line, f"field '{key}' turn {i} {bad}")
        turns.append({"role": _ROLE.get(role.lower(), role.lower()), "content": content})
    return turns


def _texts(value: object, key: str, src: str, line: int, what: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise TraceError(src, line, f"field '{key}' must be a non-empty list of {what}")
    for i, x in enumerate(value):
        if not isinstance(x, str):
            raise TraceError(src, line, f"field '{key}' item {i} must be a string, "
                             f"got {type(x).__name__}")
        bad = _bad_text(x)
        if bad:
            raise TraceError(src, line, f"field '{key}' item {i} {bad}")
    return value


def _first_wrong(value: object, key: str, n_steps: int, src: str, line: int) -> int | None:
    """The first wrong step of a `label`: an index (-1 none), or per-step ratings where the first
    negative rating is the first wrong step. None: no label."""
    if value is None:
        return None
    if isinstance(value, list):
        if len(value) != n_steps:
            raise TraceError(src, line, f"field '{key}' has {len(value)} ratings for "
                             f"{n_steps} steps")
        bad = next((i for i, r in enumerate(value)
                    if isinstance(r, (int, float)) and not isinstance(r, bool) and r < 0), None)
        return -1 if bad is None else bad
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(src, line, f"field '{key}' must be an integer step index (-1: none), "
                         f"got {type(value).__name__}")
    if not -1 <= value < n_steps:
        raise TraceError(src, line, f"field '{key}' is {value}, outside the {n_steps} steps "
                         f"(use 0..{n_steps - 1}, or -1 for no wrong step)")
    return value


def _error_char(value: object, key: str, response: str, src: str, line: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(src, line, f"field '{key}' must be an integer character offset "
                         f"(-1: no error), got {type(value).__name__}")
    if not -1 <= value < len(response):
        raise TraceError(src, line, f"field '{key}' is {value}, outside the response "
                         f"(0..{len(response) - 1}, or -1 for no error)")
    return value


def _per_generation(value: object, key: str | None, n: int, listed: bool, src: str,
                    line: int) -> list:
    """`value` for each of `n` responses: a list of n items when the responses are a list, else
    the one value for each."""
    if isinstance(value, list):
        if not listed:
            raise TraceError(src, line, f"field '{key}' is a list but the response is one text")
        if len(value) != n:
            raise TraceError(src, line, f"field '{key}' has {len(value)} items for "
                             f"{n} generations")
        return value
    return [value] * n


@functools.lru_cache(maxsize=64)
def _used_keys(names: FieldNames) -> frozenset[str]:
    """The top-level keys `names` reads (the rest of a record goes to `Trace.extra`)."""
    groups = (getattr(names, f.name) for f in dataclasses.fields(names))
    return frozenset(k.split(".")[0] for group in groups for k in group)


class _Record:
    """One input record being read: its fields by alias, and errors naming its place."""

    def __init__(self, obj: dict, names: FieldNames, src: str, line: int):
        self.obj, self.names, self.src, self.line = obj, names, src, line

    def pick(self, kind: str) -> tuple[str | None, object]:
        """(key, value) of the first alias of `kind` present (None, None: none)."""
        return pick(self.obj, getattr(self.names, kind))

    def error(self, reason: str) -> TraceError:
        return TraceError(self.src, self.line, reason)

    def text(self, kind: str, required: bool, value: object = MISSING, key: str | None = None
             ) -> str | None:
        """The text of field `kind` (a number is text for an answer); None when absent or blank
        and not `required`."""
        aliases = getattr(self.names, kind)
        if value is MISSING:
            key, value = self.pick(kind)
        label = {"answer": "reference answer", "solution": "reference solution"}.get(kind, kind)
        if key is None or value is None:
            if required:
                raise self.error(f"missing {label} (tried {', '.join(aliases) or 'no field'})")
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and kind == "answer":
            if isinstance(value, float) and not math.isfinite(value):
                raise self.error(f"field '{key}' must be a string, got {value}")
            value = str(value)
        if not isinstance(value, str):
            raise self.error(f"field '{key}' must be a string, got {type(value).__name__}")
        bad = _bad_text(value)
        if bad:
            raise self.error(f"field '{key}' {bad}")
        if required and not value.strip():
            raise self.error(f"field '{key}' is empty")
        return value if value.strip() else None


@dataclass
class _Responses:
    """The response(s) of a record and the shape they came in."""

    texts: list[str]
    listed: bool  # a list of generations: one trace each
    shape: str  # "<kind> in '<field>'"
    prompt_turns: list[dict] | None = None  # chat turns before the response
    steps: tuple[tuple[int, int], ...] | None = None  # pre-split steps' character spans


def _responses(r: _Record) -> _Responses:
    """The first of: a response field (text or list of generations), chat turns (the last
    assistant turn), pre-split steps (joined with `STEP_SEPARATOR`)."""
    rkey, rval = r.pick("response")
    if rkey is not None and isinstance(rval, list):
        texts = _texts(rval, rkey, r.src, r.line, "generations")
        return _Responses(texts, True, f"a list of generations in '{rkey}'")
    if rkey is not None:
        return _Responses([r.text("response", True, rval, rkey)], False, f"text in '{rkey}'")
    mkey, mval = r.pick("messages")
    skey, sval = r.pick("steps")
    if mkey is not None:
        turns = _turns(mval, mkey, r.src, r.line)
        last = max((i for i, t in enumerate(turns) if t["role"] in _ASSISTANT), default=None)
        if last is None:
            raise r.error(f"field '{mkey}' has no assistant turn")
        if not turns[last]["content"].strip():
            raise r.error(f"field '{mkey}' turn {last} (the response) is empty")
        return _Responses([turns[last]["content"]], False, f"chat turns in '{mkey}'",
                          prompt_turns=turns[:last] or None)
    if skey is not None:
        step_texts = _texts(sval, skey, r.src, r.line, "steps")
        response, spans, pos = "", [], 0
        for k, st in enumerate(step_texts):
            sep = STEP_SEPARATOR if k < len(step_texts) - 1 else ""
            spans.append((pos, pos + len(st) + len(sep)))
            pos += len(st) + len(sep)
            response += st + sep
        return _Responses([response], False, f"steps in '{skey}'", steps=tuple(spans))
    tried = ", ".join(r.names.response + r.names.messages + r.names.steps)
    raise r.error(f"missing response (tried {tried})")


def _prompt(r: _Record, turns: list[dict] | None) -> tuple[str, tuple[dict, ...] | None]:
    """(prompt, messages): the chat turns before the response, else the prompt field;
    `messages` are kept when the turns are more than one user turn (the chat template renders
    them)."""
    if not turns:
        return r.text("prompt", True), None
    user = [t for t in turns if t["role"] == "user"]
    if len(turns) == 1 and user:
        prompt, messages = user[0]["content"], None
    else:  # a system turn or several turns: the chat template renders them
        prompt, messages = "\n\n".join(t["content"] for t in turns), tuple(turns)
    if not prompt.strip():
        raise r.error("the chat turns before the response are empty")
    return prompt, messages


def _reference_answer(r: _Record, require: bool, notes: list[str]) -> str | None:
    """Y*: the answer field (reduced when it holds a worked solution), else the final answer of
    a reference solution; how it was found goes to `notes`."""
    akey, aval = r.pick("answer")
    answer = r.text("answer", False, aval, akey)
    if answer is not None and _looks_worked(answer):
        found = final_answer(answer)
        if found is None:  # several lines but no final-answer marker: kept, and said
            notes.append(f"reference answers: field '{akey}' has several lines and no \\boxed{{}} "
                         "or #### final answer; used whole as Y*")
        else:
            answer = found[0]
            notes.append(f"reference answers: field '{akey}' holds a worked solution; its final "
                         f"answer (after its last {found[1]}) is used")
    if answer is None:
        for key in r.names.answer_from:
            value = get_path(r.obj, key)
            if isinstance(value, str) and (found := final_answer(value)):
                answer = found[0]
                notes.append(f"reference answers: no answer field; taken from the last "
                             f"{found[1]} of field '{key}'")
                break
    if answer is None and require:
        r.text("answer", True)  # raises the "missing reference answer" error
    return answer


def _trace_id(r: _Record) -> str:
    """The id field as text (default: the line number)."""
    ikey, ival = r.pick("id")
    if ival is None:
        return str(r.line)
    if isinstance(ival, (str, int)) and not isinstance(ival, bool) and str(ival).strip():
        bad = _bad_text(str(ival))
        if bad:
            raise r.error(f"field '{ikey}' {bad}")
        return str(ival)
    raise r.error(f"field '{ikey}' must be a non-empty string or integer")


def parse_record(
    obj: object, src: str, line: int, names: FieldNames = FieldNames(), *,
    require_answer: bool = True,
) -> list[Trace]:
    """The traces of one input record, or `TraceError`. The response is the first of: a
    response field (a text, or a list: one trace per generation, ids `ID/g`), chat turns (the
    last assistant turn; the turns before it are the prompt), pre-split steps (joined with
    `STEP_SEPARATOR`; they are the segments, and a step `label` gives `error_char`). The
    reference answer is its field (a worked solution reduced to its final answer) or the final
    answer of the reference solution."""
    if not isinstance(obj, dict):
        raise TraceError(src, line, f"expected a JSON object, got {type(obj).__name__}")
    r = _Record(obj, names, src, line)
    notes: list[str] = []
    res = _responses(r)
    prompt, messages = _prompt(r, res.prompt_turns)
    answer = _reference_answer(r, require_answer, notes)
    solution = r.text("solution", False)

    n = len(res.texts)
    okey, oval = r.pick("outcome")
    outcomes = [_parse_outcome(v, okey or "", src, line)
                for v in _per_generation(oval, okey, n, res.listed, src, line)]
    ekey, evals = r.pick("error_char")
    errors = _per_generation(evals, ekey, n, res.listed, src, line)
    first_wrong = None
    if res.steps is not None:
        lkey, lval = r.pick("label")
        first_wrong = _first_wrong(lval, lkey or "", len(res.steps), src, line)
    tid = _trace_id(r)
    used = _used_keys(names)
    extra = {k: v for k, v in obj.items() if k not in used}

    traces = []
    for g, response in enumerate(res.texts):
        error_char = _error_char(errors[g], ekey or "", response, src, line)
        if error_char is None and first_wrong is not None:
            error_char = -1 if first_wrong < 0 else res.steps[first_wrong][0]
        trace = Trace(
            f"{tid}/{g}" if res.listed else tid, prompt, response, answer, solution, outcomes[g],
            src, line, extra, res.steps, error_char, messages, tuple(notes), res.shape,
        )
        body = trace.reasoning.strip()
        if body.startswith(THINK_OPEN):  # an empty thinking block ("<think>\n\n</think>") is none
            body = body[len(THINK_OPEN) :].strip()
        if not body:
            which = f" (generation {g})" if res.listed else ""
            raise r.error(f"response{which} has no reasoning before its final answer")
        traces.append(trace)
    return traces


def parse_trace(obj: object, src: str, line: int, names: FieldNames = FieldNames(), *,
                require_answer: bool = True) -> Trace:
    """Build one `Trace` from one decoded record, or raise `TraceError` (a record holding a
    list of generations gives its first; `parse_record` gives them all)."""
    return parse_record(obj, src, line, names, require_answer=require_answer)[0]


# ---- a whole input ---------------------------------------------------------------------------
@dataclass
class ReadResult:
    """Traces read from a file, and the lines skipped with `on_error="skip"`."""

    traces: list[Trace]
    skipped: list[TraceError]



class SeenIds:
    """The ids read so far and the line of each, in 12 bytes per id (sorted 64-bit hashes, plus a
    dict of the newest merged in every 65,536), so millions of traces hold no id strings. A hash
    collision (about 1 in 10^7 for a million ids) would be reported as a duplicate."""

    MERGE = 1 << 16

    def __init__(self) -> None:
        self.keys = self.lines = None  # numpy arrays from the first merge (small inputs: none)
        self.new: dict[int, int] = {}

    def line_of(self, tid: str) -> int | None:
        """The line of `tid` if it was read before, else None."""
        h = hash(tid)
        if h in self.new:
            return self.new[h]
        if self.keys is None:
            return None
        i = int(self.keys.searchsorted(h))
        return int(self.lines[i]) if i < len(self.keys) and self.keys[i] == h else None

    def add(self, tid: str, line: int) -> None:
        """Record that `tid` was read on `line` (the first line of an id is kept)."""
        self.new.setdefault(hash(tid), line)
        if len(self.new) >= self.MERGE:
            import numpy as np

            if self.keys is None:
                self.keys, self.lines = np.empty(0, np.int64), np.empty(0, np.int32)
            keys = np.fromiter(self.new.keys(), np.int64, len(self.new))
            lines = np.fromiter(self.new.values(), np.int32, len(self.new))
            order = np.argsort(keys)
            keys, lines = keys[order], lines[order]
            at = np.searchsorted(self.keys, keys)  # one new array each, not a re-sort of all
            self.keys, self.lines = np.insert(self.keys, at, keys), np.insert(self.lines, at, lines)
            self.new = {}


def iter_traces(
    path: str | Path,
    names: FieldNames = FieldNames(),
    on_error: str = "raise",
    *,
    split: str | None = None,
    subset: str | None = None,
    require_answer: bool = True,
) -> Iterator[Trace | TraceError]:
    """Stream the traces of an input, record by record. A bad record raises its `TraceError`
    (on_error="raise") or is yielded as one ("skip"). Duplicate ids and a change of shape are
    errors; `require_answer=False` lets traces without a reference answer through."""
    records = open_records(path, split=split, subset=subset)
    return _iter_traces(records, names, on_error, require_answer)


def _iter_traces(
    records: Records, names: FieldNames, on_error: str, require_answer: bool
) -> Iterator[Trace | TraceError]:
    src = records.name
    seen = SeenIds()
    first_shape: tuple[str, int] | None = None
    any_line = False
    for n, obj, err in records:
        any_line = True
        try:
            if err:
                raise TraceError(src, n, err)
            traces = parse_record(obj, src, n, names, require_answer=require_answer)
            shape = traces[0].shape  # "<kind> in '<field>'": the kind must not change
            if first_shape is None:
                first_shape = (shape, n)
            elif shape.split(" in ")[0] != first_shape[0].split(" in ")[0]:
                raise TraceError(src, n, f"mixed shapes: this record has {shape}, record "
                                 f"{first_shape[1]} has {first_shape[0]} (one input holds one "
                                 "shape; split the file)")
            for t in traces:
                first = seen.line_of(t.id)
                if first is not None:
                    raise TraceError(src, n, f"duplicate id '{t.id}' (first on line {first})")
            for t in traces:
                seen.add(t.id, n)
        except TraceError as e:
            if on_error != "skip":
                raise
            yield e
            continue
        yield from traces
    if not any_line:
        raise UserError(f"{src}: no traces (the input is empty)")


def read_traces(
    path: str | Path,
    names: FieldNames = FieldNames(),
    on_error: str = "raise",
    max_traces: int | None = None,
    **reading,
) -> ReadResult:
    """Read an input's traces into memory (`reading`: `iter_traces`' keyword arguments);
    on_error="skip" collects bad records in `skipped` instead of stopping."""
    traces: list[Trace] = []
    skipped: list[TraceError] = []
    for item in iter_traces(path, names, on_error, **reading):
        if isinstance(item, TraceError):
            skipped.append(item)
            continue
        traces.append(item)
        if max_traces is not None and len(traces) >= max_traces:
            break
    return ReadResult(traces, skipped)
