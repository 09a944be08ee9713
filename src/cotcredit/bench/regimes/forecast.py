"""`forecast`: the answer is fixed before the last lines, so it can be forecast mid-chain.

    Start at 7. Add 5. Subtract 9. Add 14. Subtract 6. What number do you end at? Check by
    undoing each step.

    7 + 5 = 12
    12 - 9 = 3
    3 + 14 = 17
    17 - 6 = 11
    Check: 11 + 6 = 17
    Check: 17 - 14 = 3
    Check: 3 + 9 = 12
    Check: 12 - 5 = 7
    The answer is 11.

The chain is computed (3 to 6 forward steps, as in `unique`), then checked by undoing its
steps back to the start number, then the answer is stated. The answer is known once the
forward chain ends; the checkpoint is trained with early-answer sequences (a forced "The
answer is " after a random number of lines, loss on the answer only), so its forced answer
forecasts Y* from there on. A wrong check line followed by the right answer is a wrong step
that costs nothing: a method that tracks the answer's probability should not blame it much,
while a checker-trained eye blames it fully.

Forward step i is judged as in `unique` (kinds ``garbled``, ``carry``, ``operand``,
``arithmetic``). Check line j (1-based) must be ``Check: a op' b = c`` undoing forward step
n+1-j: a = that step's result, ``op' b`` its inverse operation, c = the value before it; its
kinds are the same with a ``check-`` prefix. Then ``missing`` and ``extra`` as everywhere.
"""

from __future__ import annotations

import random

from cotcredit.bench.organism.checker import STEP, step_error, walk
from cotcredit.bench.organism.task import ANSWER_PREFIX, QUESTION, Chain, random_problem, step_line
from cotcredit.bench.regimes.base import Problem, Regime, StepLabel, make_label
from cotcredit.bench.regimes.unique import chain_meta, chain_of

CHECK = "Check: "
INVERSE = {"+": "-", "-": "+"}


def prompt_of(chain: Chain) -> str:
    return chain.prompt.replace(QUESTION, QUESTION + " Check by undoing each step.")


def solution_lines(chain: Chain) -> list[str]:
    """The reasoning lines (without line breaks): the forward steps, then the check lines."""
    vals = chain.values
    n = len(chain.steps)
    lines = [step_line(vals[i], *chain.steps[i]) for i in range(n)]
    for i in reversed(range(n)):
        op, b = chain.steps[i]
        lines.append(CHECK + step_line(vals[i + 1], INVERSE[op], b))
    return lines


def solution_of(chain: Chain) -> str:
    return "".join(x + "\n" for x in solution_lines(chain)) + f"{ANSWER_PREFIX}{chain.answer}."


class Forecast(Regime):
    name = "forecast"
    description = (
        "The chain organism with a verification: the forward steps, then one check line per "
        "step undoing it back to the start number, then the answer. The answer is fixed once "
        "the forward chain ends, and the checkpoint (trained with early-answer sequences) "
        "forecasts it from there, so the probability of the answer given a prefix (R̂) can "
        "carry credit. Wrong check lines followed by the right answer are wrong steps that "
        "cost nothing: false blame is measured on them. It cannot separate value from "
        "reference matching (one valid path)."
    )
    hypothesis = "when the answer is fixed before the last lines, R̂ can carry credit"
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 128}
    pools = {"test": 1000, "dev": 500}
    split_seeds = {"train": 21, "dev": 22, "test": 23}
    min_steps, max_steps = 3, 6

    def draw(self, rng: random.Random, split: str, index: int) -> Problem:
        chain = random_problem(rng, self.min_steps, self.max_steps)
        solution = solution_of(chain)
        return Problem(id=f"{self.name}-{split}-{index}", prompt=prompt_of(chain),
                       answer=str(chain.answer), solution=solution, solutions=(solution,),
                       meta=chain_meta(chain))

    def check(self, problem: Problem, response: str) -> StepLabel:
        chain = chain_of(problem)
        n, vals = len(chain.steps), chain.values

        def judge(i: int, text: str) -> str:
            if i < n:
                return step_error(text, vals[i], chain.steps[i])
            k = 2 * n - 1 - i  # the forward step this check line undoes (0-based)
            op, b = chain.steps[k]
            if not text.startswith(CHECK):
                return "check-garbled"
            body = text[len(CHECK):]
            kind = step_error(body, vals[k + 1], (INVERSE[op], b)) if STEP.fullmatch(body) \
                else "garbled"
            return f"check-{kind}" if kind else ""

        c = walk(response, 2 * n, chain.answer, judge)
        return make_label(correct=c.correct, n_steps=c.n_steps,
                          first_error_step=c.first_error_step, error_kind=c.error_kind,
                          error_char=c.error_char, response=response, solution=problem.solution)
