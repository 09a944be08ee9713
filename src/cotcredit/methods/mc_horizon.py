"""Truncated rollouts with a forced-answer bootstrap (`mc-baseline --horizon N` and
`--horizon-lines L`): Monte Carlo that looks only N tokens (or L lines) ahead.

A rollout from state s_k generates at most N tokens (or stops after its L-th line break). One
that ends before (a stop token) is graded 0/1 as in plain Monte Carlo. One that is cut there is
valued by the model's own probability of the right answer after it, as R̂ values a state:

    x = p(Y* | s_k ⊕ c ⊕ E)      c: the rollout's tokens; E the exit string (on a line of its own
                                   after a rollout cut mid-line, unless E starts with whitespace)
    V_k = mean of the rollouts' x (1/0 for the rollouts that ended)

It is an n-step return: N = 0 generates nothing and every rollout's x is R̂_k = p(Y* | s_k ⊕ E)
(RREDCoT's R̂ in probability space, the same probe on the same pass); N at least every rollout's
length grades every rollout, and V_k is plain Monte Carlo's (same seed, same rollouts: rollout j
is the first N tokens of plain Monte Carlo's rollout j). In between, the forced answer stands in
for what the rollout would have found later.

Cost: the generated tokens (at most N per rollout) and one forward over each distinct cut rollout
with its probe E ⊕ Y* (packed on the trace's forward pass, which the run therefore reads).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from cotcredit.lm.passes import Continuation

if TYPE_CHECKING:
    from cotcredit.lm.encoding import ForcingOptions
    from cotcredit.lm.generation import Completion
    from cotcredit.methods import TraceContext


def generation_limits(horizon: int | None, horizon_lines: int | None, max_new_tokens: int
                      ) -> tuple[int, int | None]:
    """(max new tokens, line breaks to stop after) of a rollout under the horizon."""
    tokens = max_new_tokens if horizon is None else min(horizon, max_new_tokens)
    return tokens, horizon_lines


def cut_by_horizon(c: Completion, horizon: int | None, max_new_tokens: int) -> bool:
    """Whether a completion stopped at the horizon (not at a stop token, and not at a
    `max_new_tokens` the horizon does not set, which is an ordinary cut-off rollout)."""
    if c.finish_reason == "lines":
        return True
    return c.finish_reason == "length" and horizon is not None and horizon < max_new_tokens


def forced_values(ctx: TraceContext, forcing: ForcingOptions,
                  cut: list[tuple[int, list[int], str]]) -> list[float]:
    """p(Y* | s_k ⊕ c ⊕ E) of each cut rollout (boundary token b_k, its token ids, its text);
    identical rollouts from one state are scored once."""
    trace = ctx.trace
    run = ctx.forcing(forcing)
    lead_free = run.exit_string[:1].isspace()
    terminators = run.terminators or None
    index: dict[tuple[int, tuple[int, ...]], int] = {}
    conts: list[Continuation] = []
    which = []
    for b, ids, text in cut:
        key = (b, tuple(ids))
        if key not in index:
            lead = "" if lead_free or not text or text.endswith("\n") else "\n"
            probe = run.answer_probe(trace.answer, trace.where, lead=lead)
            a0, _ = probe.span("answer")
            index[key] = len(conts)
            conts.append(Continuation(ctx.prefix_len(b), list(ids) + probe.ids, len(ids) + a0,
                                      terminators))
        which.append(index[key])
    scores = ctx.scorer.score_continuations(ctx.forward, conts) if conts else []
    return [math.exp(scores[i].logprob) for i in which]
