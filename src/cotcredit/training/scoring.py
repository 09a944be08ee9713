"""RREDCoT segment rewards of freshly generated completions, scored by the current policy.

``PolicySegmentRewards`` is the ``segment_rewards_fn`` of ``RredcotGRPOTrainer`` in mode
``rredcot``: ``cotcredit.training.online.OnlineRredcot`` on the trainer's own model, fed the dataset rows.
The trainer calls ``score_batch`` once per generation batch (the completions share padded
forward and packed probe passes); ``fn(prompt_ids, completion_ids, example=row)`` scores one
completion the same way. It takes the token ids TRL generated — no re-rendering, no
re-tokenization of the prompt — and runs the same path as ``cotcredit redistribute``, through the
same functions (``Scorer.encode_completion``, a forward over prompt + reasoning with statistics
only from the reasoning on, ``segment_encoded``, ``methods.rredcot.estimate`` with the run's one
exit string, ``redistribute_rewards(..., sum_to="advantage")``).

Outcome ζ: the ``outcome`` the trainer passes — in ``cotcredit train`` the total of the configured
reward functions (the correctness reward alone by default, so ζ = graded correctness) — else the
completion's graded correctness (``grading.grade_completion``). The rewards sum to ζ − g_0,
checked for every completion.

With ``terminal_in_weights=False`` it returns ``g_k − g_{k−1}`` instead (the terminal correction
``ζ − g_K`` left out; ``advantages.value_difference_rewards``): the trainer keeps each
completion's total ``A · n`` whatever the rewards sum to, so only the placement changes.

It returns the rewards and the segments' token spans relative to the completion (the reasoning
starts at completion token 0); the spans tile the reasoning tokens, and the final-answer tokens
after it belong to no segment. It returns None — the completion keeps its plain GRPO advantage —
when the completion has no reasoning tokens (it starts with the answer, or is empty), when
prompt + reasoning + probes do not fit the context, or when a probe cannot be built for it
(warned once per message).

No extra model, no extra generation: the callable holds the policy object the trainer trains and
is called by the trainer under ``no_grad`` with the model in eval mode.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from cotcredit.lm import ModelOptions, Scorer
from cotcredit.lm.encoding import EncodedTrace, ForcingOptions
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.training.advantages import value_difference_rewards
from cotcredit.training.online import CompletionCredit, OnlineRredcot, unwrap

SegmentRewards = tuple[list[float], list[tuple[int, int]]]


@dataclass
class ScoredCompletion:
    """What one completion's scoring computed (the last one is kept as ``last``)."""

    encoded: EncodedTrace
    outcome: float
    g: list[float]
    rewards: list[float]
    spans: list[tuple[int, int]]


def prompt_text(example: dict) -> str:
    """The problem text of a dataset row: the prompt, or the last user turn of chat messages."""
    prompt = example.get("prompt")
    if isinstance(prompt, list):  # chat messages: the last user turn is the problem
        prompt = next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), "")
    return str(prompt or "")


class OneAtATime:
    """``fn(prompt_ids, completion_ids, example=row, outcome=None)``: one completion scored as a
    batch of one by the subclass's ``score_batch`` (the trainer's per-completion convention;
    every credit source has both)."""

    def __call__(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], example: dict | None = None,
        outcome: float | None = None,
    ) -> SegmentRewards | None:
        if example is None:
            raise ValueError(f"{type(self).__name__} needs the completion's dataset row "
                             "(example=...) with its reference answer")
        return self.score_batch([prompt_ids], [completion_ids], [example], [outcome])[0]


class PolicyScorer:
    """A ``scorer`` property for a credit source holding the policy a trainer updates
    (``model``, ``tokenizer``, ``model_options``, ``name``): a ``Scorer`` on the unwrapped
    policy, made again when the trainer wraps or swaps it; device and dtype follow the model."""

    _scorer: Scorer | None = None
    name: str = "policy"

    @property
    def scorer(self) -> Scorer:
        model = unwrap(self.model)
        if self._scorer is None or self._scorer.model is not model:
            self._scorer = Scorer(model, self.tokenizer, self.model_options, name=self.name)
        param = next(model.parameters())
        self._scorer.device, self._scorer.dtype = param.device, param.dtype
        return self._scorer


class PolicySegmentRewards(OneAtATime):
    """``segment_rewards_fn`` of the trainer: RREDCoT segment rewards from the current policy.

    ``model`` is the policy object given to the trainer (the trainer updates it in place, so
    every call scores with the current weights; a PEFT model scores with its adapters);
    ``tokenizer`` the trainer's. Each completion comes with its dataset row (``answer``,
    optional ``solution``, ``prompt``, ``problem_id``). ``options``: any ``RredcotOptions``
    (``sum_to`` is set to "advantage"); when given, ``value``, ``exit_string`` and
    ``length_norm`` are not used.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        segments: int | str = 8,
        value: str = "rhat",
        exit_string: str | None = None,
        length_norm: bool = False,
        model_options: ModelOptions | None = None,
        name: str = "policy",
        terminal_in_weights: bool = True,
        options: RredcotOptions | None = None,
    ):
        if options is None:
            options = RredcotOptions(value=value, length_norm=length_norm,
                                     forcing=ForcingOptions(exit_string=exit_string))
        self.options = dataclasses.replace(options, sum_to="advantage").validate()
        self.online = OnlineRredcot(
            model, tokenizer, self.options, segments=segments, model_options=model_options,
            on_unscorable="skip", name=name,
        )
        self.segment_options = self.online.segment_options
        # False: return g_k - g_{k-1} (the terminal correction kept out of what weights read)
        self.terminal_in_weights = terminal_in_weights
        self.calls = 0  # completions scored (or tried)
        self.failures = 0  # completions a probe could not be built for (plain advantage kept)
        self._warned: set[str] = set()
        self.last: ScoredCompletion | None = None

    @property
    def model(self):
        """The policy being scored (the object the trainer updates)."""
        return self.online.model

    @model.setter
    def model(self, model) -> None:
        self.online.model = model

    @property
    def scorer(self) -> Scorer:
        """The ``Scorer`` on the policy (device and dtype follow the model)."""
        return self.online.scorer

    def score_batch(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        examples: Sequence[dict],
        outcomes: Sequence[float | None] | None = None,
    ) -> list[SegmentRewards | None]:
        """(rewards, spans) or None per completion, all scored together."""
        for e in examples:
            if e is None or e.get("answer") is None:
                raise ValueError(
                    "PolicySegmentRewards needs each completion's dataset row with its "
                    "reference answer"
                )
        self.calls += len(prompt_ids)
        credits = self.online(
            prompt_ids, completion_ids,
            [str(e["answer"]) for e in examples],
            [e.get("solutions") or e.get("solution") or None for e in examples],
            outcomes,
            [prompt_text(e) for e in examples],
        )
        for message in self.online.last_errors.values():
            self.failures += 1
            if message not in self._warned:
                self._warned.add(message)
                warnings.warn(
                    "RREDCoT scoring skipped a completion (it keeps its plain advantage): "
                    f"{message}",
                    stacklevel=2,
                )
        return [self._result(c) for c in credits]

    def _result(self, credit: CompletionCredit | None) -> SegmentRewards | None:
        if credit is None:
            return None
        self.last = ScoredCompletion(
            credit.encoded, credit.outcome, credit.g, credit.rewards, credit.spans
        )
        if not self.terminal_in_weights:
            return value_difference_rewards(credit.g), list(credit.spans)
        return list(credit.rewards), list(credit.spans)
