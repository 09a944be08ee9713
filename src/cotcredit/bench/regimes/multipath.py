"""`multipath`: the operations may be applied in any order, so many solutions are right.

    Start at 9. Use each once, in any order, staying within 0 to 19: Add 4. Add 2. Add 2.
    Add 1. Subtract 1. What number do you end at?

    9 + 2 = 11           (one valid order of many; the reference is the order listed)
    11 - 1 = 10
    10 + 4 = 14
    14 + 1 = 15
    15 + 2 = 17
    The answer is 17.

Every order of the operations whose running values stay in 0..19 is a valid path, and every
one ends at the same answer. Problems are drawn so that every order stays in range (the
additions sum to at most 19 − start, the subtractions to at most start; 4 to 6 operations, at
least 3 distinct orders): a valid path needs no look-ahead, only the bookkeeping of which
operations are used. The reference solution applies them in the listed order; the model is
trained on orders drawn uniformly from the valid ones, so its own traces often depart from the
reference without a mistake.

The checker does not rely on how problems are drawn. Step i is right when its line is ``a op b
= c`` with a = the previous step's result, ``op b`` an operation not used yet, c = a op b in
0..19, and the operations still unused can still be applied in some order without leaving
0..19. Error kinds: ``garbled``, ``carry``, ``operand`` (an operation not in the problem or
already used), ``range`` (a op b leaves 0..19), ``arithmetic``, ``dead end`` (right arithmetic,
but no order of the remaining operations stays in range), ``missing``, ``extra``.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from functools import lru_cache

from cotcredit.bench.organism.checker import walk
from cotcredit.bench.organism.task import (
    ANSWER_PREFIX,
    MAX_VALUE,
    Chain,
    apply,
    in_range,
    operations_text,
    step_line,
)
from cotcredit.bench.regimes.base import Problem, Regime, StepLabel, make_label
from cotcredit.bench.regimes.unique import chain_meta, chain_of

INSTRUCTION = "Use each once, in any order, staying within 0 to 19:"
MAX_SOLUTIONS = 8  # references listed in `solutions` (the canonical one first)
# A signed result, so that a step that leaves 0..19 is read as such, not as garbled text.
_STEP = re.compile(r"(\d+) ([+-]) (\d+) = (-?\d+)")

Op = tuple[str, int]


def prompt_of(chain: Chain) -> str:
    return (f"Start at {chain.start}. {INSTRUCTION} {operations_text(chain.steps)} "
            "What number do you end at?")


def solution_of(start: int, order: tuple[Op, ...]) -> str:
    """The solution applying `order` from `start`."""
    lines, value = [], start
    for op, b in order:
        lines.append(step_line(value, op, b) + "\n")
        value = apply(value, op, b)
    return "".join(lines) + f"{ANSWER_PREFIX}{value}."


@lru_cache(maxsize=65536)
def valid_orders(value: int, remaining: tuple[Op, ...]) -> tuple[tuple[Op, ...], ...]:
    """Every distinct order of the `remaining` operations (sorted) whose running values stay
    in 0..19 from `value`; () when none does (a dead end), ((),) when none remain."""
    if not remaining:
        return ((),)
    out = []
    for i, op in enumerate(remaining):
        if op in remaining[:i]:  # identical operations: one order, not two
            continue
        nxt = apply(value, *op)
        if in_range(nxt):
            rest = remaining[:i] + remaining[i + 1 :]
            out += [(op, *tail) for tail in valid_orders(nxt, rest)]
    return tuple(out)


def free_order_chain(rng: random.Random, min_steps: int, max_steps: int) -> Chain:
    """A start number and operations that stay in 0..19 in every order: the additions sum to
    at most 19 − start and the subtractions to at most start (drawn until that holds)."""
    while True:
        n = rng.randint(min_steps, max_steps)
        start = rng.randint(0, MAX_VALUE)
        room = {"+": MAX_VALUE - start, "-": start}
        steps = []
        for _ in range(n):
            ops = [op for op in "+-" if room[op] >= 1]
            if not ops:
                break
            op = rng.choice(ops)
            b = rng.randint(1, room[op])
            room[op] -= b
            steps.append((op, b))
        if len(steps) == n:
            return Chain(start, tuple(steps))


class Multipath(Regime):
    name = "multipath"
    description = (
        "The chain organism with 4-6 operations applicable in any order (every order keeps "
        "the values in 0..19): many valid paths to one answer, the reference one of them, and a "
        "model trained on uniformly drawn valid orders, so correct traces often depart from "
        "the reference. A method that blames departure from the reference (a string match, "
        "or a value estimate that reads one reference) fails here; one that estimates the "
        "value of a state must not. It cannot tell value from forecasting: the answer is "
        "fixed by the problem, not by the path."
    )
    hypothesis = "with many valid paths, matching the reference fails and value must not"
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64}
    pools = {"test": 1000, "dev": 500}
    split_seeds = {"train": 11, "dev": 12, "test": 13}
    min_steps, max_steps = 4, 6
    min_orders = 3  # problems with fewer valid orders are redrawn: departures must be possible

    def draw(self, rng: random.Random, split: str, index: int) -> Problem:
        while True:
            chain = free_order_chain(rng, self.min_steps, self.max_steps)
            orders = valid_orders(chain.start, tuple(sorted(chain.steps)))
            if len(orders) >= self.min_orders:
                break
        reference = solution_of(chain.start, chain.steps)
        others = [o for o in orders if o != chain.steps]
        # A fixed spread of the other orders (stable for a problem, whatever the split size).
        picked = random.Random(reference).sample(others, min(len(others), MAX_SOLUTIONS - 1))
        return Problem(
            id=f"{self.name}-{split}-{index}", prompt=prompt_of(chain), answer=str(chain.answer),
            solution=reference,
            solutions=(reference, *(solution_of(chain.start, o) for o in picked)),
            meta={**chain_meta(chain), "valid_orders": len(orders)},
        )

    def check(self, problem: Problem, response: str) -> StepLabel:
        chain = chain_of(problem)
        remaining = Counter(chain.steps)
        value = [chain.start]

        def judge(i: int, text: str) -> str:
            m = _STEP.fullmatch(text)
            if not m:
                return "garbled"
            a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
            if a != value[0]:
                return "carry"
            if remaining[(op, b)] < 1:
                return "operand"
            nxt = apply(a, op, b)
            if not in_range(nxt):
                return "range"
            if c != nxt:
                return "arithmetic"
            remaining[(op, b)] -= 1
            value[0] = nxt
            if not valid_orders(nxt, tuple(sorted(remaining.elements()))):
                return "dead end"
            return ""

        c = walk(response, len(chain.steps), chain.answer, judge)
        return make_label(correct=c.correct, n_steps=c.n_steps,
                          first_error_step=c.first_error_step, error_kind=c.error_kind,
                          error_char=c.error_char, response=response, solution=problem.solution)

    def training_response(self, problem: Problem, rng: random.Random) -> str:
        """A valid order drawn uniformly from all of them."""
        chain = chain_of(problem)
        orders = valid_orders(chain.start, tuple(sorted(chain.steps)))
        return solution_of(chain.start, orders[rng.randrange(len(orders))])
