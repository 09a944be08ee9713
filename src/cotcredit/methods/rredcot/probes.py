"""What RREDCoT asks the model after each state s_k, and the known paths its v̂ follows.

The probes: E ⊕ Y* for R̂, and C ⊕ U ⊕ E ⊕ Y* per distinct remaining path U for v̂. All are
continuations of prefixes of one sequence, so they are scored in packed passes on the trace's
KV cache.

The known paths: which references a trace has (`--references`) and which part of each remains
after a state (`--solution-part`). Σ_j p(U_j | s_k ⊕ C) · p(Y* | s_k ⊕ C ⊕ U_j ⊕ E), scored
exactly over DISTINCT continuations U_j, is the part of the state's value that runs along those
paths: distinct token sequences are disjoint events, so the sum is a probability, and a lower
bound that grows as paths are added. An empty remaining part is R̂'s own path, so `paths_after`
leaves it out unless asked to keep it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm.encoding import connector_after, solution_body
from cotcredit.lm.passes import Continuation
from cotcredit.methods import TraceContext

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


# ---- the known paths -------------------------------------------------------------------------
REFERENCES = ("solution", "solutions", "siblings")
ALIGNMENTS = ("whole", "remaining", "matched", "suffixes")
#: The field of a trace record holding more reference solutions (a list of texts).
SOLUTIONS_FIELD = "solutions"
#: Said once per run when `--references siblings` has no siblings to follow.
NO_SIBLINGS_NOTE = (
    "--references siblings: traces given as a list, not read from an input file, follow their "
    f"listed solutions ('solution', '{SOLUTIONS_FIELD}') only")


def known_paths(trace: Trace, references: str, limit: int,
                siblings: Sequence[str] | None = None,
                notes: list[str] | None = None) -> list[list[str]]:
    """The steps of each distinct reference of `trace`: its solution, its `solutions` field,
    then `siblings`, at most `limit`. `siblings` None (not known): a note, listed ones alone."""
    if references == "siblings" and siblings is None and notes is not None:
        if NO_SIBLINGS_NOTE not in notes:
            notes.append(NO_SIBLINGS_NOTE)
    return distinct_references(reference_texts(trace, references, siblings or ()), limit)


def reference_texts(trace: Trace, references: str, siblings: Sequence[str] = ()) -> list[str]:
    """The reference texts of a trace under `--references`, duplicates included."""
    texts = [trace.solution] if trace.solution else []
    if references in ("solutions", "siblings"):
        texts += listed_solutions(trace)
    if references == "siblings":
        texts += list(siblings)
    return texts


def listed_solutions(trace: Trace) -> list[str]:
    """The trace's `solutions` field (a list of texts, or one text); [] when absent."""
    value = trace.extra.get(SOLUTIONS_FIELD)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{trace.where}: field '{SOLUTIONS_FIELD}' must be a list of texts")
    return list(value)


def distinct_references(texts: Sequence[str | None], limit: int) -> list[list[str]]:
    """The steps of the distinct non-empty references among `texts`, in order, at most
    `limit` (same steps after whitespace normalisation: one reference)."""
    out: list[list[str]] = []
    seen: set[tuple[str, ...]] = set()
    for text in texts:
        if not text or not str(text).strip():
            continue
        steps = reference_steps(str(text))
        key = tuple(normalized(s) for s in steps)
        if not steps or key in seen:
            continue
        seen.add(key)
        out.append(steps)
        if len(out) >= limit:
            break
    return out


def reference_steps(solution: str) -> list[str]:
    """The steps of U*: the non-empty lines of the reference solution up to its own
    final-answer statement (`solution_body`), without their line breaks."""
    return [ln.strip() for ln in solution_body(solution).splitlines() if ln.strip()]


def normalized(line: str) -> str:
    """A line compared by content: whitespace runs as one space, no leading or trailing."""
    return " ".join(line.split())


def state_lines(response: str, char_end: int) -> list[str]:
    """The non-empty lines of a state's reasoning (the response up to `char_end`)."""
    return [ln for ln in response[:char_end].splitlines() if ln.strip()]


def paths_after(references: Sequence[list[str]], state_lines: Sequence[str], k: int,
                n_segments: int, alignment: str, keep_empty: bool
                ) -> tuple[list[str], list[list[int]]]:
    """The distinct continuations v̂ scores after state s_k, and per reference the indices of
    its texts. The empty text (R̂'s own path) only with `keep_empty`."""
    texts: list[str] = []
    index: dict[str, int] = {}
    owned: list[list[int]] = []
    for steps in references:
        mine: list[int] = []
        for text in parts_after(steps, state_lines, k, n_segments, alignment):
            if not text and not keep_empty:
                continue
            if text not in index:
                index[text] = len(texts)
                texts.append(text)
            if index[text] not in mine:
                mine.append(index[text])
        owned.append(mine)
    return texts, owned


def parts_after(steps: list[str], state_lines: Sequence[str], k: int, n_segments: int,
                alignment: str) -> list[str]:
    """The parts of one reference that may follow state s_k under `alignment` ("": none left).

    whole: all of it (start over); remaining: the steps not covered by position; matched: the
    steps after the last one the state has written; suffixes: every suffix (S + 1 probes).
    """
    if alignment == "whole":
        return ["\n".join(steps)]
    if alignment == "remaining":
        return [remaining_solution(steps, k, n_segments)]
    if alignment == "matched":
        return ["\n".join(steps[steps_written(steps, state_lines):])]
    if alignment == "suffixes":
        return ["\n".join(steps[i:]) for i in range(len(steps) + 1)]
    raise ValueError(f"unknown alignment {alignment!r}")


def steps_written(steps: Sequence[str], state_lines: Sequence[str]) -> int:
    """`matched`: 1 + the index of the last reference step among `state_lines` (0: none)."""
    written = {normalized(ln) for ln in state_lines}
    return max((i + 1 for i, s in enumerate(steps) if normalized(s) in written), default=0)


def steps_covered(k: int, n_segments: int, n_steps: int) -> int:
    """`remaining`: ⌊k·S/K⌋ of the S steps are covered at state s_k, by position alone (a trace
    that has gone wrong is asked for the reference's next steps, which makes v̂ low there)."""
    return (k * n_steps) // n_segments if n_segments else 0


def remaining_solution(steps: list[str], k: int, n_segments: int) -> str:
    """U* at state s_k under `remaining`: the steps not covered yet, one a line."""
    return "\n".join(steps[steps_covered(k, n_segments, len(steps)):])
