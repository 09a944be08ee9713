"""Allocation (`mc --rollouts auto`, with `--first-round` and `--prior`) and the reference curve
(`mc-n`, the first n rollouts of every boundary), replayed on the bench's rollout pool.

Every configuration draws only saved rollouts (a boundary takes at most 4 x budget <= 32), so its
replay is what a live run returns and spends (`cotcredit.methods.mc_replay`,
tests/methods/test_mc_replay.py).
"""

from __future__ import annotations

import itertools

import pandas as pd

from cotcredit.methods.mc import McOptions

from .common import Split, priors, replay_result

#: The dev grid (PROTOCOL.md, with the amendment adding `first_round`).
BUDGETS = (1, 2, 4, 8)
ROUNDS = (2, 4)
PRECISIONS = (0.2, 0.3)
PRIORS = ("none", "rhat", "rredcot", "entropy", "paths")
FIRST_ROUNDS = ("all", "ends")
DECISIONS = ("interval", "point")
#: The reference curve.
MC_N = tuple(range(1, 33))


def config_name(first_round: str, decision: str, budget: int, rounds: int, precision: float,
                prior: str) -> str:
    return f"auto-{first_round}-{decision}-b{budget}-r{rounds}-p{precision}-{prior}"


def grid() -> list[tuple[str, McOptions]]:
    """Every feasible configuration of the grid (a first round at every boundary needs a budget
    of at least one round)."""
    out = []
    for fr, d, b, r, p, prior in itertools.product(FIRST_ROUNDS, DECISIONS, BUDGETS, ROUNDS,
                                                   PRECISIONS, PRIORS):
        if fr == "all" and b < r:
            continue
        out.append((config_name(fr, d, b, r, p, prior),
                    McOptions(rollouts="auto", rollout_budget=b, round_rollouts=r, precision=p,
                              first_round=fr, decision=d, prior=prior)))
    return out


def reference_curve(split: Split, ns=MC_N) -> pd.DataFrame:
    """`mc-n` for every n: the first n rollouts of every boundary."""
    return pd.concat([replay_result(split, f"mc-{n}", McOptions(rollouts=n)) for n in ns],
                     ignore_index=True)


def allocation_results(split: Split, configs: list[tuple[str, McOptions]] | None = None
                       ) -> pd.DataFrame:
    """Every allocation configuration replayed on the split's pool."""
    known = priors(split)
    parts = []
    for name, options in configs or grid():
        credits, cost = known.get(options.prior, (None, None))
        parts.append(replay_result(split, name, options, credits, cost))
    return pd.concat(parts, ignore_index=True)
