"""RREDCoT: segment-level reward redistribution (Ielanskyi et al., arXiv 2606.06475).

States s_0..s_K: the prompt plus the first k reasoning segments (s_0 = prompt only). At each
state the model being analysed gives two forward-only estimates (log space):

    R̂_k = log p(Y* | s_k ⊕ E)                                    immediate reward
    v̂_k = log p(U*_k | s_k ⊕ C) + log p(Y* | s_k ⊕ C ⊕ U*_k ⊕ E)    value of continuing

Y* is the reference answer, E the answer-forcing exit string, U*_k the reference solution used
as importance-sampling proposal, C a connector (left out where s_k already ends with it; E
follows U* on its own line, see `forcing`). `solution_part` says what U*_k is: "whole", the
reference solution from its first step at every state (the model is asked to start over), or
"remaining", the reference steps not yet covered at s_k (`steps_covered`: steps are U*'s
lines, covered in proportion to the segments done), which reads the continuation *from* s_k.
With `length_norm`, log p(U*_k | ...) is divided by |U*_k| in tokens (a per-token geometric
mean: an experiment, not the estimator).

Combination. In `space="prob"` (default) the estimates are combined as probabilities,
g_k = exp(R̂_k) + λ·exp(v̂_k) (λ = `vhat_weight`, 1 for the estimator), so v̂ stays the
importance-sampling estimate it claims to be (each term is computed in log space and
exponentiated once). In `space="log"`, g_k = logsumexp(R̂_k, log λ + v̂_k). λ = 0 gives R̂
alone, exactly. `value` picks rhat, vhat or both terms. With both terms g_k can exceed 1 (two estimates of one success probability, added): rewards are then not
confined to [−1, 1] and a correct trace's correction 1 − g_K can be negative; nothing downstream
assumes otherwise (see the README for how often it happens).

Redistribution (RUDDER): r_k = g_k − g_{k−1} for k = 1..K. Return equivalence: the last segment
absorbs the correction T − g_K, where T is the trace's outcome ζ in g's space
(`terminal_value`): ζ itself in probability space; log ζ in log space, with a wrong trace
(ζ ≤ `log_floor`, whose log is −∞) ending at min(log log_floor, g_0, ..., g_K), so that the
segment committing to a wrong answer gets T − g_(K−1) ≤ 0 in both spaces. With
`sum_to="advantage"` Σ r_k = T − g_0, and with `sum_to="return"` the first segment also receives
g_0 and Σ r_k = T (the `terminal` column).

Cost: one forward pass over the trace (shared with segmentation), then every probe of every
boundary in packed passes on its KV cache (see `Scorer.score_continuations`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from cotcredit.encoding import Parts
from cotcredit.errors import UserError
from cotcredit.forcing import (
    ForcingOptions,
    answer_forcing,
    connector_after,
    resolved,
    solution_body,
)
from cotcredit.methods.base import MethodRows, MethodSpec, TraceContext
from cotcredit.options import check_choices, option
from cotcredit.outcome import trace_outcome


@dataclass(frozen=True)
class RredcotOptions:
    """Options of RREDCoT. `solution_part` was chosen on the development half of the lookup
    Monte Carlo study (examples/vhat_selection/): the remaining reference steps were the best
    v̂ form there. `value` is `both` (R̂ + v̂) since the re-check on the organism's development
    split (examples/vhat_selection/organism/), where it beat R̂ alone on localization and MC
    agreement in both regimes, having not hurt on the lookup development traces; a trace
    without a reference solution gets R̂ alone, with a note."""

    value: str = option(
        "both", choices=("rhat", "vhat", "both"),
        help="both: R̂ + v̂ (v̂ needs a reference solution; without one, R̂ alone); rhat: R̂ "
        "alone; vhat: v̂ alone.",
    )
    space: str = option(
        "prob", choices=("prob", "log"),
        help="prob: g_k = exp(R̂_k) + λ·exp(v̂_k), rewards are differences of probabilities; "
        "log: g_k = logsumexp(R̂_k, log λ + v̂_k), differences of log-probabilities.",
    )
    sum_to: str = option(
        "return", choices=("return", "advantage"),
        help="return: a trace's rewards sum to its outcome (the first segment also gets g_0); "
        "advantage: they sum to the outcome - g_0.",
    )
    solution_part: str = option(
        "remaining", choices=("whole", "remaining"),
        help="U* in v̂: whole: the reference solution from its first step at every state; "
        "remaining: its steps not yet covered at the state (steps = its lines, covered in "
        "proportion to the segments done).",
    )
    length_norm: bool = option(
        False, help="Per-token (geometric-mean) normalisation of log p(U*) in v̂."
    )
    vhat_weight: float = option(
        1.0, help="Weight λ of the v̂ term: g = exp(R̂) + λ·exp(v̂) (log space: logsumexp(R̂, "
        "log λ + v̂)); 0 gives R̂ alone exactly (v̂ is then not computed).",
    )
    log_floor: float = option(
        1e-6,
        help="--space log: outcomes at or below this (a wrong trace) end at log(floor), or at the "
        "trace's lowest g if lower.",
    )
    connector: str = option(
        "\n", help="String C between the prefix and the reference solution in v̂ (left out "
        "where the prefix already ends with it)."
    )
    forcing: ForcingOptions = option(default_factory=ForcingOptions, help="Answer forcing.")
    probe_mode: str = option(
        "packed", choices=("packed", "naive"),
        help="packed: all probes in packed passes on the trace's KV cache; naive: one forward "
        "per probe (for checks).",
    )

    def validate(self) -> RredcotOptions:
        check_choices(self)
        if not 0 < self.log_floor < 1:
            raise UserError(f"--log-floor must be in (0, 1), got {self.log_floor}")
        if not (self.vhat_weight >= 0 and math.isfinite(self.vhat_weight)):
            raise UserError(f"--vhat-weight must be a finite number >= 0, got {self.vhat_weight}")
        if self.value == "vhat" and self.vhat_weight == 0:
            raise UserError("--value vhat with --vhat-weight 0 leaves nothing to score")
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


def reference_steps(solution: str) -> list[str]:
    """The steps of U*: the non-empty lines of the reference solution up to its own
    final-answer statement (`solution_body`), without their line breaks."""
    return [ln.strip() for ln in solution_body(solution).splitlines() if ln.strip()]


def steps_covered(k: int, n_segments: int, n_steps: int) -> int:
    """How many reference steps the trace has covered at state s_k (k of K segments done).

    The alignment rule of `--solution-part remaining`: proportional to position,
    ⌊k·S/K⌋ of the S steps. It is 1:1 when the trace has as many segments as the solution has
    steps; otherwise a step counts as covered once the trace has gone through the same fraction
    of its segments as the step ends at in the solution. It reads no text of the trace: a
    trace that has gone wrong is asked for the reference's next steps from where it stands,
    which is what makes v̂ low there. s_0 has covered nothing, s_K everything.
    """
    return (k * n_steps) // n_segments if n_segments else 0


def remaining_solution(steps: list[str], k: int, n_segments: int) -> str:
    """U* at state s_k under `--solution-part remaining`: the steps not covered yet, one a line
    ("" once all are covered; v̂_K is then the forced answer after C)."""
    return "\n".join(steps[steps_covered(k, n_segments, len(steps)):])


def _prefix_tail(ctx: TraceContext, boundary: int) -> str:
    """The last characters of state s_k's text (the seam a probe continues from)."""
    n = ctx.prefix_len(boundary)
    return ctx.scorer.tokenizer.decode(ctx.encoded.ids[max(0, n - 4) : n])


