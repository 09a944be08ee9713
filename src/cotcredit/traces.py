"""Traces: the `Trace` record, reading traces with field aliases and shapes, and the
reasoning/answer split.

A trace record holds a prompt, the model's response, the reference answer and optionally a
reference solution and an outcome; or the shapes public data comes in: chat turns, a list of
generations with a list of outcomes, pre-split steps with the first wrong step, nested fields
(see `parse_record`, and `FORMATS` for the presets of common datasets). Records come from any
input `readers.open_records` reads (JSONL, gzip, JSON, Parquet, `datasets` folders and ids).
Every user mistake becomes a `TraceError` naming file (or dataset), line (or row) and field;
`read_traces(..., on_error="skip")` collects them instead of stopping. `iter_traces` reads the
same way as a stream, for inputs of any size.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cotcredit.errors import UserError
from cotcredit.options import option
from cotcredit.readers import Records, decode_json, open_records

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# Lines that state the final answer; the reasoning ends where the last run of them starts.
_FINAL_LINE = re.compile(
    r"(\\boxed\s*\{|\\fbox\s*\{|final answer|the answer is|^\W*answer\s*:)", re.IGNORECASE
)


STEP_SEPARATOR = "\n\n"  # joins pre-split `steps` into the response (as ProcessBench renders them)


@dataclass(frozen=True)
class FieldNames:
    """Which keys hold each part of a trace; the first key present wins. A key may be a dotted
    path into nested records (`question.problem`; a number indexes a list, `*` maps over one)."""

    prompt: tuple[str, ...] = ("prompt", "question", "problem")
    response: tuple[str, ...] = ("response", "completion", "generation", "output", "generations")
    answer: tuple[str, ...] = ("answer", "reference_answer", "gt_answer")
    solution: tuple[str, ...] = ("solution", "reference_solution")
    outcome: tuple[str, ...] = ("correct", "reward", "correctness_math_verify")
    id: tuple[str, ...] = ("id",)
    # Chat turns (role/content or from/value): the last assistant turn is the response.
    messages: tuple[str, ...] = ("messages", "conversations")
    # Pre-split steps (a list of texts): the response is them joined, the segments are them.
    steps: tuple[str, ...] = ("steps",)
    # With steps: the first wrong step (-1: none), or per-step ratings (the first -1 is it).
    label: tuple[str, ...] = ("label",)
    # The character in the response where the first error starts (-1: none).
    error_char: tuple[str, ...] = ("error_char",)
    # Without an answer field: the fields whose last \boxed{} or `#### N` is the answer.
    answer_from: tuple[str, ...] = ("solution", "reference_solution")

    def override(self, **names: str | None) -> FieldNames:
        """Return a copy where each given field is read from the one named key only."""
        updates = {k: (v,) for k, v in names.items() if v}
        return FieldNames(**{**self.__dict__, **updates})


# The field mappings of common public datasets (`--format`); see the README's table.
FORMATS: dict[str, dict[str, tuple[str, ...]]] = {
    # problem, steps, label (first wrong step, -1 none), final_answer_correct
    "processbench": {"prompt": ("problem",), "steps": ("steps",), "label": ("label",),
                     "outcome": ("final_answer_correct",), "id": ("id",)},
    # nested: question.{problem, ground_truth_answer, ground_truth_solution}, label.steps[*]
    "prm800k": {"prompt": ("question.problem",), "answer": ("question.ground_truth_answer",),
                "solution": ("question.ground_truth_solution",), "response": (),
                "steps": ("label.steps.*.completions.0.text",),
                "label": ("label.steps.*.completions.0.rating",), "outcome": (),
                "messages": (), "answer_from": ()},
    # problem, answer, solution, generations (list), correctness_math_verify (list), uuid
    "openr1": {"prompt": ("problem",), "response": ("generations",), "answer": ("answer",),
               "solution": ("solution",), "outcome": ("correctness_math_verify",),
               "id": ("uuid",), "messages": ()},
    # problem, solution (ends in \boxed{}), messages; the solution is the trace read
    "numina": {"prompt": ("problem",), "response": ("response", "solution"), "answer": (),
               "solution": (), "answer_from": ("solution",), "messages": ()},
    # question, answer (a worked solution ending "#### N"): N is the answer, the rest U*
    "gsm8k": {"prompt": ("question",), "answer": ("answer",), "solution": ("answer",),
              "answer_from": ()},
    # problem, solution (ends in \boxed{}), level, type
    "math": {"prompt": ("problem",), "answer": (), "solution": ("solution",),
             "answer_from": ("solution",)},
}


def format_names(fmt: str | None) -> FieldNames:
    """The `FieldNames` of a `--format` preset (None: the default aliases)."""
    if not fmt:
        return FieldNames()
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown format '{fmt}' (use one of {', '.join(FORMATS)})")
    return FieldNames(**{**FieldNames().__dict__, **FORMATS[fmt]})


@dataclass
class FieldOptions:
    """Which keys hold each part of a trace (or problem), and which split of a dataset."""

    preset: str | None = option(
        None, flag="--format", choices=tuple(FORMATS), help="Field mapping of a public dataset: " + ", ".join(FORMATS) + ".",
    )
    prompt_field: str | None = option(None, help="Key (or dotted path) of the prompt.")
    response_field: str | None = option(
        None, help="Key of the response (a text, or a list: one trace per generation)."
    )
    answer_field: str | None = option(None, help="Key of the reference answer.")
    solution_field: str | None = option(None, help="Key of the reference solution.")
    outcome_field: str | None = option(
        None, help="Key of the outcome (bool or number; a list with a list of generations)."
    )
    id_field: str | None = option(None, help="Key of the trace id.")
    messages_field: str | None = option(
        None, help="Key of chat turns (role/content or from/value); last assistant turn = response."
    )
    steps_field: str | None = option(None, help="Key of pre-split steps (a list of texts).")
    label_field: str | None = option(None, help="Key of the first wrong step (-1: none).")
    error_field: str | None = option(
        None, help="Key of the first error's character offset in the response (-1: none)."
    )
    split: str | None = option(None, help="Split of a dataset folder or Hugging Face dataset id.")
    subset: str | None = option(None, help="Configuration (subset) of a Hugging Face dataset id.")
    # The keys tried for each part (Python API); a *_field option names the one key to read.
    fields: FieldNames | None = field(default=None)

    def names(self) -> FieldNames:
        """The keys read for each part of a trace."""
        base = self.fields if self.fields is not None else format_names(self.preset)
        return base.override(
            prompt=self.prompt_field, response=self.response_field, answer=self.answer_field,
            solution=self.solution_field, outcome=self.outcome_field, id=self.id_field,
            messages=self.messages_field, steps=self.steps_field, label=self.label_field,
            error_char=self.error_field,
        )


@dataclass(frozen=True)
class Trace:
    """One reasoning trace. `line` is the 1-based line (or row) in `source` (0 for traces built
    in code).

    `answer` is None only where no method needs it (`segment`). `steps`: the character spans of
    pre-split steps in `response` (they become the segments). `error_char`: where the first
    error starts in `response` (-1: no error; None: unknown). `messages`: the prompt's chat turns
    when it has more than one user turn (rendered with the model's chat template; `prompt` is
    their plain text). `notes`: how the input was read, said once per run.
    """

    id: str
    prompt: str
    response: str
    answer: str | None
    solution: str | None = None
    outcome: float | None = None
    source: str = "<memory>"
    line: int = 0
    extra: dict = field(default_factory=dict, compare=False, repr=False)
    steps: tuple[tuple[int, int], ...] | None = None
    error_char: int | None = None
    messages: tuple[dict, ...] | None = field(default=None, compare=False, repr=False)
    notes: tuple[str, ...] = field(default=(), compare=False, repr=False)
    shape: str = field(default="response", compare=False, repr=False)

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

    @property
    def error_step(self) -> int | None:
        """The step holding `error_char` (-1: no error; None: unknown or no steps)."""
        if self.error_char is None or self.steps is None:
            return None
        if self.error_char < 0:
            return -1
        return next((k for k, (a, b) in enumerate(self.steps) if a <= self.error_char < b),
                    len(self.steps) - 1)


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
    value, err = decode_json(text)
    if err:
        raise TraceError(src, line, err)
    return value


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


_MISSING = object()


def get_path(obj: object, path: str) -> object:
    """The value at `path` in a nested record (`_MISSING` if absent): a key, or a dotted path
    where a number indexes a list and `*` maps the rest of the path over a list's items. A key
    holding a literal dot is found first."""
    if isinstance(obj, dict) and path in obj:
        return obj[path]
    value: object = obj
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part == "*":
            if not isinstance(value, list):
                return _MISSING
            rest = ".".join(parts[i + 1 :])
            items = [get_path(x, rest) if rest else x for x in value]
            return _MISSING if any(x is _MISSING for x in items) else items
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and (
            -len(value) <= int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _pick(obj: dict, names: tuple[str, ...]) -> tuple[str | None, object]:
    for n in names:
        value = get_path(obj, n)
        if value is not _MISSING:
            return n, value
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


_HASHES = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def final_answer(text: str) -> tuple[str, str] | None:
    """(answer, how) from a worked solution: the text after its last `####` (GSM8K), else the
    content of its last `\\boxed{}`; None when it has neither."""
    from cotcredit.grading import last_boxed

    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        if tail:
            return tail.replace(",", "") if re.fullmatch(r"-?[\d,]+(\.\d+)?", tail) else tail, "####"
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
    return frozenset(k.split(".")[0] for group in names.__dict__.values() for k in group)


def parse_record(
    obj: object, src: str, line: int, names: FieldNames = FieldNames(), *,
    require_answer: bool = True,
) -> list[Trace]:
    """The traces of one input record (one, or one per generation of a list), or `TraceError`.

    The response is the first of: a response field (a text, or a list: one trace per
    generation, ids `ID/g`, a list-valued outcome giving each its own), chat turns (the last
    assistant turn; the turns before it are the prompt), pre-split steps (joined with
    `STEP_SEPARATOR`; they are the segments, and a step `label` gives `error_char`).
    """
    if not isinstance(obj, dict):
        raise TraceError(src, line, f"expected a JSON object, got {type(obj).__name__}")
    notes: list[str] = []

    def text(kind: str, required: bool, value=_MISSING, key=None) -> str | None:
        aliases = getattr(names, kind)
        if value is _MISSING:
            key, value = _pick(obj, aliases)
        label = {"answer": "reference answer", "solution": "reference solution"}.get(kind, kind)
        if key is None or value is None:
            if required:
                tried = ", ".join(aliases) or "no field"
                raise TraceError(src, line, f"missing {label} (tried {tried})")
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

    # The response, and with it the shape of the record.
    rkey, rval = _pick(obj, names.response)
    prompt_turns: list[dict] | None = None
    steps: tuple[tuple[int, int], ...] | None = None
    step_texts: list[str] | None = None
    if rkey is not None and isinstance(rval, list):
        responses = _texts(rval, rkey, src, line, "generations")
        listed, shape = True, f"a list of generations in '{rkey}'"
    elif rkey is not None:
        responses, listed, shape = [text("response", True, rval, rkey)], False, f"text in '{rkey}'"
    else:
        mkey, mval = _pick(obj, names.messages)
        skey, sval = _pick(obj, names.steps)
        if mkey is not None:
            turns = _turns(mval, mkey, src, line)
            last = max((i for i, t in enumerate(turns) if t["role"] in _ASSISTANT), default=None)
            if last is None:
                raise TraceError(src, line, f"field '{mkey}' has no assistant turn")
            if not turns[last]["content"].strip():
                raise TraceError(src, line, f"field '{mkey}' turn {last} (the response) is empty")
            responses, listed, shape = [turns[last]["content"]], False, f"chat turns in '{mkey}'"
            prompt_turns = turns[:last] or None
        elif skey is not None:
            step_texts = _texts(sval, skey, src, line, "steps")
            response, spans, pos = "", [], 0
            for k, st in enumerate(step_texts):
                sep = STEP_SEPARATOR if k < len(step_texts) - 1 else ""
                spans.append((pos, pos + len(st) + len(sep)))
                pos += len(st) + len(sep)
                response += st + sep
            steps = tuple(spans)
            responses, listed, shape = [response], False, f"steps in '{skey}'"
        else:
            tried = ", ".join(names.response + names.messages + names.steps)
            raise TraceError(src, line, f"missing response (tried {tried})")

    # The prompt: the chat turns before the response, else the prompt field.
    messages = None
    if prompt_turns:
        user = [t for t in prompt_turns if t["role"] == "user"]
        if len(prompt_turns) == 1 and user:
            prompt = user[0]["content"]
        else:  # a system turn or several turns: the chat template renders them
            prompt = "\n\n".join(t["content"] for t in prompt_turns)
            messages = tuple(prompt_turns)
        if not prompt.strip():
            raise TraceError(src, line, "the chat turns before the response are empty")
    else:
        prompt = text("prompt", True)

    # The reference answer: the field (reduced when it holds a worked solution), else taken
    # from a reference solution's final answer.
    akey, aval = _pick(obj, names.answer)
    answer = text("answer", False, aval, akey)
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
        for key in names.answer_from:
            value = get_path(obj, key)
            if isinstance(value, str) and (found := final_answer(value)):
                answer = found[0]
                notes.append(f"reference answers: no answer field; taken from the last "
                             f"{found[1]} of field '{key}'")
                break
    if answer is None and require_answer:
        text("answer", True)  # raises the "missing reference answer" error
    solution = text("solution", False)

    n = len(responses)
    okey, oval = _pick(obj, names.outcome)
    outcomes = [_parse_outcome(v, okey or "", src, line)
                for v in _per_generation(oval, okey, n, listed, src, line)]
    ekey, evals = _pick(obj, names.error_char)
    errors = _per_generation(evals, ekey, n, listed, src, line)
    first_wrong = None
    if steps is not None:
        lkey, lval = _pick(obj, names.label)
        first_wrong = _first_wrong(lval, lkey or "", len(steps), src, line)

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
    used = _used_keys(names)
    extra = {k: v for k, v in obj.items() if k not in used}

    traces = []
    for g, response in enumerate(responses):
        error_char = _error_char(errors[g], ekey or "", response, src, line)
        if error_char is None and first_wrong is not None:
            error_char = -1 if first_wrong < 0 else steps[first_wrong][0]
        trace = Trace(
            f"{tid}/{g}" if listed else tid, prompt, response, answer, solution, outcomes[g],
            src, line, extra, steps, error_char, messages, tuple(notes), shape,
        )
        body = trace.reasoning.strip()
        if body.startswith(THINK_OPEN):  # an empty thinking block ("<think>\n\n</think>") is none
            body = body[len(THINK_OPEN) :].strip()
        if not body:
            which = f" (generation {g})" if listed else ""
            raise TraceError(src, line, f"response{which} has no reasoning before its final answer")
        traces.append(trace)
    return traces


def parse_trace(obj: object, src: str, line: int, names: FieldNames = FieldNames(), *,
                require_answer: bool = True) -> Trace:
    """Build one `Trace` from one decoded record, or raise `TraceError` (a record holding a
    list of generations gives its first; `parse_record` gives them all)."""
    return parse_record(obj, src, line, names, require_answer=require_answer)[0]


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


class SeenIds:
    """The ids read so far and the line (or row) of each, in 12 bytes per id: a sorted array of
    64-bit hashes with their lines, plus a dict of the newest, merged in every 65,536. A stream
    of millions of traces so holds no id strings (two distinct ids sharing a 64-bit hash in one
    input, about 1 in 10^7 for a million ids, would be reported as a duplicate)."""

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
    """Stream the traces of an input (any form `readers.open_records` reads), record by record.

    Yields each good `Trace` (several for a record with a list of generations); a bad record
    raises its `TraceError` (on_error="raise") or is yielded as one (on_error="skip"), so a
    caller keeps the input's order and reads no record twice. Duplicate ids, and records of
    another shape than the first (chat turns in one, a response text in another), are errors.
    The input is opened when this is called; an empty one is a UserError when the stream ends.
    `require_answer=False` lets traces without a reference answer through (segmenting needs
    none).
    """
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
    """Read an input's traces into memory (`iter_traces` streams it; `reading`: its keyword
    arguments split, subset, require_answer).

    on_error="raise" stops at the first bad record with a `TraceError`; "skip" collects the
    errors and keeps going. Duplicate ids are an error (results are keyed by trace id).
    """
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
