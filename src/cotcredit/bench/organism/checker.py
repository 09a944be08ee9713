"""Checking an organism response step by step: the first wrong step, where it starts, the answer.

A response is read line by line. The first line that starts with "The answer is" is the answer
statement; the lines before it are the reasoning steps (with no answer statement, every line
is a step). `walk` finds the first step a regime's judge rejects; `check_response` is the chain
task's judge. Step i (1-based) of a chain with n steps is right when its line is exactly
``a op b = c`` with a = the correct value after step i-1 (the start number for step 1),
``op b`` = the problem's i-th operation and c = a op b. The first step that is not right is
the first error, of one of these kinds:

- ``garbled``: the line is not ``a op b = c`` (blank, cut off, other text);
- ``carry``: a is not the previous step's correct result;
- ``operand``: ``op b`` is not the problem's i-th operation (skipped, repeated or misread);
- ``arithmetic``: a and ``op b`` are right, c is not a op b;
- ``missing``: fewer than n step lines; the error is where step i should start (the answer
  statement's first character, or the end of the response when there is none);
- ``extra``: all n steps right, then more lines before the answer statement.

``error_char`` is the character offset in the response of the first wrong step's line (-1 when
every step is right). The final answer is graded on its own: the integer after "The answer
is" against the problem's answer; no statement (or no integer in it) is wrong. So all steps can
be right and the answer wrong (a mis-stated answer), and a wrong step can still end in the
right answer (a later step that repairs it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass

from cotcredit.bench.lines import answer_line_index, split_lines
from cotcredit.bench.organism.task import ANSWER_PREFIX, Chain, apply

STEP = re.compile(r"(\d+) ([+-]) (\d+) = (\d+)")
_ANSWER = re.compile(re.escape(ANSWER_PREFIX) + r"(\d+)")


@dataclass(frozen=True)
class StepCheck:
    """What the checker found in one response."""

    n_steps: int  # steps the problem needs
    n_lines: int  # step lines the response wrote (before its answer statement)
    first_error_step: int  # 1-based; 0 when every step is right
    error_kind: str  # "" or garbled | carry | operand | arithmetic | missing | extra
    error_char: int  # offset in the response where the first wrong step starts; -1: none
    answer: int | None  # the stated final answer (None: no statement)
    correct: bool  # the stated answer equals the problem's answer

    @property
    def steps_right(self) -> bool:
        return self.error_char < 0

    def to_dict(self) -> dict:
        return asdict(self)


def walk(response: str, n_steps: int, answer: int, judge: Callable[[int, str], str]
         ) -> StepCheck:
    """Check `response`'s step lines in order: `judge(i, text)` gives the kind of error of
    0-based step i ('' when it is right; it is called only while every earlier step was
    right, so it may keep the state of the path taken so far). Missing and extra steps, the
    offsets and the graded answer are the same for every regime (module docstring)."""
    lines = split_lines(response)
    answer_at = answer_line_index(lines, ANSWER_PREFIX)
    steps = lines if answer_at is None else lines[:answer_at]
    stated = None
    if answer_at is not None:
        m = _ANSWER.match(lines[answer_at][1].lstrip())
        stated = int(m.group(1)) if m else None
    kind, where, first = "", -1, 0
    for i in range(n_steps):
        if i >= len(steps):
            kind = "missing"
            where = lines[answer_at][0] if answer_at is not None else len(response)
        else:
            where = steps[i][0]
            kind = judge(i, steps[i][1])
        if kind:
            first = i + 1
            break
    else:
        if len(steps) > n_steps:
            kind, where, first = "extra", steps[n_steps][0], n_steps + 1
    return StepCheck(
        n_steps=n_steps, n_lines=len(steps), first_error_step=first, error_kind=kind,
        error_char=where if kind else -1, answer=stated,
        correct=stated is not None and stated == answer,
    )


def check_response(problem: Chain, response: str) -> StepCheck:
    """Check `response` against `problem` (see the module docstring for the rules)."""
    values = problem.values
    return walk(response, len(problem.steps), problem.answer,
                lambda i, text: step_error(text, values[i], problem.steps[i]))


def step_error(text: str, before: int, step: tuple[str, int]) -> str:
    """The kind of error in one step line ('' when it is right)."""
    m = STEP.fullmatch(text)
    if not m:
        return "garbled"
    a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
    if a != before:
        return "carry"
    if (op, b) != step:
        return "operand"
    if c != apply(a, op, b):
        return "arithmetic"
    return ""
