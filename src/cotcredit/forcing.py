"""Answer forcing: the exit string E and the reference-answer tokens Y* probed after a prefix.

RREDCoT's R̂ and every attribution target score log p(Y* | prefix ⊕ E). E closes the reasoning
and opens the answer ("\\n</think>\\n\\nThe final answer is $\\boxed{" for a model that thinks in
`<think>` tags). When E ends inside `\\boxed{`, the answer must also *end* there: the probability
of Y* is multiplied by the mass of every token that starts with "}", so "4" is not credited for
"42" and the tokenizer's choice between "}" and "}$" does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from cotcredit.errors import UserError
from cotcredit.lm import Scorer
from cotcredit.traces import THINK_CLOSE, Trace

EXIT_PLAIN = "\n\nThe final answer is $\\boxed{"
EXIT_THINK = "\n" + THINK_CLOSE + "\n\nThe final answer is $\\boxed{"


@dataclass(frozen=True)
class ForcingOptions:
    """How the model is made to state its answer after a prefix."""

    exit_string: str | None = None  # None: chosen per trace (</think> models get the close tag)
    answer_terminator: str = "}"  # "" disables the end-of-answer mass


@dataclass
class Forcing:
    """Token ids of E and Y*, and the terminator token ids (empty tuple: none)."""

    exit_string: str
    exit_ids: list[int]
    answer_ids: list[int]
    terminators: tuple[int, ...]


def exit_string_for(trace: Trace, options: ForcingOptions) -> str:
    if options.exit_string is not None:
        return options.exit_string
    return EXIT_THINK if THINK_CLOSE in trace.response else EXIT_PLAIN


def _round_trips(scorer: Scorer, text: str) -> list[int]:
    try:
        ids = scorer.encode_text(text)
    except (TypeError, ValueError, UnicodeError):  # e.g. lone surrogates
        return []
    if scorer.tokenizer.decode(ids) != text:
        return []
    return ids


def answer_forcing(scorer: Scorer, trace: Trace, options: ForcingOptions) -> Forcing:
    """Tokenize E and Y* for one trace, refusing strings the tokenizer cannot represent."""
    exit_string = exit_string_for(trace, options)
    exit_ids = _round_trips(scorer, exit_string)
    if not exit_ids:
        raise UserError(
            f"{trace.where}: exit string {exit_string!r} does not tokenize cleanly with this model "
            "(decoding its tokens gives other text); pass another --exit-string"
        )
    answer = trace.answer.strip()
    answer_ids = _round_trips(scorer, answer)
    if not answer_ids:
        raise UserError(f"{trace.where}: reference answer {answer!r} does not tokenize cleanly")
    terminators: tuple[int, ...] = ()
    if options.answer_terminator and exit_string.rstrip().endswith("{"):
        terminators = scorer.terminator_ids(options.answer_terminator)
    return Forcing(exit_string, exit_ids, answer_ids, terminators)
