"""The benchmark's known-truth regimes, each isolating one hypothesis about credit assignment:

- `unique`: one valid path (reference matching suffices; the sanity regime);
- `multipath`: many valid paths (reference matching must fail, value must not);
- `forecast`: the answer is fixed before the last lines (R̂ can work; wrong check lines with a
  right answer measure false blame);
- `long`: 20-40 steps (credit among many segments; cost grows);
- `groups`: `multipath` with 8 samples per problem, as a GRPO group (the right siblings as known
  paths);
- `hops`: realistic language on the embedded SmolLM2.

Each has a problem generator with disjoint train/dev/test splits, a checker that labels the
first wrong step of any response (accepting every valid path), a checkpoint (`checkpoint(name)`)
and the sampling settings of its traces (`cotcredit.bench.traces`)::

    from cotcredit.bench import get_regime
    regime = get_regime("multipath")
    problem = regime.problems("dev", 1)[0]
    regime.check(problem, problem.solution)     # StepLabel(correct=True, error_char=-1, ...)
"""

from __future__ import annotations

from cotcredit.bench.regimes.base import Problem, Regime, StepLabel
from cotcredit.bench.regimes.forecast import Forecast
from cotcredit.bench.regimes.groups import Groups
from cotcredit.bench.regimes.hops import Hops
from cotcredit.bench.regimes.long import Long
from cotcredit.bench.regimes.multipath import Multipath
from cotcredit.bench.regimes.unique import Unique
from cotcredit.errors import UserError

REGIMES: dict[str, Regime] = {r.name: r for r in (Unique(), Multipath(), Forecast(), Long(),
                                                  Groups(), Hops())}


def get_regime(name: str) -> Regime:
    """The regime called `name` (a one-line UserError listing the known ones otherwise)."""
    if name not in REGIMES:
        raise UserError(f"unknown regime '{name}'; known: {', '.join(REGIMES)}")
    return REGIMES[name]


def checkpoint(name: str) -> str:
    """The model a regime's traces are sampled from: the folder of its shipped checkpoint, or
    "embedded" for the embedded default model (`hops`)."""
    return get_regime(name).model()


__all__ = ["REGIMES", "Problem", "Regime", "StepLabel", "checkpoint", "get_regime"]
