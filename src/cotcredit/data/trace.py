"""The `Trace` record and everything about one: the one-line `TraceError` of a bad input
record, where a response's reasoning ends (`reasoning_end`: up to `</think>`, else up to the
final-answer statement), where it first departs from a reference solution (`first_departure`),
the problem it answers (`problem_key`), its outcome ζ (`trace_outcome`), and which keys of an
input record hold each of its fields (`FieldNames`, the `--format` presets `FORMATS`,
`FieldOptions`, `get_path` for a dotted path in a nested record)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from cotcredit.data.grading import grade_completion
from cotcredit.errors import UserError
from cotcredit.options import option

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

# Lines that state the final answer; the reasoning ends where the last run of them starts.
_FINAL_LINE = re.compile(
    r"(\\boxed\s*\{|\\fbox\s*\{|final answer|the answer is|^\W*answer\s*:)", re.IGNORECASE
)



@dataclass(frozen=True)
class Trace:
    """One reasoning trace. `line`: 1-based line (or row) in `source` (0: built in code).
    `answer` is None only where no method needs it (`segment`). `steps`: character spans of
    pre-split steps. `error_char`: where the first error starts (-1: none; None: unknown).
    `messages`: the prompt's chat turns when there are several. `notes`: said once per run.
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
        """The reasoning part of the response (up to `reasoning_end`)."""
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


def reasoning_end(response: str) -> int:
    """Where the reasoning of a response ends: at `</think>`, else at the final-answer statement
    (the last lines with `\\boxed{`, "final answer", "the answer is", "Answer:"), else its end.
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


def _reasoning_lines(text: str) -> tuple[list[tuple[int, str]], int]:
    """(start offset, whitespace-normalised text) of every non-blank line of `text`'s
    reasoning, and where that reasoning ends (`reasoning_end`)."""
    end = reasoning_end(text)
    out, pos = [], 0
    for line in text[:end].splitlines(keepends=True):
        norm = " ".join(line.split())
        if norm:
            out.append((pos, norm))
        pos += len(line)
    return out, end


def first_departure(response: str, solution: str) -> int:
    """Character offset in `response` where its reasoning first departs from `solution`'s; -1
    when it follows it throughout. Non-blank reasoning lines, whitespace-normalised, compared by
    index; a response that stops early departs at the end of its reasoning. Answer statements
    are not compared (credit is assigned inside the reasoning)."""
    (mine, end), (ref, _) = _reasoning_lines(response), _reasoning_lines(solution)
    for i, (start, text) in enumerate(mine):
        if i >= len(ref) or text != ref[i][1]:
            return start
    return -1 if len(mine) == len(ref) else end


#: The record field that groups responses to one problem (else the prompt does).
PROBLEM_FIELD = "problem_id"


def problem_key(trace: Trace) -> str:
    """What groups responses to one problem: the `problem_id` field, else the prompt."""
    pid = trace.extra.get(PROBLEM_FIELD)
    return f"id:{pid}" if pid is not None else f"prompt:{trace.prompt}"


# ---- the outcome -----------------------------------------------------------------------------
def trace_outcome(trace: Trace) -> float:
    """ζ for a trace: the `correct`/`reward` field when present, else 1.0 if the response's
    final answer is equivalent to the reference answer (math-verify), else 0.0."""
    if trace.outcome is not None:
        return float(trace.outcome)
    return 1.0 if grade_completion(trace.response, trace.answer).correct else 0.0


# ---- which keys of a record hold a trace's fields --------------------------------------------
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
        return dataclasses.replace(self, **updates)


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
    return FieldNames(**FORMATS[fmt])


@dataclass
class FieldOptions:
    """Which keys hold each part of a trace (or problem), and which split of a dataset."""

    preset: str | None = option(
        None, flag="--format", choices=tuple(FORMATS),
        help="Field mapping of a public dataset: " + ", ".join(FORMATS) + ".",
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



MISSING = object()  # what `get_path` gives for a path the record does not hold


def get_path(obj: object, path: str) -> object:
    """The value at `path` in a nested record (`MISSING` if absent): a key, or a dotted path
    where a number indexes a list and `*` maps the rest of the path over a list's items. A key
    holding a literal dot is found first."""
    if isinstance(obj, dict) and path in obj:
        return obj[path]
    value: object = obj
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part == "*":
            if not isinstance(value, list):
                return MISSING
            rest = ".".join(parts[i + 1 :])
            items = [get_path(x, rest) if rest else x for x in value]
            return MISSING if any(x is MISSING for x in items) else items
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and (
            -len(value) <= int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            return MISSING
    return value



def pick(obj: dict, names: tuple[str, ...]) -> tuple[str | None, object]:
    """(key, value) of the first of `names` (keys or dotted paths) that `obj` holds; (None,
    None) when it holds none."""
    for n in names:
        value = get_path(obj, n)
        if value is not MISSING:
            return n, value
    return None, None
