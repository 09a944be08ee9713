"""Which keys of an input record hold each part of a trace: `FieldNames`, the presets of public
datasets (`FORMATS`, the `--format` flag), `FieldOptions` (the command-line flags that name keys)
and `get_path`, which reads a dotted path in a nested record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from cotcredit.errors import UserError
from cotcredit.options import option


@dataclass(frozen=True)
class FieldNames:
    """Which keys hold each part of a trace; the first key present wins. A key may be a dotted
    path into nested records (`question.problem`; a number indexes a list, `*` maps over one)."""

    prompt: tuple[str, ...] = ("prompt", "question", "problem")
    response: tuple[str, ...] = ("response", "completion", "generation", "output", "generations")
    answer: tuple[str, ...] = ("answer", "reference_answer", "gt_answer")
    solution: tuple[str, ...] = ("solution", "reference_solution")
    outcome: tuple[str, ...] = ("correct", "reward", "correctness_math_verify")
    id: tuple[str, ...] = ("id",)
    # Chat turns (role/content or from/value): the last assistant turn is the response.
    messages: tuple[str, ...] = ("messages", "conversations")
    # Pre-split steps (a list of texts): the response is them joined, the segments are them.
    steps: tuple[str, ...] = ("steps",)
    # With steps: the first wrong step (-1: none), or per-step ratings (the first -1 is it).
    label: tuple[str, ...] = ("label",)
    # The character in the response where the first error starts (-1: none).
    error_char: tuple[str, ...] = ("error_char",)
    # Without an answer field: the fields whose last \boxed{} or `#### N` is the answer.
    answer_from: tuple[str, ...] = ("solution", "reference_solution")

    def override(self, **names: str | None) -> FieldNames:
        """Return a copy where each given field is read from the one named key only."""
        updates = {k: (v,) for k, v in names.items() if v}
        return dataclasses.replace(self, **updates)


# The field mappings of common public datasets (`--format`); see the README's table.
FORMATS: dict[str, dict[str, tuple[str, ...]]] = {
    # problem, steps, label (first wrong step, -1 none), final_answer_correct
    "processbench": {"prompt": ("problem",), "steps": ("steps",), "label": ("label",),
                     "outcome": ("final_answer_correct",), "id": ("id",)},
    # nested: question.{problem, ground_truth_answer, ground_truth_solution}, label.steps[*]
    "prm800k": {"prompt": ("question.problem",), "answer": ("question.ground_truth_answer",),
                "solution": ("question.ground_truth_solution",), "response": (),
                "steps": ("label.steps.*.completions.0.text",),
                "label": ("label.steps.*.completions.0.rating",), "outcome": (),
                "messages": (), "answer_from": ()},
    # problem, answer, solution, generations (list), correctness_math_verify (list), uuid
    "openr1": {"prompt": ("problem",), "response": ("generations",), "answer": ("answer",),
               "solution": ("solution",), "outcome": ("correctness_math_verify",),
               "id": ("uuid",), "messages": ()},
    # problem, solution (ends in \boxed{}), messages; the solution is the trace read
    "numina": {"prompt": ("problem",), "response": ("response", "solution"), "answer": (),
               "solution": (), "answer_from": ("solution",), "messages": ()},
    # question, answer (a worked solution ending "#### N"): N is the answer, the rest U*
    "gsm8k": {"prompt": ("question",), "answer": ("answer",), "solution": ("answer",),
              "answer_from": ()},
    # problem, solution (ends in \boxed{}), level, type
    "math": {"prompt": ("problem",), "answer": (), "solution": ("solution",),
             "answer_from": ("solution",)},
}


def format_names(fmt: str | None) -> FieldNames:
    """The `FieldNames` of a `--format` preset (None: the default aliases)."""
    if not fmt:
        return FieldNames()
    if fmt not in FORMATS:
        raise UserError(f"--format: unknown format '{fmt}' (use one of {', '.join(FORMATS)})")
    return FieldNames(**FORMATS[fmt])


@dataclass
class FieldOptions:
    """Which keys hold each part of a trace (or problem), and which split of a dataset."""

    preset: str | None = option(
        None, flag="--format", choices=tuple(FORMATS),
        help="Field mapping of a public dataset: " + ", ".join(FORMATS) + ".",
    )
    prompt_field: str | None = option(None, help="Key (or dotted path) of the prompt.")
    response_field: str | None = option(
        None, help="Key of the response (a text, or a list: one trace per generation)."
    )
    answer_field: str | None = option(None, help="Key of the reference answer.")
    solution_field: str | None = option(None, help="Key of the reference solution.")
    outcome_field: str | None = option(
        None, help="Key of the outcome (bool or number; a list with a list of generations)."
    )
    id_field: str | None = option(None, help="Key of the trace id.")
    messages_field: str | None = option(
        None, help="Key of chat turns (role/content or from/value); last assistant turn = response."
    )
    steps_field: str | None = option(None, help="Key of pre-split steps (a list of texts).")
    label_field: str | None = option(None, help="Key of the first wrong step (-1: none).")
    error_field: str | None = option(
        None, help="Key of the first error's character offset in the response (-1: none)."
    )
    split: str | None = option(None, help="Split of a dataset folder or Hugging Face dataset id.")
    subset: str | None = option(None, help="Configuration (subset) of a Hugging Face dataset id.")
    # The keys tried for each part (Python API); a *_field option names the one key to read.
    fields: FieldNames | None = field(default=None)

    def names(self) -> FieldNames:
        """The keys read for each part of a trace."""
        base = self.fields if self.fields is not None else format_names(self.preset)
        return base.override(
            prompt=self.prompt_field, response=self.response_field, answer=self.answer_field,
            solution=self.solution_field, outcome=self.outcome_field, id=self.id_field,
            messages=self.messages_field, steps=self.steps_field, label=self.label_field,
            error_char=self.error_field,
        )



MISSING = object()  # what `get_path` gives for a path the record does not hold


def get_path(obj: object, path: str) -> object:
    """The value at `path` in a nested record (`MISSING` if absent): a key, or a dotted path
    where a number indexes a list and `*` maps the rest of the path over a list's items. A key
    holding a literal dot is found first."""
    if isinstance(obj, dict) and path in obj:
        return obj[path]
    value: object = obj
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part == "*":
            if not isinstance(value, list):
                return MISSING
            rest = ".".join(parts[i + 1 :])
            items = [get_path(x, rest) if rest else x for x in value]
            return MISSING if any(x is MISSING for x in items) else items
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.lstrip("-").isdigit() and (
            -len(value) <= int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            return MISSING
    return value



def pick(obj: dict, names: tuple[str, ...]) -> tuple[str | None, object]:
    """(key, value) of the first of `names` (keys or dotted paths) that `obj` holds; (None,
    None) when it holds none."""
    for n in names:
        value = get_path(obj, n)
        if value is not MISSING:
            return n, value
    return None, None