def solution_probes(ctx: TraceContext, options: RredcotOptions) -> list[Parts]:
    """v̂'s probe C ⊕ U*_k ⊕ E ⊕ Y* after each state s_0..s_K of a trace with a solution."""
    trace = ctx.trace
    forcing = answer_forcing(ctx.scorer, options.forcing)
    steps = reference_steps(trace.solution)
    bounds = ctx.segmentation.boundaries
    probes = []
    for k, b in enumerate(bounds):
        u_text = (remaining_solution(steps, k, len(bounds) - 1)
                  if options.solution_part == "remaining" else solution_body(trace.solution))
        c = connector_after(_prefix_tail(ctx, b), options.connector)
        probes.append(forcing.solution_probe(c, u_text, trace.answer, trace.where))
    return probes


def estimate(ctx: TraceContext, options: RredcotOptions) -> BoundaryEstimates:
    """R̂_k, v̂_k and g_k at every boundary of the trace's segmentation."""
    from cotcredit.lm import Continuation

    scorer, trace = ctx.scorer, ctx.trace
    forcing = answer_forcing(scorer, options.forcing)
    # λ = 0: no v̂ probes at all, so the packed passes (and R̂) are those of R̂ alone, bit for bit.
    use_v = (options.value in ("vhat", "both") and trace.solution is not None
             and options.vhat_weight > 0)
    if options.value == "vhat" and trace.solution is None:
        raise UserError(
            f"{trace.where}: --value vhat needs a reference solution (field 'solution')"
        )
    bounds = ctx.segmentation.boundaries
    r_probe = forcing.answer_probe(trace.answer, trace.where)
    a0, _ = r_probe.span("answer")
    conts = [
        Continuation(ctx.prefix_len(b), r_probe.ids, a0, forcing.terminators or None)
        for b in bounds
    ]
    spans = []  # per boundary: (|U*| tokens, answer start - U* start)
    for b, v_probe in zip(bounds, solution_probes(ctx, options) if use_v else []):
        u0, u1 = v_probe.span("solution")
        y0, _ = v_probe.span("answer")
        spans.append((u1 - u0, y0 - u0))
        conts.append(Continuation(ctx.prefix_len(b), v_probe.ids, u0, forcing.terminators or None))
    if options.probe_mode == "packed":
        scores = scorer.score_continuations(ctx.forward, conts)
    else:
        scores = scorer.score_continuations_naive(ctx.forward.ids, conts)
    K1 = len(bounds)
    r_hat = [s.logprob for s in scores[:K1]]
    v_hat: list[float | None] = [None] * K1
    for k, (s, (nu, ny)) in enumerate(zip(scores[K1:], spans)):
        log_u = math.fsum(s.token_logprobs[:nu])  # p(U* | s_k ⊕ C)
        log_y = s.logprob - math.fsum(s.token_logprobs[:ny])  # p(Y* | ... ⊕ U* ⊕ E)
        v_hat[k] = (log_u / max(nu, 1) if options.length_norm else log_u) + log_y
    lam = options.vhat_weight
    g = []
    for rh, vh in zip(r_hat, v_hat):
        use_r = options.value != "vhat"
        use_vh = vh is not None
        if options.space == "prob":
            # Each term exponentiated once from log space; λ = 0 leaves exp(R̂) untouched.
            g.append((math.exp(rh) if use_r else 0.0) + (lam * math.exp(vh) if use_vh else 0.0))
        else:
            terms = ([rh] if use_r else []) + ([vh + math.log(lam)] if use_vh else [])
            g.append(terms[0] if len(terms) == 1 else _logaddexp(*terms))
    return BoundaryEstimates(r_hat, v_hat, g)


