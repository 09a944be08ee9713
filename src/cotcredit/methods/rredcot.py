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

One path among many (`rredcot_paths`). With `references` solutions/siblings a trace has several
known paths; `solution_part` matched/suffixes decides from the text which part of each remains
after s_k; v̂_k is then over the DISTINCT remaining parts U_j, `mixture="sum"`: log Σ_j
p(U_j | s_k ⊕ C)·p(Y* | s_k ⊕ C ⊕ U_j ⊕ E) (the probability of finishing along any of them; all
probes in the same packed passes). A part that is empty (nothing of a reference left) is R̂'s
own probe again: `empty_part="drop"` counts that path once, so that with disjoint paths g_k is
a probability; `combination` noisy-or/mean combine R̂ and v̂ without exceeding 1 (`combined`).
The defaults follow every known path (`references="siblings"`, `solution_part="matched"`,
`empty_part="drop"`, chosen on the benchmark's regimes; see `RredcotOptions`); the estimator
above is `references="solution"`, `solution_part="remaining"`, `empty_part="keep"`.

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
from collections.abc import Sequence
from dataclasses import dataclass, field

from cotcredit.data.outcome import trace_outcome
from cotcredit.errors import UserError
from cotcredit.lm.encoding import Parts
from cotcredit.lm.forcing import (
    ForcingOptions,
    answer_forcing,
    connector_after,
    resolved,
)
from cotcredit.lm.passes import Continuation, ContinuationScore
from cotcredit.methods.base import MethodCommand, MethodRows, MethodSpec, TraceContext
from cotcredit.methods.rredcot_paths import (
    ALIGNMENTS,
    NO_SIBLINGS_NOTE,
    REFERENCES,
    distinct_references,
    file_siblings,
    paths_after,
    reference_steps,
    reference_texts,
    remaining_solution,
    state_lines,
    steps_covered,
)
from cotcredit.options import check_choices, option

__all__ = [
    "REDISTRIBUTE", "SPEC", "BoundaryEstimates", "RredcotOptions", "RredcotProbes",
    "build_probes", "combine", "combined", "estimate", "redistribute_rewards", "reference_steps",
    "remaining_solution", "run", "solution_probes", "steps_covered", "terminal_value",
    "trace_references",
]


@dataclass(frozen=True)
class RredcotOptions:
    """Options of RREDCoT. `value` is `both` (R̂ + v̂) since the re-check on the organism's development
    split (studies/vhat_selection/organism/), where it beat R̂ alone on localization and MC
    agreement in both regimes, having not hurt on the lookup development traces; a trace
    without a reference solution gets R̂ alone, with a note.

    The value options for a reference that is one path of many (`references`, `solution_part`,
    `mixture`, `empty_part`, `combination`; `rredcot_paths`) default to the variant a comparison
    on the benchmark's regimes chose by a rule fixed before its runs (studies/value/):
    `references="siblings"` (the trace's `solution`, its `solutions` list, then the other
    right-answer responses to the same problem, at most `max_references`; a trace with no file
    to read them from follows its listed solutions alone), `solution_part="matched"` (the steps
    after the last reference step the state has written) and `empty_part="drop"` (the last
    boundary counts the answer once). On the held-out `multipath` split it blamed validly
    departing correct traces 0.32 of the time against 0.83 for the earlier default, with no loss
    on `unique`; docs/methods/rredcot.md, "One path among many". The earlier estimator (one
    reference, steps covered by position, empty part kept; `remaining` had beaten `whole` on the
    development half of the lookup Monte Carlo study, studies/vhat_selection/) is
    `references="solution"`, `solution_part="remaining"`, `empty_part="keep"`."""

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
        "matched", choices=ALIGNMENTS,
        help="Which part of each reference v̂ scores after a state: whole: all of it; "
        "remaining: the steps not covered by position (⌊k·S/K⌋ of S); matched: the steps "
        "after the last one the state has written; suffixes: every suffix, summed.",
    )
    references: str = option(
        "siblings", choices=REFERENCES,
        help="The known paths of v̂: solution: the trace's reference solution; solutions: "
        "also its 'solutions' field (a list); siblings: also the other right-answer responses "
        "to the same problem (same 'problem_id', else prompt, in the input file; traces not "
        "read from a file: the listed ones alone, with a note).",
    )
    max_references: int = option(8, help="At most this many distinct references per trace.")
    mixture: str = option(
        "sum", choices=("sum", "mean", "max"),
        help="v̂ over several references: sum: the probability of continuing along any of the "
        "distinct paths (each counted once); mean: their average; max: the likeliest.",
    )
    empty_part: str = option(
        "drop", choices=("drop", "keep"),
        help="A reference with nothing left after a state: drop: no v̂ term (its path is R̂'s, "
        "counted once); keep: the forced answer alone, as R̂ again.",
    )
    combination: str = option(
        "sum", choices=("sum", "noisy-or", "mean"),
        help="g from a = exp(R̂) and b = λ·exp(v̂): sum: a + b; noisy-or: 1 - (1 - a)(1 - b); "
        "mean: (a + b) / (1 + λ).",
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
        """Check the options (a one-line UserError naming the flag); returns self."""
        check_choices(self)
        if not 0 < self.log_floor < 1:
            raise UserError(f"--log-floor must be in (0, 1), got {self.log_floor}")
        if not (self.vhat_weight >= 0 and math.isfinite(self.vhat_weight)):
            raise UserError(f"--vhat-weight must be a finite number >= 0, got {self.vhat_weight}")
        if self.value == "vhat" and self.vhat_weight == 0:
            raise UserError("--value vhat with --vhat-weight 0 leaves nothing to score")
        if self.max_references < 1:
            raise UserError(f"--max-references must be at least 1, got {self.max_references}")
        if self.combination == "noisy-or" and self.vhat_weight > 1:
            raise UserError("--combination noisy-or needs --vhat-weight at most 1 (λ·exp(v̂) is "
                            f"a probability), got {self.vhat_weight}")
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


def _prefix_tail(ctx: TraceContext, boundary: int) -> str:
    """The last characters of state s_k's text (the seam a probe continues from)."""
    n = ctx.prefix_len(boundary)
    return ctx.scorer.tokenizer.decode(ctx.encoded.ids[max(0, n - 4) : n])


def trace_references(scorer, trace, options: RredcotOptions,
                     notes: list[str] | None = None) -> list[list[str]]:
    """The steps of each distinct reference of a trace (`--references`; siblings from the
    file the trace was read from), at most `max_references`. A trace without such a file
    follows its listed solutions alone; `NO_SIBLINGS_NOTE` is then added to `notes`."""
    siblings: Sequence[str] = ()
    if options.references == "siblings":
        found = file_siblings(scorer, trace)
        if found is None and notes is not None and NO_SIBLINGS_NOTE not in notes:
            notes.append(NO_SIBLINGS_NOTE)
        siblings = found or ()
    return distinct_references(reference_texts(trace, options.references, siblings),
                               options.max_references)


def _state_ends(ctx: TraceContext) -> list[int]:
    """Where each state's reasoning ends in the response (characters; s_0: 0)."""
    return [0] + [s.char_end for s in ctx.segmentation.segments]


def solution_probes(ctx: TraceContext, options: RredcotOptions) -> list[Parts]:
    """v̂'s probe C ⊕ U*_k ⊕ E ⊕ Y* after each state s_0..s_K for the trace's own solution
    alone, one per state (the first part `solution_part` gives, an empty one kept): what v̂ is
    with `--references solution --empty-part keep` and one part per state."""
    trace = ctx.trace
    forcing = answer_forcing(ctx.scorer, options.forcing)
    steps = reference_steps(trace.solution)
    bounds = ctx.segmentation.boundaries
    probes = []
    for k, (b, end) in enumerate(zip(bounds, _state_ends(ctx), strict=True)):
        texts, _ = paths_after([steps], state_lines(trace.response, end), k, len(bounds) - 1,
                               options.solution_part, keep_empty=True)
        c = connector_after(_prefix_tail(ctx, b), options.connector)
        probes.append(forcing.solution_probe(c, texts[0], trace.answer, trace.where))
    return probes


@dataclass
class RredcotProbes:
    """The probes of one trace: `continuations` holds the R̂ probe E ⊕ Y* after every state
    s_0..s_K, then (when v̂ is computed) the v̂ probes C ⊕ U ⊕ E ⊕ Y*, one per distinct path U
    after each state; `solution_spans[i]` = (|U| in tokens, tokens from U's start to Y*'s) of
    v̂ probe i; `paths[k][j]`: the v̂ probes (indices among them) of reference j after s_k
    (empty when nothing of it is left). No references: `paths` is empty (R̂ alone)."""

    continuations: list[Continuation]
    n_states: int  # K + 1
    solution_spans: list[tuple[int, int]] = field(default_factory=list)
    paths: list[list[list[int]]] = field(default_factory=list)


def build_probes(ctx: TraceContext, options: RredcotOptions,
                 references: Sequence[str | None] | None = None) -> RredcotProbes:
    """Every probe RREDCoT scores on a trace (`RredcotProbes`): R̂'s at each boundary and, with
    v̂ (value vhat or both, a reference, λ > 0), one per distinct path after each state.
    `references`: the reference texts (default: `--references` of the trace); duplicates are
    counted once. Reads the trace's tokens and segmentation, not its forward pass: the probes of
    many traces can be scored together."""
    trace = ctx.trace
    forcing = answer_forcing(ctx.scorer, options.forcing)
    # λ = 0: no v̂ probes at all, so the packed passes (and R̂) are those of R̂ alone, bit for bit.
    wants_v = options.value in ("vhat", "both") and options.vhat_weight > 0
    refs: list[list[str]] = []
    if wants_v:
        refs = (trace_references(ctx.scorer, trace, options, ctx.notes) if references is None
                else distinct_references(references, options.max_references))
    if options.value == "vhat" and not refs:
        raise UserError(
            f"{trace.where}: --value vhat needs a reference solution (field 'solution')"
        )
    bounds = ctx.segmentation.boundaries
    r_probe = forcing.answer_probe(trace.answer, trace.where)
    a0, _ = r_probe.span("answer")
    terminators = forcing.terminators or None
    conts = [Continuation(ctx.prefix_len(b), r_probe.ids, a0, terminators) for b in bounds]
    spans: list[tuple[int, int]] = []
    paths: list[list[list[int]]] = []
    for k, (b, end) in enumerate(zip(bounds, _state_ends(ctx), strict=True) if refs else ()):
        # v̂ alone keeps an empty part: without R̂, that path is counted nowhere else.
        texts, owned = paths_after(refs, state_lines(trace.response, end), k, len(bounds) - 1,
                                   options.solution_part,
                                   options.empty_part == "keep" or options.value == "vhat")
        c = connector_after(_prefix_tail(ctx, b), options.connector)
        first = len(spans)
        for text in texts:
            v_probe = forcing.solution_probe(c, text, trace.answer, trace.where)
            u0, u1 = v_probe.span("solution")
            y0, _ = v_probe.span("answer")
            spans.append((u1 - u0, y0 - u0))
            conts.append(Continuation(ctx.prefix_len(b), v_probe.ids, u0, terminators))
        paths.append([[first + i for i in mine] for mine in owned])
    return RredcotProbes(conts, len(bounds), spans, paths)


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


def combined(r_hat: float | None, v_hat: float | None, options: RredcotOptions) -> float:
    """g from R̂ and v̂ (logs; None: the term is absent): with a = exp(R̂), b = λ·exp(v̂),
    `combination` sum a + b, noisy-or 1 − (1 − a)(1 − b), mean (a + b)/(1 + λ) (a alone where
    v̂ has no path left: two estimates of one probability averaged); its log in log space. Every term is computed from its log once (λ = 0 leaves exp(R̂) untouched)."""
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


def combine(probes: RredcotProbes, scores: list[ContinuationScore], options: RredcotOptions
            ) -> BoundaryEstimates:
    """R̂_k, v̂_k and g_k at every state from the scores of `probes.continuations` (in order):
    R̂_k = log p(Y* | s_k ⊕ E); per path U after s_k, log p(U | s_k ⊕ C) (divided by |U| with
    `length_norm`) + log p(Y* | s_k ⊕ C ⊕ U ⊕ E); per reference the log of the sum over its
    paths; v̂_k their `mixture` (sum over the distinct paths, mean or max over references; −inf
    when no reference has anything left); g_k from the terms `value` picks (`combined`)."""
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


def estimate(ctx: TraceContext, options: RredcotOptions,
             references: Sequence[str | None] | None = None) -> BoundaryEstimates:
    """R̂_k, v̂_k and g_k at every boundary of one trace: `build_probes`, score them on the
    trace's forward pass (packed, or one forward each with `probe_mode="naive"`), `combine`."""
    probes = build_probes(ctx, options, references)
    if options.probe_mode == "packed":
        scores = ctx.scorer.score_continuations(ctx.forward, probes.continuations)
    else:
        scores = ctx.scorer.score_continuations_naive(ctx.forward.ids, probes.continuations)
    return combine(probes, scores, options)


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
    est = estimate(ctx, options)
    if options.value == "both" and options.vhat_weight > 0 and est.v_hat[0] is None:
        ctx.notes.append("traces without a reference solution use R̂ alone (v̂ needs one)")
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


def reserve(scorer, trace, options: RredcotOptions,
            references: Sequence[str | None] | None = None) -> int:
    """Context kept free after the trace: the longest probe (C ⊕ U ⊕ E ⊕ Y* over its
    references, or E ⊕ Y*); `references` as in `build_probes`."""
    if options.value == "rhat" or options.vhat_weight == 0:
        refs: list[list[str]] = []
    elif references is None:
        refs = trace_references(scorer, trace, options)
    else:
        refs = distinct_references(references, options.max_references)
    solution = max((len(scorer.encode_text("\n".join(steps))) for steps in refs), default=0)
    return solution + len(scorer.encode_text(trace.answer)) + 64


REDISTRIBUTE = MethodCommand(
    name="redistribute",
    help="""RREDCoT: redistribute each trace's outcome over its reasoning segments.

At every boundary k the model gives R̂_k = log p(Y* | s_k + E) and, with a reference solution
U*, v̂_k = log p(U* | s_k + C) + log p(Y* | s_k + C + U* + E). Both are computed in log space;
by default they are combined as probabilities, g_k = exp(R̂_k) + exp(v̂_k), and the reward of
segment k is r_k = g_k - g_(k-1); the last segment absorbs the outcome - g_K so rewards sum
to the outcome.""",
    default_output="rredcot.parquet",
    show="rewards",
)

SPEC = MethodSpec(
    name="rredcot",
    options_type=RredcotOptions,
    run=run,
    labels=lambda options: ["rredcot"],
    reserve=reserve,
    description="RREDCoT segment rewards from the model's own answer and solution probabilities",
    columns={"r_hat": "float64", "v_hat": "float64", "r_hat_before": "float64", "v_hat_before": "float64", "g_before": "float64", "g_after": "float64", "correction": "float64", "outcome": "float64", "terminal": "float64", "space": "string", "sum_to": "string"},
    order=0,
    command=REDISTRIBUTE,
    prepare=lambda scorer, o: dataclasses.replace(o, forcing=resolved(scorer, o.forcing)),
    show=("r_hat", "v_hat", "g_after", "score"),
    value_columns=("g_before", "g_after"),
)
