"""A value head distilled from Monte Carlo: V̂_k from the policy's hidden state at each boundary.

A small head (logistic regression or a one-hidden-layer MLP; `value_head_fit`) was fitted to
Monte Carlo values V_k of some traces (or, the cheap control, to their outcomes), cross-fitted
by problem. Scoring a trace takes one forward pass:

    z_k  = the hidden state of the last token of s_k (prompt + reasoning[:b_k]) at the head's layer
    V̂_k  = σ(head(z_k))              by the model fitted without the trace's problem
    credit_k = V̂_k − V̂_(k−1)        (segment k = 1..K)  ⇒  Σ_k credit_k = V̂_K − V̂_0

Cost: the forward pass, plus the head's share of what fitting it spent (the Monte Carlo of its
fitting traces and their passes, divided by the traces it is meant to score; recorded in the
head file and added to every trace's cost).

    from cotcredit.methods.value_head_fit import HeadSpec, fit_value_head
    fit_value_head("traces.jsonl", "mc.parquet", scorer, "head.pt", spec=HeadSpec("linear"))
    cotcredit compare traces.jsonl --methods value-head --set value-head.head=head.pt ...
"""

from __future__ import annotations

from dataclasses import dataclass

from cotcredit.data.trace import problem_key
from cotcredit.errors import UserError
from cotcredit.methods import MethodRows, MethodSpec, TraceContext
from cotcredit.methods.value_head_fit import FittedHead, boundary_features, load_head
from cotcredit.options import option


@dataclass(frozen=True)
class ValueHeadOptions:
    """Options of the value head."""

    head: str | None = option(
        None, help="The fitted head (a file of cotcredit.methods.value_head_fit.fit_value_head).",
    )

    def validate(self) -> ValueHeadOptions:
        if not self.head:
            raise UserError("value-head needs a fitted head: --set value-head.head=FILE (fit one "
                            "with cotcredit.methods.value_head_fit.fit_value_head)")
        load_head(self.head)
        return self


def run(ctx: TraceContext, options: ValueHeadOptions) -> MethodRows:
    """Value-head rows for one trace: score = V̂_k − V̂_(k−1), with V̂ before/after."""
    head: FittedHead = ctx.cache.get("value-head", options.head, lambda: load_head(options.head))
    bounds = ctx.segmentation.boundaries
    x = boundary_features(ctx.scorer, ctx.encoded, bounds, head.spec.layer)
    problem = problem_key(ctx.trace)
    model, _ = head.model_for(problem)
    v = head.values(problem, x)
    for column, tokens in head.amortized.items():
        ctx.extra_cost[column] = ctx.extra_cost.get(column, 0) + round(tokens)
    rows = [{"score": v[k + 1] - v[k], "value_before": v[k], "value_after": v[k + 1],
             "head_model": model} for k in range(len(bounds) - 1)]
    return {"value-head": rows}


def prepare(scorer, options: ValueHeadOptions) -> ValueHeadOptions:
    """Check the head file once, before the first trace."""
    return options.validate()


SPEC = MethodSpec(
    name="value-head",
    options_type=ValueHeadOptions,
    run=run,
    labels=lambda options: ["value-head"],
    description="A value head on the policy's hidden states, fitted to Monte Carlo values "
    "(cross-fitted by problem); credit V̂_k − V̂_(k−1) from one forward pass",
    columns={"value_before": "float64", "value_after": "float64", "head_model": "string"},
    order=5,
    prepare=prepare,
    runs_with_defaults=False,  # it needs its head file
    uses_trace_pass=False,  # its own pass, which keeps the hidden states it reads
    show=("value_before", "value_after", "score"),
    value_columns=("value_before", "value_after"),
)
