"""GRPO with per-token advantages from RREDCoT segment rewards, on top of TRL's GRPOTrainer.

``RredcotGRPOTrainer`` is TRL's ``GRPOTrainer`` with one change: after TRL has generated and
scored a batch, in mode ``rredcot`` each completion's plain advantage ``A`` is replaced by a row
of per-token advantages (``advantages.batch_token_advantages``), computed from per-segment
rewards that a pluggable ``segment_rewards_fn(prompt_ids, completion_ids)`` returns. Everything
else (generation, vLLM, accelerate/DeepSpeed, loss, logging, checkpoints) is TRL's.

What it overrides and why: ``_generate_and_score_completions`` (TRL's step that returns the
batch with one advantage per completion) is wrapped to replace ``advantages`` (B,) by (B, T)
token advantages; TRL's loss accepts per-token advantages unchanged, and no token changes sign,
so clipping and masks branch as for plain GRPO. These are private internals of the pinned
``trl==1.16.*``; docs/trl-internals.md records what they do there (data flow, where advantages
are computed and sliced per process, logs, checkpoints), to check against before an upgrade.

The RREDCoT step (``_rredcot_advantages``) runs in training only (evaluation keeps TRL's scalar
advantages, so the eval loss stays comparable between modes). It skips completions whose
advantage is 0 (a group where every completion got the same reward) or that have no unmasked
tokens: there is nothing to redistribute, and scoring is the expensive part. It calls
``segment_rewards_fn`` once per remaining completion with the prompt's token ids (no padding)
and the completion's token ids (up to and including EOS) — and, when the callable accepts a
keyword ``example`` (or ``**kwargs``), the completion's dataset row (a dict with ``prompt``,
``answer``, ``solution``... as TRL received it; row i of TRL's output belongs to ``inputs[i]``) —
inside ``torch.no_grad()`` with the
policy unwrapped (ZeRO-3 parameters gathered) and in eval mode. A callable with a method
``score_batch(prompt_ids, completion_ids, examples, outcomes)``
(``scoring.PolicySegmentRewards``) is called once for all those completions instead, with
``outcomes`` = each completion's total reward (TRL's weighted sum of the reward functions: the
return RREDCoT redistributes). The callable scores with the *current* policy by holding a
reference to the model object given to the trainer (the same object as ``trainer.model`` unless
PEFT wraps it: then point it at ``trainer.model`` after construction, as ``cotcredit train``
does). It returns the segment rewards
and their half-open token spans relative to the completion, or None when the completion cannot
be segmented (then the completion keeps the plain advantage). Multi-turn tool calling is not
supported in mode ``rredcot`` (tool tokens would sit inside the spans).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import torch

from cotcredit.extras import require
from cotcredit.training.advantages import (
    DEFAULT_FLOOR,
    DEFAULT_FORM,
    DEFAULT_STRENGTH,
    FORMS,
    MODES,
    batch_token_advantages,
    completion_key,
    group_scales,
    shuffled_rewards,
)

require("RredcotGRPOTrainer", "train", ["trl"])  # one line, not a traceback, without TRL
from trl import GRPOTrainer  # noqa: E402
from trl.models.utils import unwrap_model_for_generation  # noqa: E402

SegmentRewards = tuple[Sequence[float], Sequence[tuple[int, int]]]
SegmentRewardsFn = Callable[[list[int], list[int]], SegmentRewards | None]


class RredcotGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose advantages are per token, reweighted by segment rewards.

    Extra keyword arguments (all others go to ``GRPOTrainer``):
    ``advantage_mode`` — ``"grpo"`` (TRL unchanged) or ``"rredcot"``;
    ``segment_rewards_fn(prompt_ids, completion_ids[, example=row]) -> (rewards, spans) | None``
    — required in mode ``rredcot``; ``strength`` and ``floor`` — see ``advantages.segment_token_advantages``;
    ``shuffle_seed`` — not None: the shuffled control, each completion's rewards permuted before
    weighting (``advantages.shuffled_rewards``, keyed by the seed and the completion's token ids);
    ``form`` — ``"reweight"`` or ``"segment-rewards"`` (``advantages``); any credit source of
    ``credit`` serves as ``segment_rewards_fn``.
    """

    def __init__(
        self,
        *args,
        advantage_mode: str = "rredcot",
        segment_rewards_fn: SegmentRewardsFn | None = None,
        strength: float = DEFAULT_STRENGTH,
        floor: float = DEFAULT_FLOOR,
        shuffle_seed: int | None = None,
        form: str = DEFAULT_FORM,
        **kwargs,
    ):
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        if advantage_mode not in MODES:
            raise ValueError(f"advantage_mode must be one of {MODES}, got {advantage_mode!r}")
        if advantage_mode == "rredcot" and segment_rewards_fn is None:
            raise ValueError("advantage_mode='rredcot' needs a segment_rewards_fn")
        if advantage_mode == "rredcot" and (
            kwargs.get("tools") or kwargs.get("environment_factory")
        ):
            raise ValueError("advantage_mode='rredcot' does not support tools or environments")
        self.advantage_mode = advantage_mode
        self.segment_rewards_fn = segment_rewards_fn
        self.strength = strength
        self.floor = floor
        self.shuffle_seed = shuffle_seed
        self.form = form
        self.rredcot_seconds_total = 0.0  # this process's seconds in segment_rewards_fn so far
        self._scoring_examples = None
        self._rewards_per_func = None  # the last batch's rewards (all processes' rows)
        self._signature_of = None  # the segment_rewards_fn `_accepts_example` was read from
        self._accepts_example = False
        super().__init__(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._rewards_per_func = rewards
        return rewards

    def _reward_totals(self, n_local: int) -> list[float | None] | None:
        """Each local completion's total reward, weighted as TRL weights it (None where every
        reward function returned None), or None when the rewards are not at hand."""
        rewards = self._rewards_per_func
        if rewards is None:
            return None
        start = self.accelerator.process_index * n_local
        mine = rewards[start : start + n_local]
        if mine.shape[0] != n_local:
            return None
        totals = (mine * self.reward_weights.to(mine.device).unsqueeze(0)).nansum(dim=1)
        unscorable = torch.isnan(mine).all(dim=1)
        return [None if u else float(t) for t, u in zip(totals.tolist(), unscorable.tolist())]

    def _group_scales(self, advantages: list[float]) -> list[float]:
        """Per local completion, the factor its group normalisation divided the outcome by
        (``advantages.group_scales``; form ``segment-rewards`` needs it)."""
        rewards = self._rewards_per_func
        if rewards is None:
            raise ValueError("form 'segment-rewards' needs the batch's rewards")
        if getattr(self, "multi_objective_aggregation", "sum_then_normalize") != \
                "sum_then_normalize":
            raise ValueError("form 'segment-rewards' needs multi_objective_aggregation "
                             "'sum_then_normalize' (the advantage of the summed reward)")
        totals = (rewards * self.reward_weights.to(rewards.device).unsqueeze(0)).nansum(dim=1)
        totals[torch.isnan(rewards).all(dim=1)] = torch.nan
        offset = self.accelerator.process_index * len(advantages)
        return group_scales(advantages, totals.tolist(), self.num_generations, offset)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.advantage_mode == "rredcot" and self.model.training:
            self._scoring_examples = inputs  # row i of the output is inputs[i] (TRL keeps order)
            try:
                output["advantages"] = self._rredcot_advantages(output)
            finally:
                self._scoring_examples = None
                self._rewards_per_func = None
        return output

    def _wants_example(self) -> bool:
        """Whether ``segment_rewards_fn`` takes the dataset row as keyword ``example``."""
        fn = self.segment_rewards_fn
        if self._signature_of is not fn:
            try:
                params = inspect.signature(fn).parameters.values()
            except (TypeError, ValueError):
                params = []
            self._accepts_example = any(
                p.name == "example" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params
            )
            self._signature_of = fn
        return self._accepts_example

    @contextmanager
    def _policy_for_scoring(self):
        """The current policy, unwrapped, gradient-free and in eval mode, for the scorer."""
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as model,
            torch.no_grad(),
        ):
            was_training = model.training
            model.eval()
            try:
                yield model
            finally:
                model.train(was_training)

    def _rredcot_advantages(self, output: dict) -> torch.Tensor:
        advantages = output["advantages"]
        prompt_ids, prompt_mask = output["prompt_ids"].cpu(), output["prompt_mask"].cpu().bool()
        completion_ids, completion_mask = output["completion_ids"].cpu(), output["completion_mask"]
        lengths = completion_mask.sum(dim=1).tolist()
        plain = advantages.tolist()
        rewards: list[Sequence[float] | None] = [None] * len(plain)
        spans: list[Sequence[tuple[int, int]] | None] = [None] * len(plain)
        n_segments: list[int] = []
        examples = self._scoring_examples
        pass_example = (
            examples is not None and len(examples) == len(plain) and self._wants_example()
        )
        selected = [i for i, (a, n) in enumerate(zip(plain, lengths, strict=True)) if a and n]
        p_rows = [prompt_ids[i][prompt_mask[i]].tolist() for i in selected]
        c_rows = [completion_ids[i, : int(lengths[i])].tolist() for i in selected]
        batch_fn = getattr(self.segment_rewards_fn, "score_batch", None)
        start = time.perf_counter()
        with self._policy_for_scoring():
            if batch_fn is not None and pass_example:
                totals = self._reward_totals(len(plain))
                results = batch_fn(
                    p_rows, c_rows, [examples[i] for i in selected],
                    [totals[i] for i in selected] if totals is not None else None,
                )
            else:
                results = []
                for i, p_ids, c_ids in zip(selected, p_rows, c_rows):
                    extra = {"example": examples[i]} if pass_example else {}
                    results.append(self.segment_rewards_fn(p_ids, c_ids, **extra))
        for i, c_ids, result in zip(selected, c_rows, results, strict=True):
            if result is not None:
                rewards[i], spans[i] = result
                if self.shuffle_seed is not None:
                    rewards[i] = shuffled_rewards(
                        rewards[i], self.shuffle_seed, completion_key(c_ids)
                    )
                n_segments.append(len(rewards[i]))
        seconds = time.perf_counter() - start
        self.rredcot_seconds_total += seconds
        scales = self._group_scales(plain) if self.form == "segment-rewards" else None
        try:
            token_advantages = batch_token_advantages(
                advantages,
                rewards,
                spans,
                completion_mask,
                mode="rredcot",
                strength=self.strength,
                floor=self.floor,
                form=self.form,
                scales=scales,
            )
        except ValueError as exc:
            raise ValueError(f"segment_rewards_fn returned unusable segments: {exc}") from exc
        self._log_rredcot(advantages, token_advantages, completion_mask, n_segments, seconds)
        return token_advantages

    def _log_rredcot(self, advantages, token_advantages, completion_mask, n_segments, seconds):
        """Metrics, averaged over processes: the share of completions scored, segments per scored
        completion, and how much the per-token advantages spread around the plain one: max, min
        and standard deviation of the weights a_t / A over a completion's tokens."""
        mask = completion_mask.bool()
        nonzero = (advantages != 0) & mask.any(dim=1)
        ratio = token_advantages / advantages.unsqueeze(1).where(nonzero.unsqueeze(1), 1.0)
        spread_max = ratio.masked_fill(~mask, -torch.inf).amax(dim=1)[nonzero]
        spread_min = ratio.masked_fill(~mask, torch.inf).amin(dim=1)[nonzero]
        # The weights a_t / A have token-mean 1 by construction; their spread says how much
        # credit moved inside a completion (0: plain GRPO).
        n_tok = mask.sum(dim=1).clamp(min=1)
        centred = (ratio - 1.0).masked_fill(~mask, 0.0)
        weight_std = ((centred**2).sum(dim=1) / n_tok).sqrt()[nonzero]
        local = torch.tensor(
            [
                len(n_segments),  # completions scored
                float(nonzero.sum()),  # completions with something to redistribute
                float(len(advantages)),
                float(sum(n_segments)),
                float(spread_max.sum()),
                float(spread_min.sum()),
                float(weight_std.sum()),
                seconds,
            ],
            device=advantages.device,
        )
        totals = self.accelerator.gather(local).view(-1, local.numel()).sum(dim=0).tolist()
        scored, nonzero_n, total, segments, smax, smin, wstd, secs = totals
        metrics = self._metrics["train"]
        metrics["rredcot/scored_fraction"].append(scored / max(total, 1.0))
        metrics["rredcot/segments_mean"].append(segments / max(scored, 1.0))
        if nonzero_n:
            metrics["rredcot/token_adv_ratio_max"].append(smax / nonzero_n)
            metrics["rredcot/token_adv_ratio_min"].append(smin / nonzero_n)
            metrics["rredcot/weight_std"].append(wstd / nonzero_n)
        metrics["rredcot/scoring_seconds"].append(secs / self.accelerator.num_processes)
