"""RREDCoT: segment-level reward redistribution (Ielanskyi et al., arXiv 2606.06475).

At every state s_k (the prompt and the first k reasoning segments), from the model itself:

    R̂_k = log p(Y* | s_k ⊕ E)                              answer now (E: the exit string)
    v̂_k = log Σ_U p(U | s_k ⊕ C) · p(Y* | s_k ⊕ C ⊕ U ⊕ E)   continue along a known path U
    g_k = exp(R̂_k) + λ·exp(v̂_k),   r_k = g_k − g_(k−1)

U runs over the distinct parts of the trace's references that remain after s_k. The last
segment also gets T − g_K, where T is the outcome ζ in g's space (`terminal_value`), so a
trace's rewards sum to its outcome (return equivalence; with `sum_to="advantage"` to T − g_0).
Every term is computed in log space and exponentiated once.

Read top to bottom: `run` (one trace's rows), `estimate` (R̂, v̂ and g at every state from the
probes' scores: `combine`), the rewards, the references a trace follows, the options, the
command and `SPEC`. The probes and the known paths are in `probes`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cotcredit.data.trace import Trace, trace_outcome
from cotcredit.errors import UserError
from cotcredit.lm.encoding import ForcingOptions, resolved
from cotcredit.lm.passes import ContinuationScore
from cotcredit.methods import (
    MethodCommand,
    MethodRows,
    MethodSpec,
    TraceContext,
    reference_room,
)
from cotcredit.methods.rredcot.probes import (
    ALIGNMENTS,
    REFERENCES,
    RredcotProbes,
    build_probes,
    distinct_references,
    known_paths,
    reference_steps,
    remaining_solution,
    steps_covered,
    wants_vhat,
)
from cotcredit.options import check_choices, option

__all__ = [
    "REDISTRIBUTE", "SPEC", "BoundaryEstimates", "RredcotOptions", "RredcotProbes",
    "build_probes", "combine", "combined", "estimate", "redistribute_rewards", "reference_steps",
    "remaining_solution", "reserve", "run", "steps_covered", "terminal_value",
    "trace_references",
]


def run(ctx: TraceContext, options: RredcotOptions) -> MethodRows:
    """RREDCoT rows for one trace: score = r_k; R̂, v̂, g before/after as columns."""
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


def estimate(ctx: TraceContext, options: RredcotOptions,
             references: Sequence[str | None] | None = None) -> BoundaryEstimates:
    """R̂_k, v̂_k and g_k at every boundary of one trace (probes scored on its forward pass)."""
    probes = build_probes(ctx, options, references)
    if options.probe_mode == "packed":
        scores = ctx.scorer.score_continuations(ctx.forward, probes.continuations)
    else:
        scores = ctx.scorer.score_continuations_naive(ctx.forward.ids, probes.continuations)
    return combine(probes, scores, options)


# ---- the estimate and the rewards ------------------------------------------------------------
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


# ---- the references, the options, the command ------------------------------------------------
def trace_references(trace: Trace, options: RredcotOptions,
                     siblings: Sequence[str] | None = None,
                     notes: list[str] | None = None) -> list[list[str]]:
    """The steps of each distinct reference v̂ follows on `trace` (`probes.known_paths`);
    `siblings`: the other right-answer responses to its problem (None: not known)."""
    return known_paths(trace, options.references, options.max_references, siblings, notes)


def reserve(scorer, trace: Trace, options: RredcotOptions,
            references: Sequence[str | None] | None = None) -> int:
    """Context kept free after the trace for its longest probe (C ⊕ U ⊕ E ⊕ Y*, or E ⊕ Y*)."""
    refs: list[list[str]] = []
    if wants_vhat(options):
        refs = (trace_references(trace, options) if references is None
                else distinct_references(references, options.max_references))
    return reference_room(scorer, refs) + _answer_room(scorer, trace)


def _answer_room(scorer, trace: Trace) -> int:
    """Context an R̂ probe needs after the trace: Y* and room for E and the connector."""
    return len(scorer.encode_text(trace.answer)) + 64


@dataclass(frozen=True)
class RredcotOptions:
    """Options of RREDCoT. The defaults, and the studies that chose them:
    docs/methods/rredcot.md. The earlier one-reference estimator is `references="solution"`,
    `solution_part="remaining"`, `empty_part="keep"`."""

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
        "also its 'solutions' list; siblings: also the right-answer responses to the same "
        "problem in the input (same 'problem_id', else prompt).",
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


#: The page of `cotcredit redistribute` in the docs (made from the registry).
PAGE = """RREDCoT segment rewards: at every segment boundary, the model's probability of the
reference answer if forced to answer now (R̂) and of continuing along a known path to the answer
(v̂: the part of each reference solution, listed or a right-answer sibling in the input, that
remains after the boundary, then the answer); the rewards are the differences of their sum and
add up to the trace's outcome. What it estimates, the formula and when to trust it:
[RREDCoT](../methods/rredcot.md).

