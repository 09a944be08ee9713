"""RREDCoT: segment-level reward redistribution (Ielanskyi et al., arXiv 2606.06475).

At every state s_k (the prompt and the first k reasoning segments) the model being analysed gives
two forward-only estimates, in log space: R̂_k = log p(Y* | s_k ⊕ E), the probability of the
reference answer Y* if it answers now (E: the answer-forcing exit string), and v̂_k, the
probability of continuing along a known path to the answer and then stating it: log Σ_U
p(U | s_k ⊕ C) · p(Y* | s_k ⊕ C ⊕ U ⊕ E) over the distinct parts U of the trace's reference
solutions that remain after s_k. They combine into g_k = exp(R̂_k) + λ·exp(v̂_k), and segment k
gets r_k = g_k − g_(k−1), the last one also the outcome − g_K, so a trace's rewards sum to its
outcome (RUDDER's return equivalence).

The package reads top to bottom: this file is the method (`run` and `estimate`, its options, its
command and `SPEC`); `rewards` turns the probes' scores into R̂, v̂, g and the rewards; `probes`
builds what the model is asked after each state; `paths` says which references a trace has and
which part of each remains after a state. A trace's references are resolved once, before it is
encoded (`SPEC.references`), from its own fields and the siblings the run's input stage found,
and reach `run` on its context.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from cotcredit.data.outcome import trace_outcome
from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm.forcing import ForcingOptions, resolved
from cotcredit.methods.base import (
    MethodCommand,
    MethodRows,
    MethodSpec,
    TraceContext,
    reference_room,
)
from cotcredit.methods.rredcot.paths import (
    ALIGNMENTS,
    REFERENCES,
    distinct_references,
    known_paths,
    reference_steps,
    remaining_solution,
    steps_covered,
)
from cotcredit.methods.rredcot.probes import RredcotProbes, build_probes, wants_vhat
from cotcredit.methods.rredcot.rewards import (
    BoundaryEstimates,
    combine,
    combined,
    redistribute_rewards,
    terminal_value,
)
from cotcredit.options import check_choices, option

__all__ = [
    "REDISTRIBUTE", "SPEC", "BoundaryEstimates", "RredcotOptions", "RredcotProbes",
    "build_probes", "combine", "combined", "estimate", "redistribute_rewards", "reference_steps",
    "remaining_solution", "reserve", "run", "steps_covered", "terminal_value",
    "trace_references",
]


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


def trace_references(trace: Trace, options: RredcotOptions,
                     siblings: Sequence[str] | None = None,
                     notes: list[str] | None = None) -> list[list[str]]:
    """The steps of each distinct reference v̂ follows on `trace` under `--references` and
    `--max-references` (`paths.known_paths`): its solution, its `solutions` field, then
    `siblings` (the other right-answer responses to its problem; None: not known)."""
    return known_paths(trace, options.references, options.max_references, siblings, notes)


def reserve(scorer, trace: Trace, options: RredcotOptions,
            references: Sequence[str | None] | None = None) -> int:
    """Context kept free after the trace: the longest probe, C ⊕ U ⊕ E ⊕ Y* over the
    references (texts; None: the trace's listed solutions), or E ⊕ Y*."""
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
    """Options of RREDCoT. `value` is `both` (R̂ + v̂) since the re-check on the organism's
    development split (studies/vhat_selection/organism/), where it beat R̂ alone on localization
    and MC agreement in both regimes, having not hurt on the lookup development traces; a trace
    without a reference solution gets R̂ alone, with a note.

    The value options for a reference that is one path of many (`references`, `solution_part`,
    `mixture`, `empty_part`, `combination`; `paths`) default to the variant a comparison
    on the benchmark's regimes chose by a rule fixed before its runs (studies/value/):
    `references="siblings"` (the trace's `solution`, its `solutions` list, then the other
    right-answer responses to the same problem, at most `max_references`; a trace given in a
    list, with no input to find them in, follows its listed solutions alone),
    `solution_part="matched"` (the steps after the last reference step the state has written)
    and `empty_part="drop"` (the last boundary counts the answer once). On the held-out `multipath` split it blamed validly
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
        "to the same problem (same 'problem_id', else prompt, in the run's input; traces given "
        "as a list: the listed ones alone, with a note).",
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

At every boundary k the model gives R̂_k = log p(Y* | s_k + E), the probability of the reference
answer if it answers now, and v̂_k, the probability of continuing along a known path to the
answer and stating it: log of the sum over the distinct parts U of the trace's references that
remain after s_k of p(U | s_k + C) p(Y* | s_k + C + U + E). The references are its solution,
its 'solutions' list and the other right-answer responses to the same problem in the input
(--references); the part that remains is matched by content (--solution-part). By default
g_k = exp(R̂_k) + exp(v̂_k), segment k's reward is r_k = g_k - g_(k-1), and the last segment
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
