"""Adaptive Monte Carlo (`mc-baseline --rollouts auto`): rollouts in rounds, only where needed.

Fixed-N Monte Carlo takes N rollouts from every scored boundary. Most boundaries do not need
them: from a state the model (almost) always solves, or (almost) never does, a few rollouts
already pin V_k down. The adaptive mode spends rollouts in rounds and stops each boundary once
its value is resolved, within a budget.

Budget. `--rollout-budget B` is rollouts per scored boundary on average: a trace with M scored
boundaries takes at most B·M rollouts, and no boundary more than 4·B (so one boundary whose
value sits near 1/2 cannot take a whole trace's budget).

Rounds.
1. First round: `--round-rollouts R` rollouts from every scored boundary.
2. After each round, every boundary k has n_k rollouts, of which c_k correct (not cut off) and
   u_k usable (n_k, or n_k minus the cut-off ones under `--truncated drop`). Its interval is
   the 95% Wilson score interval of c_k / u_k (z = 1.96), half-width h_k (infinite when u_k = 0).
3. A boundary is *resolved* when h_k <= `--precision` p. For example, with R = 8 and p = 0.2,
   a first round that is unanimous (all 8 correct, or none) resolves it (h = 0.162); 7 of 8
   does not (h = 0.224); a value near 1/2 needs about 21 rollouts.
4. First drop (localization, a binary search as OmegaPRM's). When the trace's value falls,
   V̂_first − V̂_last > p (first and last scored boundaries), let τ be their midpoint. A boundary
   is *high* when its interval lies above τ, *low* when it lies below, *unclear* otherwise. Let
   hi be the first low boundary (or past the end when none) and lo the last high boundary before
   hi (or before the start when none): the first drop lies between them, and every boundary
   strictly between is unclear. While some are, the search asks for the middle one of them
   (bisection), as long as its interval is wider than ±p/2 (narrower: its value is as close to
   τ as the precision can tell, and the search stops there).
5. Next round: the search's boundary and the unresolved boundaries each get R more rollouts (fewer
   where a boundary's cap or the trace's budget runs out: the search's boundary first, then the
   widest intervals, then the earlier boundaries). Stop when no boundary is wanted or the budget
   is spent.

Estimator. V_k = c_k / u_k over all the rollouts boundary k took, the fixed mode's estimator;
stderr, halves (even and odd sample indices) and counts as in the fixed mode, with n_rollouts
now varying by boundary. Because the number of rollouts depends on what they returned, V_k is
not exactly unbiased (a boundary stops early after a unanimous round); the benchmark
(benchmarks/bench_mc_adaptive.py) measures its agreement with a 64-rollout Monte Carlo.

Random streams. Rollout j of boundary k is drawn from the stream of (seed, trace, token offset
of k, j), exactly as in the fixed mode: a round continues at sample n_k
(`SamplingOptions.first_sample`). So the rollouts an adaptive run takes are the first n_k of a
fixed run with the same seed, and do not depend on the batch size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Z = 1.96  # 95% intervals
CAP_FACTOR = 4  # no boundary takes more than CAP_FACTOR · budget rollouts


@dataclass(frozen=True)
class AdaptivePlan:
    """How the adaptive mode spends rollouts (the module docstring)."""

    budget: int  # rollouts per scored boundary on average
    precision: float  # resolved: 95% interval no wider than ±precision
    round_rollouts: int  # rollouts per boundary per round

    def total(self, boundaries: int) -> int:
        """Rollouts a trace with `boundaries` scored boundaries may take at most."""
        return self.budget * boundaries

    @property
    def cap(self) -> int:
        """Rollouts one boundary may take at most."""
        return CAP_FACTOR * self.budget


@dataclass
class Tally:
    """The rollouts one boundary has taken so far."""

    n: int = 0  # rollouts taken
    correct: int = 0  # correct and not cut off
    usable: int = 0  # counted in the value (all, or the ones not cut off under "drop")

    @property
    def value(self) -> float:
        """c / u (NaN with no usable rollout)."""
        return self.correct / self.usable if self.usable else math.nan


def wilson(correct: int, n: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval (low, high) of a proportion `correct` / `n`; (0, 1) for n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def half_width(t: Tally) -> float:
    """Half the width of a boundary's Wilson interval (infinite with no usable rollout)."""
    if t.usable == 0:
        return math.inf
    low, high = wilson(t.correct, t.usable)
    return (high - low) / 2


def drop_search(tallies: Sequence[Tally], precision: float) -> int | None:
    """The position (into `tallies`, the scored boundaries in order) the binary search for the
    first drop asks about next, or None (no drop, or the drop is located)."""
    if len(tallies) < 3:
        return None
    first, last = tallies[0].value, tallies[-1].value
    if not (first - last > precision):  # no drop (NaN included)
        return None
    tau = (first + last) / 2

    def side(t: Tally) -> int:  # +1 high, -1 low, 0 unclear
        if t.usable == 0:
            return 0
        low, high = wilson(t.correct, t.usable)
        return 1 if low > tau else -1 if high < tau else 0

    sides = [side(t) for t in tallies]
    hi = next((i for i, s in enumerate(sides) if s < 0), len(tallies))
    lo = next((i for i in range(hi - 1, -1, -1) if sides[i] > 0), -1)
    unclear = [i for i in range(lo + 1, hi) if half_width(tallies[i]) > precision / 2]
    return unclear[len(unclear) // 2] if unclear else None


def next_round(tallies: Sequence[Tally], plan: AdaptivePlan, spent: int) -> dict[int, int]:
    """Rollouts to take next, position -> how many ({} : stop). `spent`: rollouts taken so far."""
    left = plan.total(len(tallies)) - spent
    if not any(t.n for t in tallies):  # the first round
        wanted = list(range(len(tallies)))
    else:
        search = drop_search(tallies, plan.precision)
        width = [half_width(t) for t in tallies]
        unresolved = sorted((i for i, w in enumerate(width) if w > plan.precision),
                            key=lambda i: (-width[i], i))
        wanted = ([search] if search is not None else []) + [i for i in unresolved if i != search]
    out = {}
    for i in wanted:
        take = min(plan.round_rollouts, plan.cap - tallies[i].n, left)
        if take > 0:
            out[i] = take
            left -= take
    return out


Draw = Callable[[dict[int, tuple[int, int]]], dict[int, list[tuple[bool, bool]]]]


def run_rounds(n_boundaries: int, plan: AdaptivePlan, draw: Draw, drop_truncated: bool
               ) -> list[Tally]:
    """Take rollouts in rounds until every boundary is resolved or the budget is spent.

    `draw({position: (first sample, count)})` takes the rollouts first..first+count−1 of each
    position and returns, per position, (correct, truncated) of each, in sample order."""
    tallies = [Tally() for _ in range(n_boundaries)]
    spent = 0
    while True:
        asked = next_round(tallies, plan, spent)
        if not asked:
            return tallies
        got = draw({i: (tallies[i].n, m) for i, m in asked.items()})
        for i, m in asked.items():
            results = got[i]
            if len(results) != m:
                raise ValueError(f"asked {m} rollouts of boundary position {i}, got {len(results)}")
            t = tallies[i]
            t.n += m
            t.correct += sum(c and not tr for c, tr in results)
            t.usable += sum(not tr for _, tr in results) if drop_truncated else m
            spent += m
