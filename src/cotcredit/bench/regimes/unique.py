"""`unique`: the organism's chain task, where the reference solution is the only valid path.

The task and an example problem: `cotcredit.bench.organism.task`.

3 to 6 operations, every value in 0..19; a step is right when it applies the problem's next
operation to the previous step's correct result (`cotcredit.bench.organism.checker`). Since only
one path is valid, the first line that differs from the reference is the first wrong step: a
string comparison localizes every error. The sanity regime: a credit method that reads the
reference must at least match that here.
"""

from __future__ import annotations

import random

from cotcredit.bench.organism.checker import check_response
from cotcredit.bench.organism.task import Chain, random_problem
from cotcredit.bench.regimes.base import Problem, Regime, StepLabel, make_label


def chain_meta(chain: Chain) -> dict:
    """The chain a problem states, JSON-able (`chain_of` reads it back)."""
    return {"start": chain.start, "steps": [[op, b] for op, b in chain.steps]}


def chain_of(problem: Problem) -> Chain:
    """The chain of a problem made by an organism regime."""
    return Chain(int(problem.meta["start"]),
                 tuple((str(op), int(b)) for op, b in problem.meta["steps"]))


class Unique(Regime):
    name = "unique"
    description = (
        "A chain of 3-6 additions and subtractions from a start number, one line per step, on "
        "a 0.8M-parameter Llama trained here. One valid path: the reference is the only right "
        "solution, so the first line that differs from it is the first wrong step. It tests "
        "that a method finds first errors at all; it cannot tell a method that tracks value "
        "from one that tracks agreement with the reference."
    )
    hypothesis = "with one valid path, matching the reference suffices to localize errors"
    sampling = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64}
    # The checkpoint was trained on the train split that skips these pools (1,000 and 300).
    pools = {"test": 1000, "dev": 300}
    min_steps, max_steps = 3, 6

    def draw(self, rng: random.Random, split: str, index: int) -> Problem:
        chain = random_problem(rng, self.min_steps, self.max_steps)
        return Problem(id=f"{self.name}-{split}-{index}", prompt=chain.prompt,
                       answer=str(chain.answer), solution=chain.solution,
                       solutions=(chain.solution,), meta=chain_meta(chain))

    def check(self, problem: Problem, response: str) -> StepLabel:
        c = check_response(chain_of(problem), response)
        return make_label(correct=c.correct, n_steps=c.n_steps,
                          first_error_step=c.first_error_step, error_kind=c.error_kind,
                          error_char=c.error_char, response=response, solution=problem.solution)
