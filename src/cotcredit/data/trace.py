"""The `Trace` record, the one-line `TraceError` of a bad input record, where a response's
reasoning ends (`reasoning_end`: up to `</think>`, else up to the final-answer statement), and
where it first departs from a reference solution (`first_departure`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cotcredit.errors import UserError

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
