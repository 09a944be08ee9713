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
same problem that reached the right answer (outcome ≥ 0.5): in a traces file, the records with
the same ``problem_id`` field (else the same prompt); in training, the completions of the batch
given the same prompt (a GRPO group). Duplicates (same lines after whitespace normalisation) are
counted once; at most ``max_references``, in that order (the listed solutions first, so siblings
fill what is left). A trace with no file to read its siblings from (built in memory, or not
found again in its file) follows its listed solutions alone, and the run says so once.

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

import os
from collections.abc import Sequence

from cotcredit.data.fields import FieldNames
from cotcredit.data.outcome import trace_outcome
from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm.forcing import solution_body

REFERENCES = ("solution", "solutions", "siblings")
ALIGNMENTS = ("whole", "remaining", "matched", "suffixes")
#: The field of a trace record holding more reference solutions (a list of texts).
SOLUTIONS_FIELD = "solutions"
#: The record field that groups responses to one problem (else the prompt does).
PROBLEM_FIELD = "problem_id"


def normalized(line: str) -> str:
    """A line compared by content: whitespace runs as one space, no leading or trailing."""
    return " ".join(line.split())


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
    ("" once all are covered)."""
    return "\n".join(steps[steps_covered(k, n_segments, len(steps)):])


def steps_written(steps: Sequence[str], state_lines: Sequence[str]) -> int:
    """`--solution-part matched`: how many of the reference's steps count as done after a state
    whose (non-empty) lines are `state_lines`: 1 + the index of the last reference step among
    them, 0 when the state has written none."""
    written = {normalized(ln) for ln in state_lines}
    return max((i + 1 for i, s in enumerate(steps) if normalized(s) in written), default=0)


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


def state_lines(response: str, char_end: int) -> list[str]:
    """The non-empty lines of a state's reasoning (the response up to `char_end`)."""
    return [ln for ln in response[:char_end].splitlines() if ln.strip()]


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


def reference_texts(trace: Trace, references: str, siblings: Sequence[str] = ()) -> list[str]:
    """The reference texts of a trace under `--references` (module doc), before duplicates are
    removed: its solution, then its `solutions` field, then `siblings`."""
    texts = [trace.solution] if trace.solution else []
    if references in ("solutions", "siblings"):
        texts += listed_solutions(trace)
    if references == "siblings":
        texts += list(siblings)
    return texts


def problem_key(trace: Trace) -> str:
    """What groups responses to one problem: the `problem_id` field, else the prompt."""
    pid = trace.extra.get(PROBLEM_FIELD)
    return f"id:{pid}" if pid is not None else f"prompt:{trace.prompt}"


#: Said once per run when `--references siblings` has no file to read the other responses from.
NO_SIBLINGS_NOTE = (
    "--references siblings: traces not read from a file (or not found again in it with the "
    f"default field names) follow their listed solutions ('solution', '{SOLUTIONS_FIELD}') only")


class SiblingIndex:
    """The right-answer responses of a traces file by problem (`problem_key`), read once.

    Read back with the default field names; a trace whose own response is not found again
    there (other field names, another file) has no siblings here (`of` returns None) rather
    than wrong references.
    """

    def __init__(self, path: str):
        from cotcredit.data.traces import iter_traces

        self.path = path
        self.correct: dict[str, list[tuple[str, str]]] = {}  # key -> [(trace id, response)]
        self.responses: dict[str, str] = {}
        for t in iter_traces(path, FieldNames(), on_error="skip"):
            if not isinstance(t, Trace):
                continue
            self.responses[t.id] = t.response
            if trace_outcome(t) >= 0.5:
                self.correct.setdefault(problem_key(t), []).append((t.id, t.response))

    def of(self, trace: Trace) -> list[str] | None:
        """The other right-answer responses to `trace`'s problem (never the trace itself);
        None when `trace` is not found again in the file."""
        if self.responses.get(trace.id) != trace.response:
            return None
        return [r for tid, r in self.correct.get(problem_key(trace), []) if tid != trace.id]


def file_siblings(scorer, trace: Trace) -> list[str] | None:
    """`SiblingIndex.of` for the file `trace` was read from (the index built once per file
    version and kept with the scorer, like the run's answer forcing); None when the trace was
    not read from a file or is not found again in it (the caller falls back to the listed
    solutions and says so with `NO_SIBLINGS_NOTE`)."""
    if not trace.source or trace.source.startswith("<") or not os.path.isfile(trace.source):
        return None
    stat = os.stat(trace.source)
    key = (os.path.abspath(trace.source), stat.st_mtime_ns, stat.st_size)
    cache: dict = scorer.__dict__.setdefault("_sibling_indexes", {})
    if key not in cache:
        cache.clear()  # one file per run: keep only the newest
        cache[key] = SiblingIndex(trace.source)
    return cache[key].of(trace)
