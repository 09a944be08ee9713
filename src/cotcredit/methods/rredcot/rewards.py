"""RREDCoT's estimate, from the probes' scores: R̂, v̂ and g at every state, and the rewards.

    R̂_k = log p(Y* | s_k ⊕ E)
    v̂_k = log Σ_U p(U | s_k ⊕ C) · p(Y* | s_k ⊕ C ⊕ U ⊕ E)     over the distinct paths U left
    g_k = exp(R̂_k) + λ·exp(v̂_k)                                  (`combination`, `space`)
    r_k = g_k − g_(k−1); the last segment also gets T − g_K        (`redistribute_rewards`)

T is the trace's outcome ζ in g's space (`terminal_value`). With `sum_to="return"` the first
segment also gets g_0 and the rewards sum to T; with "advantage" they sum to T − g_0. Every term
is computed in log space and exponentiated once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cotcredit.lm.passes import ContinuationScore
from cotcredit.methods.rredcot.probes import RredcotProbes

if TYPE_CHECKING:
    from cotcredit.methods.rredcot import RredcotOptions


@dataclass
class BoundaryEstimates:
    """R̂_k and v̂_k (log) for k = 0..K, and g_k."""

    r_hat: list[float]
    v_hat: list[float | None]
    g: list[float]


def combine(probes: RredcotProbes, scores: list[ContinuationScore], options: RredcotOptions
            ) -> BoundaryEstimates:
    """R̂_k, v̂_k and g_k at every state from the scores of `probes.continuations`. v̂_k is the
    `mixture` of the paths' log p(U | s_k ⊕ C) + log p(Y* | s_k ⊕ C ⊕ U ⊕ E) (sum over distinct
    paths, or mean/max over references; −inf when none has anything left)."""
    K1 = probes.n_states
    r_hat = [s.logprob for s in scores[:K1]]
    path_logs = []
    for s, (nu, ny) in zip(scores[K1:], probes.solution_spans, strict=True):
        log_u = math.fsum(s.token_logprobs[:nu])  # p(U | s_k ⊕ C)
        log_y = s.logprob - math.fsum(s.token_logprobs[:ny])  # p(Y* | ... ⊕ U ⊕ E)
        path_logs.append((log_u / max(nu, 1) if options.length_norm else log_u) + log_y)
    v_hat: list[float | None] = [None] * K1
    for k, owned in enumerate(probes.paths):
        per_ref = [_logsumexp([path_logs[i] for i in mine]) for mine in owned]
        if options.mixture == "sum":
            v_hat[k] = _logsumexp([path_logs[i] for i in dict.fromkeys(
                i for mine in owned for i in mine)])
        elif options.mixture == "mean":
            v_hat[k] = _logsumexp(per_ref) - math.log(len(per_ref))
        else:
            v_hat[k] = max(per_ref)
    use_r = options.value != "vhat"
    g = [combined(rh if use_r else None, vh, options) for rh, vh in zip(r_hat, v_hat,
                                                                       strict=True)]
    return BoundaryEstimates(r_hat, v_hat, g)


def combined(r_hat: float | None, v_hat: float | None, options: RredcotOptions) -> float:
    """g from R̂ and v̂ (logs; None: absent). With a = exp(R̂), b = λ·exp(v̂): sum a + b,
    noisy-or 1 − (1 − a)(1 − b), mean (a + b)/(1 + λ) (a alone where v̂ has no path left);
    its log in log space."""
    lam = options.vhat_weight
    if options.combination == "mean" and v_hat == -math.inf and r_hat is not None:
        v_hat = None  # no path left: the mean is over the estimates there are (R̂ alone)
    lb = None if v_hat is None else v_hat + math.log(lam)
    if r_hat is None or lb is None:
        log_g = r_hat if lb is None else lb
    elif options.combination == "noisy-or":  # a + b(1 − a)
        log_g = _logaddexp(r_hat, lb + _log1mexp(min(r_hat, 0.0)))
    else:
        log_g = _logaddexp(r_hat, lb)
        if options.combination == "mean":
            log_g -= math.log1p(lam)
    if options.space == "log":
        return log_g
    if options.combination == "sum" and r_hat is not None and lb is not None:
        return math.exp(r_hat) + math.exp(lb)  # as before: each term exponentiated once
    return math.exp(log_g)


def terminal_value(outcome: float, g: list[float], space: str = "prob",
                   log_floor: float = 1e-6) -> float:
    """The outcome ζ in g's space: ζ, or in log space log ζ, where a wrong trace (ζ ≤
    `log_floor`) maps to min(log log_floor, g_0..g_K) so its committing segment is never
    rewarded."""
    if space == "prob":
        return float(outcome)
    if outcome > log_floor:
        return math.log(outcome)
    return min(math.log(log_floor), *g)


def redistribute_rewards(
    g: list[float], terminal: float, sum_to: str = "return"
) -> tuple[list[float], float]:
    """(rewards, correction): r_k = g_k − g_{k−1}, the last also terminal − g_K; they sum to
    terminal (`return`) or terminal − g_0 (`advantage`)."""
    rewards = [g[k] - g[k - 1] for k in range(1, len(g))]
    correction = terminal - g[-1]
    rewards[-1] += correction
    if sum_to == "return":
        rewards[0] += g[0]
    return rewards, correction


def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m)) if m > -math.inf else -math.inf


def _logsumexp(values: Sequence[float]) -> float:
    m = max(values, default=-math.inf)
    if m == -math.inf:
        return -math.inf
    return m + math.log(math.fsum(math.exp(v - m) for v in values))


def _log1mexp(x: float) -> float:
    """log(1 - exp(x)) for x ≤ 0, stably (−inf at x = 0)."""
    if x >= 0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -0.693 else math.log1p(-math.exp(x))
