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

Where the first round goes (`--first-round`). `all` (the default): every scored boundary, as
above. `ends`: the first and the last scored boundary only (a budget smaller than a round at
each is shared between the two); then the search of step 4 bisects
between them, one boundary a round, and only boundaries that were sampled are ever resolved
further (step 5). A boundary never sampled gets its value by linear interpolation between the
sampled ones around it (as with `--max-boundaries`), so a located drop falls on one segment and
the segments around it share what is left. On a trace of K segments the search needs about
log2 K boundaries instead of K.

A prior (`--prior`; `cotcredit.methods.mc_prior`). A cheap credit per segment (R̂, R̂ + v̂,
the model's entropy, the string comparison with the known paths) ranks the segments: the one
with the lowest credit is the likeliest place of the drop. Segment s of rank r_s (0 = lowest,
ties share their mean rank) gets the weight w_s = 2^(−r_s), and the search asks, among the
unclear boundaries between lo and hi, for the one that splits the weight of the segments
between lo and hi most evenly (probabilistic bisection: with equal weights, the middle one).

Deciding with few rollouts (`--decision point`). With rounds of 2 or 4 rollouts a Wilson
interval rarely lies on one side of τ (0 of 4 right has the interval [0, 0.49]): the search
then keeps asking one boundary. `point` places a sampled boundary by its estimate alone (high
when V̂ > τ, low otherwise), so every round of the search halves the interval, at the price of
the mistakes its noise makes. Its rounds ask the search's boundary alone; the budget left when
the drop is located resolves the sampled boundaries as in step 5.

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
FIRST_ROUNDS = ("all", "ends")  # where the first round goes (`AdaptivePlan.first_round`)
DECISIONS = ("interval", "point")  # how the search places a boundary (`AdaptivePlan.decision`)


@dataclass(frozen=True)
class AdaptivePlan:
    """How the adaptive mode spends rollouts (the module docstring)."""

    budget: int  # rollouts per scored boundary on average
    precision: float  # resolved: 95% interval no wider than ±precision
    round_rollouts: int  # rollouts per boundary per round
    first_round: str = "all"  # all: every scored boundary; ends: the first and the last
    decision: str = "interval"  # interval: its Wilson interval vs τ; point: its estimate vs τ

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


def prior_weights(credits: Sequence[float]) -> list[float]:
    """Weights w_s = 2^(−r_s) of the segments from a cheap credit per segment: r_s is the rank
    of segment s by ascending credit (0 = lowest; tied credits share their mean rank), so the
    likeliest place of the first drop weighs most."""
    order = sorted(range(len(credits)), key=lambda s: credits[s])
    rank = [0.0] * len(credits)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and credits[order[j + 1]] == credits[order[i]]:
            j += 1
        for s in order[i:j + 1]:
            rank[s] = (i + j) / 2
        i = j + 1
    return [2.0 ** -r for r in rank]


def span_weights(segment_weights: Sequence[float], positions: Sequence[int]) -> list[float]:
    """The weight of the span before each scored boundary: span i (i ≥ 1) holds the segments
    between scored boundaries `positions[i−1]` and `positions[i]` (boundary indices); span 0 is
    empty (weight 0)."""
    return [0.0] + [sum(segment_weights[a:b]) for a, b in zip(positions, positions[1:],
                                                              strict=False)]


def drop_search(tallies: Sequence[Tally], precision: float,
                weights: Sequence[float] | None = None, decision: str = "interval"
                ) -> int | None:
    """The position (into `tallies`, the scored boundaries in order) the binary search for the
    first drop asks about next, or None (no drop, or the drop is located). `weights`: the prior
    weight of the span before each position (`span_weights`); None: the middle one. `decision`:
    a sampled boundary is high or low by its Wilson interval (interval) or by its estimate
    (point: high above τ, low at or below; only a boundary never sampled is unclear)."""
    if len(tallies) < 3:
        return None
    first, last = tallies[0].value, tallies[-1].value
    if not (first - last > precision):  # no drop (NaN included)
        return None
    tau = (first + last) / 2

    def side(t: Tally) -> int:  # +1 high, -1 low, 0 unclear
        if t.usable == 0:
            return 0
        if decision == "point":
            return 1 if t.value > tau else -1
        low, high = wilson(t.correct, t.usable)
        return 1 if low > tau else -1 if high < tau else 0

    sides = [side(t) for t in tallies]
    hi = next((i for i, s in enumerate(sides) if s < 0), len(tallies))
    lo = next((i for i in range(hi - 1, -1, -1) if sides[i] > 0), -1)
    unclear = [i for i in range(lo + 1, hi) if half_width(tallies[i]) > precision / 2]
    if not unclear:
        return None
    if weights is None:
        return unclear[len(unclear) // 2]
    # Probabilistic bisection: the drop is in a span lo+1..hi; ask where the weight splits.
    spans = range(max(lo, 0) + 1, min(hi, len(tallies) - 1) + 1)
    total = sum(weights[s] for s in spans)
    if total <= 0:
        return unclear[len(unclear) // 2]

    def imbalance(i: int) -> float:
        return abs(sum(weights[s] for s in spans if s <= i) / total - 0.5)

    return min(unclear, key=lambda i: (imbalance(i), abs(i - unclear[len(unclear) // 2])))


def next_round(tallies: Sequence[Tally], plan: AdaptivePlan, spent: int,
               weights: Sequence[float] | None = None) -> dict[int, int]:
    """Rollouts to take next, position -> how many ({} : stop). `spent`: rollouts taken so far;
    `weights`: the prior's span weights (`drop_search`)."""
    left = plan.total(len(tallies)) - spent
    per = plan.round_rollouts
    if not any(t.n for t in tallies):  # the first round
        n = len(tallies)
        wanted = list(range(n)) if plan.first_round == "all" else sorted({0, n - 1})
        # A budget below a round at each end is shared between them: both get a value.
        per = min(per, max(1, left // len(wanted)))
    else:
        search = drop_search(tallies, plan.precision, weights, plan.decision)
        width = [half_width(t) if t.n else 0.0 for t in tallies]  # never sampled: not asked
        unresolved = sorted((i for i, w in enumerate(width) if w > plan.precision),
                            key=lambda i: (-width[i], i))
        if search is not None and plan.decision == "point":
            wanted = [search]  # the search first; what is left resolves the boundaries after
        else:
            wanted = ([search] if search is not None else []) + [i for i in unresolved
                                                                 if i != search]
    out = {}
    for i in wanted:
        take = min(per, plan.cap - tallies[i].n, left)
        if take > 0:
            out[i] = take
            left -= take
    return out


Draw = Callable[[dict[int, tuple[int, int]]], dict[int, list[tuple[bool, bool]]]]


def adaptive_draws(options, which: list[int], credits: Sequence[float] | None,
                   sample: Callable[[dict[int, tuple[int, int]]], list]) -> None:
    """Run `--rollouts auto` (`options`: an `McOptions`) over the boundary indices `which`:
    `sample` takes {boundary index: (first sample, count)} and returns those rollouts (objects
    with boundary, sample, correct, truncated), live or replayed; `credits`, the prior's credit
    per segment, guides the search (None: no prior)."""
    plan = AdaptivePlan(options.rollout_budget, options.precision, options.round_rollouts,
                        options.first_round, options.decision)
    weights = span_weights(prior_weights(credits), which) if credits is not None else None

    def draw(asked: dict[int, tuple[int, int]]) -> dict[int, list[tuple[bool, bool]]]:
        by_k: dict[int, list[tuple[bool, bool]]] = {}
        got = sample({which[i]: fc for i, fc in asked.items()})
        for r in sorted(got, key=lambda r: (r.boundary, r.sample)):
            by_k.setdefault(r.boundary, []).append((r.correct, r.truncated))
        return {i: by_k.get(which[i], []) for i in asked}

    run_rounds(len(which), plan, draw, drop_truncated=options.truncated == "drop",
               weights=weights)


def generate_calls(requests: dict[int, tuple[int, int]]
                   ) -> list[tuple[tuple[int, int], list[int]]]:
    """The generator calls of one draw: boundaries grouped by (first sample, count), in the
    order `requests` names them (each call prefills its longest state once)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for k, first_count in requests.items():
        groups.setdefault(first_count, []).append(k)
    return list(groups.items())


def run_rounds(n_boundaries: int, plan: AdaptivePlan, draw: Draw, drop_truncated: bool,
               weights: Sequence[float] | None = None) -> list[Tally]:
    """Take rollouts in rounds until every boundary is resolved or the budget is spent.

    `draw({position: (first sample, count)})` takes the rollouts first..first+count−1 of each
    position and returns, per position, (correct, truncated) of each, in sample order.
    `weights`: the prior's weight of the span before each position (`span_weights`), or None."""
    tallies = [Tally() for _ in range(n_boundaries)]
    spent = 0
    while True:
        asked = next_round(tallies, plan, spent, weights)
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
