"""RREDCoT segment rewards of a freshly generated completion, scored by the current policy.

``PolicySegmentRewards`` is the ``segment_rewards_fn`` of ``RredcotGRPOTrainer`` in mode
``rredcot``. For one completion it takes the token ids TRL generated — no re-rendering, no
re-tokenization of the prompt — and runs the same path as ``cotcredit redistribute``:

1. ``encode_completion``: an ``EncodedTrace`` built directly from ``prompt_ids`` and
   ``completion_ids``, so every state s_k is exactly ``prompt_ids + completion_ids[:b_k]``. The
   response text is the decoded completion (trailing special tokens such as EOS dropped), each
   token's character offset comes from the tokenizer's own offsets when re-tokenizing the text
   gives the same ids, else from incremental decoding; the reasoning is the completion up to its
   final-answer statement (``traces.reasoning_end``: ``</think>``, ``\\boxed``, "The answer is").
2. One forward pass of the policy over prompt + reasoning with KV cache (``reasoning_pass``:
   ``Scorer.forward`` without LM-head work on the prompt positions).
3. ``segment_encoded`` with ``SegmentOptions(segments=cfg.segments)`` (its entropies).
4. ``methods.rredcot.estimate`` with the configured value (rhat / vhat / both), exit string and
   length normalisation: every probe packed on the KV cache of step 2.
5. Outcome ζ = the completion's graded correctness (``grading.grade_completion``, the training
   reward), rewards ``redistribute_rewards(g, ζ, sum_to="advantage")``: they sum to ζ − g_0.

It returns the rewards and the segments' token spans relative to the completion (the reasoning
starts at completion token 0, so reasoning offsets are completion offsets); the spans tile the
reasoning tokens, and the final-answer tokens after it belong to no segment. It returns None —
the completion keeps its plain GRPO advantage — when the completion has no reasoning tokens (it
starts with the answer, or is empty) or prompt + reasoning + probes do not fit the context.

No extra model, no extra generation: the callable holds the policy object the trainer trains and
is called by the trainer under ``no_grad`` with the model in eval mode.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from cotcredit.errors import UserError
from cotcredit.forcing import ForcingOptions
from cotcredit.grading import grade_completion
from cotcredit.lm import _LOGIT_CHUNK, EncodedTrace, ModelOptions, Scorer, TracePass
from cotcredit.methods.base import TraceContext
from cotcredit.methods.rredcot import RredcotOptions, estimate, redistribute_rewards
from cotcredit.segmentation import SegmentOptions, segment_encoded
from cotcredit.traces import Trace, reasoning_end

_REPLACEMENT = "\ufffd"  # what decoding shows for an incomplete UTF-8 character


def _decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(
        list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
    )


def token_offsets(
    tokenizer, ids: Sequence[int], context: Sequence[int] = ()
) -> tuple[str, list[int], list[bool]]:
    """Text of ``ids`` and, per token, the character offset where it starts and whether a
    segment may start there (False for a token that continues a character split over tokens).

    ``context`` (e.g. the prompt's last tokens) is decoded in front and removed again, so
    tokenizers that drop the leading space of a lone piece (SentencePiece) give the text the
    ids have after that context. Fast path: re-tokenizing the text gives back ``ids``; then the
    tokenizer's offset mapping is used, as in ``Scorer.encode``. Otherwise (a non-canonical
    tokenization, which sampling produces now and then) tokens are decoded one at a time against
    a short window of the preceding ones (the incremental scheme of streaming detokenizers).
    """
    ids = list(ids)
    context = list(context)
    if not ids:
        return "", [], []
    head = _decode(tokenizer, context) if context else ""
    both = _decode(tokenizer, context + ids)
    text = both[len(head) :] if both.startswith(head) else _decode(tokenizer, ids)
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        fast_ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    except (NotImplementedError, ValueError, TypeError):  # slow tokenizers have no offsets
        fast_ids, offsets = [], []
    if fast_ids == ids:
        starts = [int(o[0]) for o in offsets]
        cut = [True] + [starts[i] >= offsets[i - 1][1] for i in range(1, len(ids))]
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


@torch.no_grad()
def reasoning_pass(scorer: Scorer, enc: EncodedTrace) -> TracePass:
    """``scorer.forward(enc.ids)`` restricted to what segmentation and the probes use: the KV
    cache and the entropies of the distributions the reasoning tokens were drawn from
    (positions ``prompt_len - 1 .. len - 2``; other positions hold 0, log-probs are all 0).

    Same decoder pass and the same per-position arithmetic as ``Scorer.forward`` (so the numbers
    match ``cotcredit redistribute`` exactly), without the vocabulary-sized LM-head work on the
    prompt positions, which a short completion after a long prompt is mostly made of.
    """
    from transformers import DynamicCache

    t0 = time.perf_counter()
    ids = enc.ids
    x = torch.tensor([ids], device=scorer.device)
    cache = DynamicCache(config=scorer.model.config)
    hidden = scorer._decoder()(input_ids=x, cache=cache, use_cache=True).last_hidden_state[0]
    n = len(ids)
    entropies = torch.zeros(n, dtype=torch.float32)
    for s in range(enc.prompt_len - 1, n - 1, _LOGIT_CHUNK):
        e = min(n - 1, s + _LOGIT_CHUNK)
        lp = torch.log_softmax(scorer._logits(hidden[s:e]), dim=-1)
        entropies[s:e] = -(lp.exp() * lp).sum(-1).cpu()
    return TracePass(list(ids), torch.zeros(n), entropies, cache, time.perf_counter() - t0)


def _special_ids(tokenizer) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for name in ("eos_token_id", "pad_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, int):
            ids.add(value)
    return ids


def encode_completion(
    trace: Trace,
    prompt_ids: Sequence[int],
    completion_ids: Sequence[int],
    starts: Sequence[int],
    cuttable: Sequence[bool],
) -> EncodedTrace | None:
    """An ``EncodedTrace`` whose prompt is ``prompt_ids`` and whose reasoning is the first
    completion tokens up to the final-answer statement of ``trace.response``.

    ``trace.response``, ``starts`` and ``cuttable`` are what ``completion_text`` returns for
    ``completion_ids`` (one start per token kept). None when the reasoning is empty.
    """
    ids = list(completion_ids)[: len(starts)]
    response = trace.response
    rend = reasoning_end(response)
    n = sum(1 for s in starts if s < rend)
    while 0 < n < len(ids) and not cuttable[n]:
        n -= 1
    if n == 0:
        return None
    end_char = starts[n] if n < len(ids) else len(response)
    if n == len(ids) and rend < len(response):
        end_char = rend
    return EncodedTrace(
        trace, list(prompt_ids), ids[:n], list(starts[:n]) + [end_char], list(cuttable[:n])
    )


def completion_text(
    tokenizer, prompt_ids: Sequence[int], completion_ids: Sequence[int]
) -> tuple[str, list[int], list[bool]]:
    """(text, token starts, cuttable) of a completion without its trailing special tokens (EOS,
    padding); the lists cover only the tokens kept."""
    ids = list(completion_ids)
    special = _special_ids(tokenizer)
    while ids and ids[-1] in special:
        ids.pop()
    return token_offsets(tokenizer, ids, list(prompt_ids)[-3:])


@dataclass
class ScoredCompletion:
    """What one call computed (kept on the callable as ``last`` for inspection and tests)."""

    encoded: EncodedTrace
    outcome: float
    g: list[float]
    rewards: list[float]
    spans: list[tuple[int, int]]


class PolicySegmentRewards:
    """``segment_rewards_fn`` of the trainer: RREDCoT segment rewards from the current policy.

    ``model`` is the policy object given to the trainer (the trainer updates it in place, so
    every call scores with the current weights); ``tokenizer`` the trainer's. Called as
    ``fn(prompt_ids, completion_ids, example=row)`` where ``row`` is the completion's dataset
    row (``answer``, optional ``solution``, ``prompt``, ``problem_id``).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        segments: int = 8,
        value: str = "rhat",
        exit_string: str | None = None,
        length_norm: bool = False,
        model_options: ModelOptions | None = None,
        name: str = "policy",
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.segment_options = SegmentOptions(segments=segments).validate()
        self.options = RredcotOptions(
            value=value,
            sum_to="advantage",
            length_norm=length_norm,
            forcing=ForcingOptions(exit_string=exit_string),
        ).validate()
        self.model_options = model_options or ModelOptions()
        self.name = name
        self._scorer: Scorer | None = None
        self.calls = 0
        self.failures = 0  # calls that raised a UserError (plain advantage kept)
        self._warned: set[str] = set()
        self.last: ScoredCompletion | None = None

    @property
    def scorer(self) -> Scorer:
        """A ``Scorer`` on the policy, created at the first call (once the trainer has put the
        model on its device) and kept, with its caches; device and dtype follow the model."""
        param = next(self.model.parameters())
        if self._scorer is None:
            self._scorer = Scorer(self.model, self.tokenizer, self.model_options, name=self.name)
        scorer = self._scorer
        if scorer.device != param.device:  # the trainer moved the model after we made it
            fresh = Scorer(self.model, self.tokenizer, self.model_options, name=self.name)
            scorer.query_budget = fresh.query_budget
        scorer.device, scorer.dtype = param.device, param.dtype
        return scorer

    def __call__(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], example: dict | None = None
    ) -> tuple[list[float], list[tuple[int, int]]] | None:
        if example is None or example.get("answer") is None:
            raise ValueError(
                "PolicySegmentRewards needs the completion's dataset row (example=...) with its "
                "reference answer"
            )
        self.calls += 1
        try:
            return self._score(prompt_ids, completion_ids, example)
        except UserError as e:  # e.g. an exit string this completion's text cannot take
            self.failures += 1
            if str(e) not in self._warned:
                self._warned.add(str(e))
                warnings.warn(
                    f"RREDCoT scoring skipped a completion (it keeps its plain advantage): {e}",
                    stacklevel=2,
                )
            return None

    def _score(self, prompt_ids, completion_ids, example: dict):
        scorer = self.scorer
        response, starts, cuttable = completion_text(self.tokenizer, prompt_ids, completion_ids)
        prompt = example.get("prompt")
        if isinstance(prompt, list):  # chat messages: the last user turn is the problem
            prompt = next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), "")
        trace = Trace(
            id=str(example.get("problem_id", "completion")),
            prompt=str(prompt or ""),
            response=response,
            answer=str(example["answer"]),
            solution=example.get("solution") or None,
        )
        enc = encode_completion(trace, prompt_ids, completion_ids, starts, cuttable)
        if enc is None:
            return None
        reserve = 64 + (len(scorer.encode_text(trace.solution)) if trace.solution else 0)
        if len(enc.ids) + reserve > scorer.max_context:
            return None
        forward = reasoning_pass(scorer, enc)
        segmentation = segment_encoded(enc, forward.entropies, self.segment_options)
        ctx = TraceContext(scorer, enc, forward, segmentation)
        estimates = estimate(ctx, self.options)
        outcome = 1.0 if grade_completion(response, trace.answer).correct else 0.0
        rewards, _ = redistribute_rewards(estimates.g, outcome, sum_to="advantage")
        spans = [(s.token_start, s.token_end) for s in segmentation.segments]
        forward.cache = None
        self.last = ScoredCompletion(enc, outcome, list(estimates.g), list(rewards), spans)
        return list(rewards), spans
