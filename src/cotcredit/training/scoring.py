"""RREDCoT segment rewards of a freshly generated completion, scored by the current policy.

``PolicySegmentRewards`` is the ``segment_rewards_fn`` of ``RredcotGRPOTrainer`` in mode
``rredcot``. For one completion it takes the token ids TRL generated — no re-rendering, no
re-tokenization of the prompt — and runs the same path as ``cotcredit redistribute``, through
the same functions:

1. ``Scorer.encode_completion``: the completion's own ids after ``prompt_ids``, its reasoning
   cut by the one rule of ``cotcredit.encoding`` (the same tokens, segments and rewards as
   ``redistribute`` gives the same text).
2. ``Scorer.forward`` over prompt + reasoning with KV cache, statistics only from the reasoning
   on (no LM-head work on the prompt positions, which a short completion after a long prompt is
   mostly made of).
3. ``segment_encoded`` with ``SegmentOptions(segments=...)`` (its entropies).
4. ``methods.rredcot.estimate``: every probe packed on the KV cache of step 2, with the run's
   one exit string (``forcing.answer_forcing``: chosen from the model, not per completion).
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

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from cotcredit.encoding import EncodedTrace
from cotcredit.errors import UserError
from cotcredit.forcing import ForcingOptions
from cotcredit.grading import grade_completion
from cotcredit.lm import ModelOptions, Scorer
from cotcredit.methods.base import TraceContext
from cotcredit.methods.rredcot import RredcotOptions, estimate, redistribute_rewards
from cotcredit.methods.rredcot import reserve as rredcot_reserve
from cotcredit.segmentation import SegmentOptions, segment_encoded
from cotcredit.traces import Trace


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
        prompt = example.get("prompt")
        if isinstance(prompt, list):  # chat messages: the last user turn is the problem
            prompt = next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), "")
        trace = Trace(
            id=str(example.get("problem_id", "completion")),
            prompt=str(prompt or ""),
            response="",
            answer=str(example["answer"]),
            solution=example.get("solution") or None,
        )
        reserve = rredcot_reserve(scorer, trace, self.options)
        try:
            enc = scorer.encode_completion(trace, prompt_ids, completion_ids, reserve=reserve)
        except UserError:  # no reasoning before the answer, or too long for the context
            return None
        forward = scorer.forward(enc.ids, stats_from=enc.prompt_len)
        segmentation = segment_encoded(enc, forward.entropies, self.segment_options)
        ctx = TraceContext(scorer, enc, forward, segmentation)
        estimates = estimate(ctx, self.options)
        outcome = 1.0 if grade_completion(enc.trace.response, trace.answer).correct else 0.0
        rewards, _ = redistribute_rewards(estimates.g, outcome, sum_to="advantage")
        spans = [(s.token_start, s.token_end) for s in segmentation.segments]
        forward.cache = None
        self.last = ScoredCompletion(enc, outcome, list(estimates.g), list(rewards), spans)
        return list(rewards), spans
