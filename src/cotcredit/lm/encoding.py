"""How text becomes the tokens the model sees: a trace, a generated completion, and the probe
blocks of answer forcing.

- A trace (`encode_trace`): prompt and response tokenized separately and concatenated, so every
  prefix is exactly what the model saw.
- A generated completion (`encode_completion`): its ids kept as generated; character offsets
  from the tokenizer when re-tokenizing gives the same ids, else from incremental decoding.
- Both share `encoded_trace`: the reasoning is the tokens wholly before the reasoning end (a
  straddling token belongs to the answer), so `redistribute` and `train` agree.
- A probe block (`encode_parts`): E, Y*, C and U* tokenized together, as the model would write
  the joined text, each part located by character offsets (BPE merges across seams; a
  SentencePiece tokenizer marks a word start on text encoded alone). A seam token belongs to
  the earlier scored part, so it is scored, never dropped.
- Answer forcing (`Forcing`): the exit string E and the probe blocks (E ⊕ Y*, C ⊕ U* ⊕ E ⊕ Y*)
  scored after a prefix, read as the model's own text (C left out after a prefix that ends
  with it; E on a new line after U*). E is chosen once per run from the model
  (`"\\n</think>\\n\\nThe final answer is $\\boxed{"` for a model that thinks in `<think>` tags,
  else without the tag; `--exit-string` sets it) and recorded. When E ends inside `\\boxed{`,
  p(Y*) is multiplied by the mass of every token starting with "}", so "4" is not credited for
  "42".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from cotcredit.data.trace import THINK_CLOSE, THINK_OPEN, Trace, reasoning_end
from cotcredit.errors import UserError

_REPLACEMENT = "\ufffd"  # what decoding shows for an incomplete UTF-8 character
# Text put before a probe so it is tokenized as a continuation, not as the start of a text
# (SentencePiece adds a word-start marker there). Tried in order until one splits cleanly.
_ANCHORS = (".", "\n", " ", "a", "0")


@dataclass
class EncodedTrace:
    """A trace tokenized the way the model saw it: prompt tokens, then reasoning tokens.
    `token_starts[i]`: character offset of reasoning token i (`[n]`: the reasoning's end);
    `cuttable[i]`: a segment may start at token i (not inside a split character)."""

    trace: Trace
    prompt_ids: list[int]
    reasoning_ids: list[int]
    token_starts: list[int]
    cuttable: list[bool]
    truncated: int = 0  # reasoning tokens dropped to fit the context

    @property
    def prompt_len(self) -> int:
        """Tokens of the rendered prompt."""
        return len(self.prompt_ids)

    @property
    def ids(self) -> list[int]:
        """Prompt and reasoning tokens: the sequence the model reads."""
        return self.prompt_ids + self.reasoning_ids

    @property
    def n_reasoning(self) -> int:
        """Tokens of the reasoning."""
        return len(self.reasoning_ids)

    @property
    def reasoning_text(self) -> str:
        """The reasoning text its tokens cover (the response up to the last reasoning token)."""
        return self.trace.response[: self.token_starts[-1]]

    def prefix(self, k_tokens: int) -> list[int]:
        """Prompt plus the first `k_tokens` reasoning tokens."""
        return self.prompt_ids + self.reasoning_ids[:k_tokens]


def encoded_trace(
    trace: Trace,
    prompt_ids: Sequence[int],
    ids: Sequence[int],
    starts: Sequence[int],
    ends: Sequence[int],
    cuttable: Sequence[bool],
    *,
    max_context: int,
    reserve: int = 0,
    truncate: bool = False,
) -> EncodedTrace:
    """The `EncodedTrace` of a response tokenized as `ids` with character spans
    `[starts[i], ends[i])`. `reserve` tokens stay free for probes; a longer trace is a
    `UserError`, or with `truncate` loses the end of its reasoning."""
    prompt_ids = list(prompt_ids)
    if not prompt_ids:
        raise UserError(
            f"{trace.where}: the prompt gives no tokens (empty prompt, no chat template and no "
            "BOS token): the state before the reasoning would be empty; give a prompt text"
        )
    response = trace.response
    rend = reasoning_end(response)
    n = sum(1 for e in ends[: len(ids)] if e <= rend)
    while 0 < n < len(ids) and not cuttable[n]:
        n -= 1
    end_char = starts[n] if n < len(ids) else len(response)
    if n == len(ids) and rend < len(response):
        end_char = rend
    if n == 0:
        raise UserError(f"{trace.where}: response has no reasoning tokens before its final answer")
    reasoning_ids = list(ids[:n])
    token_starts = list(starts[:n]) + [end_char]
    truncated = 0
    limit = max_context - reserve
    if len(prompt_ids) + n > limit:
        if not truncate or len(prompt_ids) + 1 > limit:
            raise UserError(
                f"{trace.where}: prompt ({len(prompt_ids)}) + reasoning ({n}) tokens + probes "
                f"({reserve}) exceed the model's context of {max_context} tokens; use "
                "--truncate to drop the end of the reasoning"
            )
        keep = limit - len(prompt_ids)
        while keep > 0 and not cuttable[keep]:
            keep -= 1
        truncated = n - keep
        reasoning_ids = reasoning_ids[:keep]
        token_starts = list(starts[:keep]) + [starts[keep]]
    return EncodedTrace(
        trace, prompt_ids, reasoning_ids, token_starts, list(cuttable[: len(reasoning_ids)]),
        truncated,
    )


def text_offsets(tokenizer, text: str) -> tuple[list[int], list[int], list[int], list[bool]]:
    """(ids, starts, ends, cuttable) of `text` tokenized on its own (fast tokenizer offsets)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    offsets = [tuple(o) for o in enc["offset_mapping"]]
    starts = [int(o[0]) for o in offsets]
    ends = [int(o[1]) for o in offsets]
    cut = [True] + [starts[i] >= ends[i - 1] for i in range(1, len(ids))]
    return ids, starts, ends, cut


def encode_trace(
    tokenizer, trace: Trace, prompt_ids: Sequence[int], *, max_context: int, reserve: int = 0,
    truncate: bool = False,
) -> EncodedTrace:
    """A trace as the model saw it: `prompt_ids`, then the response tokenized on its own."""
    ids, starts, ends, cut = text_offsets(tokenizer, trace.response)
    return encoded_trace(
        trace, prompt_ids, ids, starts, ends, cut, max_context=max_context, reserve=reserve,
        truncate=truncate,
    )


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False,
                            clean_up_tokenization_spaces=False)


