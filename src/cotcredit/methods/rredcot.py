"""RREDCoT: segment-level reward redistribution (Ielanskyi et al., arXiv 2606.06475).

States s_0..s_K: the prompt plus the first k reasoning segments (s_0 = prompt only). At each
state the model being analysed gives two forward-only estimates (log space):

    R̂_k = log p(Y* | s_k ⊕ E)                                    immediate reward
    v̂_k = log p(U* | s_k ⊕ C) + log p(Y* | s_k ⊕ C ⊕ U* ⊕ E)        value of continuing

Y* is the reference answer, E the answer-forcing exit string, U* the reference solution used as
importance-sampling proposal, C a connector. With `length_norm`, log p(U* | ...) is divided by
|U*| (a per-token geometric mean: an experiment, not the estimator).

Combination. In `space="prob"` (default) the estimates are combined as probabilities,
g_k = exp(R̂_k) + exp(v̂_k), so v̂ stays the importance-sampling estimate it claims to be (each
term is computed in log space and exponentiated once, which is exact in float64). In
`space="log"`, g_k = logsumexp(R̂_k, v̂_k). `value` picks rhat, vhat or both terms.

Redistribution (RUDDER): r_k = g_k − g_{k−1} for k = 1..K. Return equivalence: the last segment
absorbs the correction ζ − g_K, where ζ is the trace's outcome, so with `sum_to="advantage"`
Σ r_k = ζ − g_0, and with `sum_to="return"` the first segment also receives g_0 and Σ r_k = ζ.

Cost: one forward pass over the trace (shared with segmentation), then every probe of every
boundary in packed passes on its KV cache (see `Scorer.score_continuations`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cotcredit.errors import UserError
from cotcredit.forcing import ForcingOptions, answer_forcing
from cotcredit.lm import Continuation
from cotcredit.methods.base import MethodRows, MethodSpec, TraceContext
from cotcredit.outcome import trace_outcome


@dataclass(frozen=True)
class RredcotOptions:
    """Options of RREDCoT; defaults chosen on the lookup benchmark (see benchmarks/)."""

    value: str = "both"  # rhat | vhat | both
    space: str = "prob"  # prob | log: where R̂ and v̂ are combined and differenced
    sum_to: str = "return"  # return: Σ r = ζ; advantage: Σ r = ζ − g_0
    length_norm: bool = False  # per-token normalisation of log p(U*) in v̂
    connector: str = "\n"  # C, between the prefix and the reference solution
    forcing: ForcingOptions = ForcingOptions()
    probe_mode: str = "packed"  # packed | naive (one forward per probe; for checks)

    def validate(self) -> RredcotOptions:
        for name, allowed in (
            ("value", ("rhat", "vhat", "both")),
            ("space", ("prob", "log")),
            ("sum_to", ("return", "advantage")),
            ("probe_mode", ("packed", "naive")),
        ):
            if getattr(self, name) not in allowed:
                raise UserError(
                    f"--{name.replace('_', '-')} must be one of {', '.join(allowed)}, "
                    f"got '{getattr(self, name)}'"
                )
        return self


@dataclass
class BoundaryEstimates:
    """R̂_k and v̂_k (log) for k = 0..K, and g_k."""

    r_hat: list[float]
    v_hat: list[float | None]
    g: list[float]


def _logaddexp(a: float, b: float) -> float:
    m = max(a, b)
    return m + math.log(math.exp(a - m) + math.exp(b - m)) if m > -math.inf else -math.inf


def estimate(ctx: TraceContext, options: RredcotOptions) -> BoundaryEstimates:
    """R̂_k, v̂_k and g_k at every boundary of the trace's segmentation."""
    scorer, trace = ctx.scorer, ctx.trace
    f = answer_forcing(scorer, trace, options.forcing)
    use_v = options.value in ("vhat", "both") and trace.solution is not None
    if options.value == "vhat" and trace.solution is None:
        raise UserError(
            f"{trace.where}: --value vhat needs a reference solution (field 'solution')"
        )
    bounds = ctx.segmentation.boundaries
    conts = [
        Continuation(ctx.prefix_len(b), f.exit_ids + f.answer_ids, len(f.exit_ids), f.terminators)
        for b in bounds
    ]
    if use_v:
        c_ids = scorer.encode_text(options.connector) if options.connector else []
        u_ids = scorer.encode_text(trace.solution.strip())
        tail = u_ids + f.exit_ids + f.answer_ids
        conts += [
            Continuation(ctx.prefix_len(b), c_ids + tail, len(c_ids), f.terminators) for b in bounds
        ]
    if options.probe_mode == "packed":
        scores = scorer.score_continuations(ctx.forward, conts)
    else:
        scores = scorer.score_continuations_naive(ctx.forward.ids, conts)
    K1 = len(bounds)
    r_hat = [s.logprob for s in scores[:K1]]
    v_hat: list[float | None] = [None] * K1
    if use_v:
        nu, ne = len(u_ids), len(f.exit_ids)
        for k, s in enumerate(scores[K1:]):
            log_u = sum(s.token_logprobs[:nu])
            log_y = s.logprob - sum(s.token_logprobs[: nu + ne])
            v_hat[k] = (log_u / max(nu, 1) if options.length_norm else log_u) + log_y
    g = []
    for rh, vh in zip(r_hat, v_hat):
        terms = [t for t, on in ((rh, options.value != "vhat"), (vh, vh is not None)) if on]
        log_g = terms[0] if len(terms) == 1 else _logaddexp(*terms)
        g.append(math.exp(log_g) if options.space == "prob" else log_g)
    return BoundaryEstimates(r_hat, v_hat, g)