def terminal_value(outcome: float, g: list[float], space: str = "prob", log_floor: float = 1e-6) -> float:
    """The trace's outcome ζ in the space of g: the value the last state is corrected to.

    In probability space it is ζ itself. In log space it is log ζ; an outcome at or below
    `log_floor` (a wrong trace, ζ = 0, whose log is −∞) maps to min(log log_floor, g_0..g_K), so
    the segment that commits to a wrong answer, whose reward is terminal − g_(K−1), is never
    positive whatever the model's estimates were.
    """
    if space == "prob":
        return float(outcome)
    if outcome > log_floor:
        return math.log(outcome)
    return min(math.log(log_floor), *g)


def redistribute_rewards(
    g: list[float], terminal: float, sum_to: str = "return"
) -> tuple[list[float], float]:
    """Segment rewards from g_0..g_K: r_k = g_k − g_{k−1}, the last absorbing terminal − g_K.

    `terminal` is the outcome in g's space (`terminal_value`; ζ in probability space).
    Returns (rewards, correction). Σ rewards = terminal (return) or terminal − g_0 (advantage).
    """
    rewards = [g[k] - g[k - 1] for k in range(1, len(g))]
    correction = terminal - g[-1]
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
    terminal = terminal_value(zeta, est.g, options.space, options.log_floor)
    rewards, correction = redistribute_rewards(est.g, terminal, options.sum_to)
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
                "terminal": terminal,
                "space": options.space,
                "sum_to": options.sum_to,
            }
        )
    return {"rredcot": rows}


def reserve(scorer, trace, options: RredcotOptions) -> int:
    """Context kept free after the trace: the longest probe (C ⊕ U* ⊕ E ⊕ Y*, or E ⊕ Y*)."""
    solution = len(scorer.encode_text(trace.solution)) if trace.solution else 0
    return solution + len(scorer.encode_text(trace.answer)) + 64


SPEC = MethodSpec(
    name="rredcot",
    options_type=RredcotOptions,
    run=run,
    labels=lambda options: ["rredcot"],
    reserve=reserve,
    description="RREDCoT segment rewards from the model's own answer and solution probabilities",
    columns={"r_hat": "float64", "v_hat": "float64", "r_hat_before": "float64", "v_hat_before": "float64", "g_before": "float64", "g_after": "float64", "correction": "float64", "outcome": "float64", "terminal": "float64", "space": "string", "sum_to": "string"},
    order=0,
    command="cotcredit redistribute TRACES",
    prepare=lambda scorer, o: dataclasses.replace(o, forcing=resolved(scorer, o.forcing)),
    default_output="rredcot.parquet",
)