```
cotcredit redistribute traces.jsonl                              # -> rredcot.parquet
cotcredit redistribute traces.jsonl --segments-file segments.parquet
cotcredit redistribute traces.jsonl -k lines                     # one segment per reasoning line
cotcredit redistribute traces.jsonl --value rhat --label rredcot-rhat -o rredcot-rhat.parquet
```

Segments as [`cotcredit segment`](segment.md) makes them (same options), or the ones a
`--segments-file` holds. Traces without a reference solution use R̂ alone and the run says so
once.

## Output

With `--sum-to return` (default) the first segment also receives g_0,
so a trace's rewards sum to ζ; with `--sum-to advantage` they sum to ζ − g_0. Columns: `score`
(= r_k), `r_hat`, `v_hat` (at the end of the segment), `r_hat_before`, `v_hat_before`,
`g_before`, `g_after`, `correction` (non-zero on the last segment only), `outcome`, `terminal`
(the outcome in g's space), `space`, `sum_to`.
`--label NAME` writes the rows under another method name, for variants side by side
(`--value rhat --label rredcot-rhat`).

Besides the columns every table has ([Outputs](../guides/outputs.md)).
"""

REDISTRIBUTE = MethodCommand(
    name="redistribute",
    help="""RREDCoT: redistribute each trace's outcome over its reasoning segments.

At every boundary k the model gives R̂_k, its probability of the reference answer if it answers
now, and v̂_k, its probability of continuing along a known path (what remains of the trace's
solution, its 'solutions' list and right-answer siblings in the input) and then stating the
answer. g_k = exp(R̂_k) + exp(v̂_k); segment k's reward is g_k - g_(k-1), and the last segment
absorbs the outcome - g_K, so rewards sum to the outcome.""",
    default_output="rredcot.parquet",
    show="rewards",
    page=PAGE,
)

SPEC = MethodSpec(
    name="rredcot",
    options_type=RredcotOptions,
    run=run,
    labels=lambda options: ["rredcot"],
    references=lambda trace, siblings, o, notes: (
        trace_references(trace, o, siblings, notes) if wants_vhat(o) else []),
    reads_siblings=lambda o: wants_vhat(o) and o.references == "siblings",
    reserve=lambda scorer, trace, o: _answer_room(scorer, trace),
    description="RREDCoT segment rewards from the model's own answer and solution probabilities",
    columns={"r_hat": "float64", "v_hat": "float64", "r_hat_before": "float64",
             "v_hat_before": "float64", "g_before": "float64", "g_after": "float64",
             "correction": "float64", "outcome": "float64", "terminal": "float64",
             "space": "string", "sum_to": "string"},
    order=0,
    command=REDISTRIBUTE,
    prepare=lambda scorer, o: dataclasses.replace(o, forcing=resolved(scorer, o.forcing)),
    show=("r_hat", "v_hat", "g_after", "score"),
    value_columns=("g_before", "g_after"),
)
