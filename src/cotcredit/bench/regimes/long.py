"""`long`: a chain of 20 to 40 numbered steps, each following one rule from the previous value.

    Start at 6. Repeat 24 times: add 7 if the number is below 10, otherwise subtract 9. What
    number do you end at?

    1: 6 + 7 = 13
    2: 13 - 9 = 4
    3: 4 + 7 = 11
    ...
    24: 8 + 7 = 15
    The answer is 15.

One valid path, as in `unique`, five to ten times longer. Every step is decided by the value
before it (compare it with the threshold, apply the addition or the subtraction): a step needs
no look-up into a list of 20-40 operations, which a small model fails at (a version listing the
operations stalled with every first error on the first line), so the checkpoint learns the task
from `unique`'s (1,900 steps, about 17 minutes on one CPU thread), and its errors are its own
slips spread along the chain: held out, 0.63 of its temperature-1 samples reach the right answer
(0.57 with every step right), and first errors fall on 34 of the 40 positions, none holding more
than 16% of them. The lines
are numbered: the count tells the model when to stop. Every value stays in 0..19 (the addition
is at most 20 − threshold, the subtraction at most the threshold).

A line is right when it is ``i: a op b = c`` with i its own step number, a the previous step's
correct result (the start number for step 1), ``op b`` what the rule says for a, and c = a op b.
Kinds: ``garbled``, ``index`` (the line names another step's number), ``carry``, ``operand``
(not what the rule says for a: the wrong branch or number), ``arithmetic``, ``missing``,
``extra`` (the rule applied more times than asked). The checkpoint is calibrated so that about
half its samples are right, so first errors spread over many positions: credit has many
segments to tell apart, and every method's cost grows with the number of boundaries.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from math import gcd

from cotcredit.bench.organism.checker import step_error, walk
from cotcredit.bench.organism.task import (
    ANSWER_PREFIX,
    MAX_VALUE,
    QUESTION,
    Chain,
    apply,
    step_line,
)
from cotcredit.bench.regimes.base import Problem, Regime, StepLabel, make_label
from cotcredit.bench.regimes.unique import chain_meta, chain_of

_NUMBERED = re.compile(r"(\d+): (.*)")
MIN_PERIOD = 5  # the values repeat with period (add + subtract) / gcd: not after 2-4 lines


@dataclass(frozen=True)
class Rule:
    """Add `add` to a value below `threshold`, subtract `subtract` from any other."""

    add: int
    subtract: int
    threshold: int

    def step(self, value: int) -> tuple[str, int]:
        return ("+", self.add) if value < self.threshold else ("-", self.subtract)

    def chain(self, start: int, n: int) -> Chain:
        steps, value = [], start
        for _ in range(n):
            steps.append(self.step(value))
            value = apply(value, *steps[-1])
        return Chain(start, tuple(steps))

    @property
    def text(self) -> str:
        return (f"add {self.add} if the number is below {self.threshold}, otherwise subtract "
                f"{self.subtract}.")


def draw_rule(rng: random.Random) -> Rule:
    """A rule that keeps every value in 0..19 and does not repeat within `MIN_PERIOD` lines."""
    while True:
        threshold = rng.randint(5, 15)
        add, subtract = rng.randint(2, MAX_VALUE + 1 - threshold), rng.randint(2, threshold)
        if (add + subtract) // gcd(add, subtract) >= MIN_PERIOD:
            return Rule(add, subtract, threshold)


def rule_of(problem: Problem) -> Rule:
    return Rule(*problem.meta["rule"])


def prompt_of(start: int, n: int, rule: Rule) -> str:
    return f"Start at {start}. Repeat {n} times: {rule.text} {QUESTION}"


def solution_of(chain: Chain) -> str:
    vals = chain.values
    lines = [f"{i + 1}: {step_line(vals[i], *chain.steps[i])}\n" for i in range(len(chain.steps))]
    return "".join(lines) + f"{ANSWER_PREFIX}{chain.answer}."


class Long(Regime):
    name = "long"
    description = (
        "A chain of 20-40 numbered steps, each applying one rule to the value before it "
        "(add if below a threshold, else subtract; one valid path), on a checkpoint continued "
        "from `unique`'s and calibrated to solve about half the problems, so first errors "
        "spread over many positions. It tests whether a method still localizes errors among "
        "many segments, and what it costs as traces grow; like `unique`, reference matching "
        "localizes every error."
    )
    hypothesis = "with 20-40 steps, credit must localize among many segments at growing cost"
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 384}
    pools = {"test": 1000, "dev": 500}
    split_seeds = {"train": 31, "dev": 32, "test": 33}
    min_steps, max_steps = 20, 40
    max_number = 40  # the step numbers

    def draw(self, rng: random.Random, split: str, index: int) -> Problem:
        rule = draw_rule(rng)
        start, n = rng.randint(0, MAX_VALUE), rng.randint(self.min_steps, self.max_steps)
        chain = rule.chain(start, n)
        solution = solution_of(chain)
        return Problem(id=f"{self.name}-{split}-{index}", prompt=prompt_of(start, n, rule),
                       answer=str(chain.answer), solution=solution, solutions=(solution,),
                       meta={**chain_meta(chain),
                             "rule": [rule.add, rule.subtract, rule.threshold]})

    def check(self, problem: Problem, response: str) -> StepLabel:
        chain = chain_of(problem)
        values = chain.values

        def judge(i: int, text: str) -> str:
            m = _NUMBERED.fullmatch(text)
            if not m:
                return "garbled"
            if int(m.group(1)) != i + 1:
                return "index"
            return step_error(m.group(2), values[i], chain.steps[i])

        c = walk(response, len(chain.steps), chain.answer, judge)
        return make_label(correct=c.correct, n_steps=c.n_steps,
                          first_error_step=c.first_error_step, error_kind=c.error_kind,
                          error_char=c.error_char, response=response, solution=problem.solution)
