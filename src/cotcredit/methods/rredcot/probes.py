"""What RREDCoT asks the model after each state s_k: E ⊕ Y* for R̂, and C ⊕ U ⊕ E ⊕ Y* per
distinct remaining path U for v̂. All are continuations of prefixes of one sequence, so they are
scored in packed passes on the trace's KV cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cotcredit.errors import UserError
from cotcredit.lm.encoding import connector_after
from cotcredit.lm.passes import Continuation
from cotcredit.methods import TraceContext
from cotcredit.methods.rredcot.paths import (
    distinct_references,
    known_paths,
    paths_after,
    state_lines,
)

if TYPE_CHECKING:
    from cotcredit.methods.rredcot import RredcotOptions


@dataclass
class RredcotProbes:
    """The probes of one trace: the R̂ probe after each state s_0..s_K, then the v̂ probes.
    `solution_spans[i]`: (|U| in tokens, tokens from U's start to Y*'s) of v̂ probe i;
    `paths[k][j]`: indices of reference j's v̂ probes after s_k (empty `paths`: R̂ alone)."""

    continuations: list[Continuation]
    n_states: int  # K + 1
    solution_spans: list[tuple[int, int]] = field(default_factory=list)
    paths: list[list[list[int]]] = field(default_factory=list)


def wants_vhat(options: RredcotOptions) -> bool:
    """Whether v̂ is computed (λ = 0: no v̂ probe, so R̂ is that of R̂ alone bit for bit)."""
    return options.value in ("vhat", "both") and options.vhat_weight > 0


def build_probes(ctx: TraceContext, options: RredcotOptions,
                 references: Sequence[str | None] | None = None) -> RredcotProbes:
    """Every probe RREDCoT scores on a trace. References: `references` (texts) when given, else
    `ctx.references`, else the trace's listed solutions. Needs no forward pass, so the probes
    of many traces can be scored together."""
    trace = ctx.trace
    forcing = ctx.forcing(options.forcing)
    refs: list[list[str]] = []
    if wants_vhat(options):
        if references is not None:
            refs = distinct_references(references, options.max_references)
        elif ctx.references is not None:
            refs = ctx.references
        else:
            refs = known_paths(trace, options.references, options.max_references,
                               ctx.siblings, ctx.notes)
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
    ends = [0] + [s.char_end for s in ctx.segmentation.segments]  # each state's end (chars)
    for k, (b, end) in enumerate(zip(bounds, ends, strict=True) if refs else ()):
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


def _prefix_tail(ctx: TraceContext, boundary: int) -> str:
    """The last characters of state s_k's text (the seam a probe continues from)."""
    n = ctx.prefix_len(boundary)
    return ctx.scorer.tokenizer.decode(ctx.encoded.ids[max(0, n - 4) : n])