def redistribute_rewards(
    g: list[float], outcome: float, sum_to: str = "return"
) -> tuple[list[float], float]:
    """Segment rewards from g_0..g_K: r_k = g_k − g_{k−1}, the last absorbing ζ − g_K.

    Returns (rewards, correction). Σ rewards = ζ (return) or ζ − g_0 (advantage).
    """
    rewards = [g[k] - g[k - 1] for k in range(1, len(g))]
    correction = outcome - g[-1]
    rewards[-1] += correction
    if sum_to == "return":
        rewards[0] += g[0]
    return rewards, correction


def run(ctx: TraceContext, options: RredcotOptions) -> MethodRows:
    """RREDCoT rows for one trace: score = r_k, with R̂, v̂, g before/after as columns."""
    if ctx.trace.solution is None and options.value == "both":
        ctx.notes.append("traces without a reference solution use R̂ alone (v̂ needs one)")
    est = estimate(ctx, options)
    zeta = trace_outcome(ctx.trace)
    rewards, correction = redistribute_rewards(est.g, zeta, options.sum_to)
    K = len(rewards)
    rows = []
    for k in range(K):
        rows.append(
            {
                "score": rewards[k],
                "r_hat": est.r_hat[k + 1],
                "v_hat": est.v_hat[k + 1],
                "r_hat_before": est.r_hat[k],
                "v_hat_before": est.v_hat[k],
                "g_before": est.g[k],
                "g_after": est.g[k + 1],
                "correction": correction if k == K - 1 else 0.0,
                "outcome": zeta,
                "sum_to": options.sum_to,
            }
        )
    return {"rredcot": rows}


def reserve(scorer, trace, options: RredcotOptions) -> int:
    solution = len(scorer.encode_text(trace.solution)) if trace.solution else 0
    return solution + 64


SPEC = MethodSpec(
    name="rredcot",
    options_type=RredcotOptions,
    run=run,
    labels=lambda options: ["rredcot"],
    reserve=reserve,
    description="RREDCoT segment rewards from the model's own answer and solution probabilities",
    columns={"r_hat": "float64", "v_hat": "float64", "r_hat_before": "float64", "v_hat_before": "float64", "g_before": "float64", "g_after": "float64", "correction": "float64", "outcome": "float64", "sum_to": "string"},
    order=0,
    command="cotcredit redistribute TRACES",
    default_output="rredcot.parquet",
)
