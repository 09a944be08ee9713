"""The known paths RREDCoT's v̂ follows from a state: which reference solutions a trace has, and
which part of each remains after a state (the alignment).

v̂ is an importance-sampling estimate of the state's value V(s_k) = Σ_U p(U | s_k) · p(Y* | s_k
⊕ U) with the reference solutions as proposal. Scored exactly over a set of DISTINCT
continuations U_1..U_m (no sampling), Σ_j p(U_j | s_k ⊕ C) · p(Y* | s_k ⊕ C ⊕ U_j ⊕ E) is the
part of V(s_k) that runs along those paths: a lower bound on the model's own success probability
that only grows as paths are added. Distinct token sequences are disjoint events, so the sum is a
probability; R̂ (answering now) is one more such path, and a remaining part that is empty is that
same path again (`paths_after` leaves it out unless asked to keep it).

References (`--references`): ``solution``, the trace's reference solution; ``solutions``, also
every text of its ``solutions`` field (a list); ``siblings``, also every other response to the
same problem that reached the right answer (outcome ≥ 0.5), which the run's input stage finds
(`pipeline.inputs.SiblingIndex`: the records of the input with the same ``problem_id`` field,
else the same prompt) and hands over on the trace's context; in training, the completions of
the batch given the same prompt (a GRPO group). Duplicates (same lines after whitespace
normalisation) are counted once; at most ``max_references``, in that order (the listed
solutions first, so siblings fill what is left). A trace whose input gave no siblings (a list of
traces rather than an input file) follows its listed solutions alone, and the run says so once.

Alignment (`--solution-part`), per reference, at state s_k:

* ``whole``: the reference from its first step at every state (the model is asked to start
  over).
* ``remaining``: the steps not covered by position (⌊k·S/K⌋ of its S steps; reads no text).
* ``matched``: the steps after the last reference step the state has written (a line equal to it
  after whitespace normalisation; none written: the whole reference). A trace that inserts lines
  of its own keeps its place; one that has gone wrong is asked for the reference's next step
  after its wrong line, which the model finds unlikely.
* ``suffixes``: every suffix of the reference (each split point, from all of it to its last
  step), summed: the model's own likelihood decides where on the known path the state stands.
  Costs S probes per reference and state instead of one.
"""

from __future__ import annotations

from collections.abc import Sequence

from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm.forcing import solution_body

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
    """The steps of each distinct reference of `trace` under `--references` (`references`):
    its solution, its `solutions` field, then `siblings`, at most `limit`. With ``siblings``
    and no siblings given (None), its listed solutions alone; `NO_SIBLINGS_NOTE` is then added
    to `notes`."""
    if references == "siblings" and siblings is None and notes is not None:
        if NO_SIBLINGS_NOTE not in notes:
            notes.append(NO_SIBLINGS_NOTE)
    return distinct_references(reference_texts(trace, references, siblings or ()), limit)


def reference_texts(trace: Trace, references: str, siblings: Sequence[str] = ()) -> list[str]:
    """The reference texts of a trace under `--references` (module doc), before duplicates are
    removed: its solution, then its `solutions` field, then `siblings`."""
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
    """The distinct continuations v̂ scores after state s_k and which belong to each reference:
    (texts, per reference the indices of its texts). A text two references share is scored
    once; the empty text (nothing left: the same path as R̂) only with `keep_empty`."""
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
    """The parts of one reference (its steps) that may follow state s_k, one text each ("" is
    the empty part: nothing of it left), under `alignment` (module doc)."""
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
    """`--solution-part matched`: how many of the reference's steps count as done after a state
    whose (non-empty) lines are `state_lines`: 1 + the index of the last reference step among
    them, 0 when the state has written none."""
    written = {normalized(ln) for ln in state_lines}
    return max((i + 1 for i, s in enumerate(steps) if normalized(s) in written), default=0)


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
    ("" once all are covered)."""
    return "\n".join(steps[steps_covered(k, n_segments, len(steps)):])