def token_offsets(
    tokenizer, ids: Sequence[int], context: Sequence[int] = ()
) -> tuple[str, list[int], list[bool]]:
    """Text of `ids`, and per token its start offset and whether a segment may start there.

    `context` (e.g. the prompt's last tokens) is decoded in front and removed again, so a
    SentencePiece tokenizer keeps the leading space the ids have after it. When re-tokenizing
    gives back `ids`, the tokenizer's offsets are used; else (a non-canonical tokenization from
    sampling) tokens are decoded one at a time against a short window, as streaming
    detokenizers do.
    """
    ids = list(ids)
    context = list(context)
    if not ids:
        return "", [], []
    head = _decode(tokenizer, context) if context else ""
    both = _decode(tokenizer, context + ids)
    text = both[len(head) :] if both.startswith(head) else _decode(tokenizer, ids)
    try:
        fast_ids, starts, _, cut = text_offsets(tokenizer, text)
    except (NotImplementedError, ValueError, TypeError):  # slow tokenizers have no offsets
        fast_ids = []
    if fast_ids == ids:
        return text, starts, cut

    seq = context + ids
    base = len(context)
    pieces: list[str] = []
    emitted = 0  # characters produced so far
    starts, cut = [], []
    window = max(0, base - 3)  # decode from here: a few tokens before the pending ones
    pending = 0  # first token of ids not yet given a start
    for i in range(len(ids)):
        prev = _decode(tokenizer, seq[window : base + pending])
        cur = _decode(tokenizer, seq[window : base + i + 1])
        if i + 1 < len(ids) and (cur.endswith(_REPLACEMENT) or not cur.startswith(prev)):
            continue  # token i ends inside a character: wait for the rest of it
        delta = cur[len(prev) :] if cur.startswith(prev) else cur
        for t in range(pending, i + 1):
            starts.append(emitted)
            cut.append(t == pending)
        pieces.append(delta)
        emitted += len(delta)
        window = base + pending
        pending = i + 1
    return "".join(pieces), starts, cut


