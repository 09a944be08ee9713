"""Answer forcing: the exit string E and the probe blocks (E ⊕ Y*, C ⊕ U* ⊕ E ⊕ Y*) scored after
a prefix, tokenized together and read as the model's own text (C left out after a prefix that
ends with it; E on a new line after U*).

E is chosen once per run from the model (`"\\n</think>\\n\\nThe final answer is $\\boxed{"` for a
model that thinks in `<think>` tags, else without the tag; `--exit-string` sets it) and recorded.
When E ends inside `\\boxed{`, p(Y*) is multiplied by the mass of every token starting with "}",
so "4" is not credited for "42".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from cotcredit.data.trace import THINK_CLOSE, THINK_OPEN, reasoning_end
from cotcredit.errors import UserError
from cotcredit.lm.encoding import Parts, encode_parts
from cotcredit.run_cache import RunCache

EXIT_PLAIN = "\n\nThe final answer is $\\boxed{"
EXIT_THINK = "\n" + THINK_CLOSE + "\n\nThe final answer is $\\boxed{"


@dataclass(frozen=True)
class ForcingOptions:
    """How the model is made to state its answer after a prefix."""

    exit_string: str | None = field(
        default=None,
        metadata={"help": "Answer-forcing string E appended after a prefix [default: chosen "
                  "once from the model: with the '</think>' close tag for models that think "
                  "in tags]."},
    )
    answer_terminator: str = field(
        default="}",
        metadata={"help": "Multiply p(Y*) by the mass of tokens starting with this string "
                  "(the answer ends there); '' to disable."},
    )


def resolved(scorer, options: ForcingOptions) -> ForcingOptions:
    """`options` with the exit string this run uses (chosen from the model when not given)."""
    return dataclasses.replace(options, exit_string=answer_forcing(scorer, options).exit_string)


def thinks_in_tags(tokenizer) -> bool:
    """Whether the model writes its reasoning inside <think> tags (chat template or vocabulary)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # several named templates
        template = " ".join(str(t) for t in template.values())
    if THINK_CLOSE in template or THINK_OPEN in template:
        return True
    try:
        return THINK_CLOSE in tokenizer.get_added_vocab()
    except (AttributeError, TypeError):
        return False


def default_exit_string(tokenizer) -> str:
    """E for a model: with `</think>` for models that think in tags, else without."""
    return EXIT_THINK if thinks_in_tags(tokenizer) else EXIT_PLAIN


@dataclass
class Forcing:
    """E for one run, and the token blocks probed after a prefix."""

    exit_string: str
    terminators: tuple[int, ...]  # token ids whose mass ends the answer (empty: none)
    tokenizer: object

    def answer_probe(self, answer: str, where: str = "", lead: str = "") -> Parts:
        """lead ⊕ E ⊕ Y*, with the span "answer". `lead` (default none) goes before E, e.g. a
        line break after text that stops mid-line."""
        return self._parts([(lead + self.exit_string, None), (_answer(answer, where), "answer")],
                           where)

    def solution_probe(self, connector: str, solution: str, answer: str, where: str = "") -> Parts:
        """C ⊕ U* ⊕ E ⊕ Y*, with the spans "solution" and "answer".

        U* is `solution` up to its own final-answer statement (`solution_body`); "" when none
        is left, and the span "solution" is then empty, (0, 0). `connector` is C as
        `connector_after` gives it for the prefix. U* and E are joined as the model writes an
        answer after its reasoning: E as is when it starts with whitespace, else on a line of
        its own."""
        body = solution_body(solution) if solution.strip() else ""
        parts = [(connector, None)]
        if body:
            sep = "" if self.exit_string[:1].isspace() else "\n"
            parts += [(body, "solution"), (sep, None)]
        parts += [(self.exit_string, None), (_answer(answer, where), "answer")]
        probe = self._parts(parts, where)
        if not body:
            probe.spans["solution"] = (0, 0)
        return probe

    def _parts(self, parts, where: str) -> Parts:
        try:
            return encode_parts(self.tokenizer, [(t, n) for t, n in parts if t or n])
        except UserError as e:
            raise UserError(f"{where}: {e}" if where else str(e)) from None


def solution_body(solution: str) -> str:
    """U*: the reference solution up to its own final-answer statement (`reasoning_end`), so
    that E states the answer after it as after the trace's reasoning and p(Y* | ... ⊕ U* ⊕ E)
    is not a copy of U*'s last line."""
    return solution[: reasoning_end(solution)].strip() or solution.strip()


def connector_after(prefix_tail: str, connector: str) -> str:
    """C after a prefix ending in `prefix_tail`: none where the prefix already ends with it (a
    state that ends a line continues on the next line, not after an empty one)."""
    return "" if connector and prefix_tail.endswith(connector) else connector


def _answer(answer: str, where: str) -> str:
    answer = answer.strip()
    if not answer:
        raise UserError(f"{where}: the reference answer is empty")
    return answer


def answer_forcing(scorer, options: ForcingOptions, cache: RunCache | None = None) -> Forcing:
    """The `Forcing` for this model and these options: built once per run with the run's
    `cache`, afresh without one."""
    if cache is not None:
        return cache.get("forcing", (id(scorer.tokenizer), options),
                         lambda: answer_forcing(scorer, options))
    exit_string = (
        options.exit_string
        if options.exit_string is not None
        else default_exit_string(scorer.tokenizer)
    )
    if not exit_string:
        raise UserError("--exit-string must not be empty")
    terminators: tuple[int, ...] = ()
    if options.answer_terminator and exit_string.rstrip().endswith("{"):
        terminators = scorer.terminator_ids(options.answer_terminator)
    forcing = Forcing(exit_string, terminators, scorer.tokenizer)
    forcing.answer_probe("0", "--exit-string")  # E itself must tokenize cleanly
    return forcing