def template_markers(tokenizer) -> tuple[str, ...]:
    """The special-token strings the chat template writes around a message (``<|im_start|>``);
    empty without a template. Renders the template: `Scorer.template_markers` keeps it."""
    markers: tuple[str, ...] = ()
    if getattr(tokenizer, "chat_template", None):
        try:
            shown = tokenizer.apply_chat_template(
                [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
            )
        except Exception:  # a template that needs other roles: no markers, template applies
            shown = ""
        specials = set(getattr(tokenizer, "all_special_tokens", []) or [])
        # Added tokens too: converted tokenizers do not always flag turn markers as special.
        added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        specials |= {str(t) for t in added.values()}
        markers = tuple(sorted(t for t in specials if len(t) > 1 and t in shown))
    return markers


def rendered_by_template(tokenizer, prompt: str,
                         markers: Sequence[str] | None = None) -> bool:
    """Whether `prompt` is already in the model's chat format (holds the template's `markers`),
    so applying the template again would wrap it twice."""
    markers = template_markers(tokenizer) if markers is None else markers
    return any(m in prompt for m in markers)


def special_ids(tokenizer) -> set[int]:
    """Ids of the tokenizer's special tokens (EOS, padding, ...)."""
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            ids.add(value)
    return ids


def completion_text(
    tokenizer, prompt_ids: Sequence[int], completion_ids: Sequence[int]
) -> tuple[str, list[int], list[int], list[bool]]:
    """(text, kept ids, token starts, cuttable) of a generated completion without its trailing
    special tokens (EOS, padding)."""
    ids = list(completion_ids)
    special = special_ids(tokenizer)
    while ids and ids[-1] in special:
        ids.pop()
    text, starts, cut = token_offsets(tokenizer, ids, list(prompt_ids)[-3:])
    return text, ids, starts, cut


def encode_completion(
    tokenizer,
    trace: Trace,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    starts: Sequence[int],
    cuttable: Sequence[bool],
    *,
    max_context: int,
    reserve: int = 0,
) -> EncodedTrace:
    """A generated completion as an `EncodedTrace`: `prompt_ids` + its own ids up to the end of
    its reasoning (`trace.response`, `starts`, `cuttable`: from `completion_text`)."""
    ends = [*starts[1:], len(trace.response)][: len(starts)]
    # A token that continues a split character ends where the character does.
    for i in range(len(ends) - 2, -1, -1):
        if not cuttable[i + 1]:
            ends[i] = ends[i + 1]
    return encoded_trace(
        trace, prompt_ids, list(completion_ids)[: len(starts)], starts, ends, cuttable,
        max_context=max_context, reserve=reserve,
    )


@dataclass
class Parts:
    """Token ids of texts tokenized together, and the token range [start, end) of each named
    part (a seam token belongs to the earlier scored part)."""

    ids: list[int]
    spans: dict[str, tuple[int, int]]

    def span(self, name: str) -> tuple[int, int]:
        """(start, end) token indices of the part named `name`."""
        return self.spans[name]


def continuation_offsets(tokenizer, text: str) -> tuple[list[int], list[int], list[int]]:
    """(ids, starts, ends) of `text` tokenized as after other text (behind an anchor cut off
    again); ([], [], []) if no anchor splits cleanly from it."""
    for anchor in _ANCHORS:
        ids, starts, ends, _ = text_offsets(tokenizer, anchor + text)
        a = len(anchor)
        first = next((i for i, s in enumerate(starts) if s >= a and ends[i] > a), None)
        if first is None or any(ends[i] > a for i in range(first)):
            continue  # a token straddles the anchor and the text
        return ids[first:], [s - a for s in starts[first:]], [e - a for e in ends[first:]]
    return [], [], []


def encode_parts(tokenizer, parts: Sequence[tuple[str, str | None]]) -> Parts:
    """Tokenize the texts of `parts` joined, as one continuation; `(text, name)` pairs, name
    None for conditioning text that is not scored. Refuses (UserError) text whose tokens do not
    decode back to it."""
    text = "".join(t for t, _ in parts)
    try:
        ids, starts, ends = continuation_offsets(tokenizer, text)
    except (TypeError, ValueError, UnicodeError):  # e.g. lone surrogates
        ids = []
    if not ids or not _round_trips(tokenizer, ids, text):
        raise UserError(
            f"{text!r} does not tokenize cleanly with this model (decoding its tokens gives other "
            "text); change --exit-string or the reference text"
        )
    spans: dict[str, tuple[int, int]] = {}
    pos, taken = 0, 0  # characters consumed; tokens already given to a scored part
    for t, name in parts:
        a, b = pos, pos + len(t)
        pos = b
        if name is None:
            continue
        first = next((i for i in range(taken, len(ids)) if ends[i] > a), len(ids))
        last = max((i + 1 for i in range(first, len(ids)) if starts[i] < b), default=first)
        if last <= first:
            raise UserError(f"{t!r} gives no tokens of its own after the text before it")
        spans[name] = (first, last)
        taken = last
    return Parts(ids, spans)


def _round_trips(tokenizer, ids: list[int], text: str) -> bool:
    """Whether `ids` decode to `text` when they follow other text."""
    for anchor in _ANCHORS:
        head = tokenizer.encode(anchor, add_special_tokens=False)
        if not head:
            continue
        a = _decode(tokenizer, head)
        both = _decode(tokenizer, head + ids)
        if both.startswith(a):
            return both[len(a) :] == text
    return _decode(tokenizer, ids) == text


# ---- answer forcing --------------------------------------------------------------------------
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


def answer_forcing(scorer, options: ForcingOptions) -> Forcing:
    """The `Forcing` for this model and these options (a method gets the run's, built once:
    `TraceContext.forcing`)."""
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
