"""GRPO with per-token advantages from RREDCoT segment rewards, on top of TRL's GRPOTrainer.

``RredcotGRPOTrainer`` is TRL's ``GRPOTrainer`` with one change: after TRL has generated and
scored a batch, in mode ``rredcot`` each completion's plain advantage ``A`` is replaced by a row
of per-token advantages (``advantages.batch_token_advantages``), computed from per-segment
rewards that a pluggable ``segment_rewards_fn(prompt_ids, completion_ids)`` returns. Everything
else (generation, vLLM, accelerate/DeepSpeed, loss, logging, checkpoints) is TRL's.

What TRL 1.16.0 does, read from ``trl/trainer/grpo_trainer.py`` (pinned: ``trl==1.16.*``; these
are private internals and move between releases):

- Data flow. The train dataloader yields a *generation batch* of
  ``per_device_train_batch_size × steps_per_generation`` rows (``steps_per_generation`` defaults
  to ``gradient_accumulation_steps``); ``RepeatSampler`` repeats each prompt ``num_generations``
  times in consecutive rows, so a group is ``num_generations`` adjacent rows, and the global
  generation batch (``generation_batch_size``) must be divisible by ``num_generations`` (checked
  in ``GRPOConfig.__post_init__``, as is ``num_generations >= 2``). ``_prepare_inputs`` calls
  ``_generate_and_score_completions(rows)`` once per generation batch, shuffles the result and
  splits it into ``steps_per_generation`` micro-batches that are buffered
  (``self._buffered_inputs``) and reused ``num_iterations`` times. In evaluation it is called per
  batch without buffering.
- ``_generate_and_score_completions(inputs: list[dict]) -> dict`` generates (``_generate``:
  transformers ``generate`` on ``unwrap_model_for_generation(self.model_wrapped, ...)``, or vLLM),
  computes old/ref log-probs when needed, calls the reward functions, computes the advantages
  and returns ``prompt_ids`` (B, P) left-padded with ``prompt_mask``; ``completion_ids`` (B, T)
  right-padded with the tokenizer's pad id and ``completion_mask`` (B, T) (1 on generated tokens
  up to and including the first EOS; all 0 for a truncated completion when
  ``mask_truncated_completions``); ``advantages`` **(B,)**; ``num_items_in_batch`` (0-d, tokens
  in the whole generation batch, all processes); optionally ``old_per_token_logps``,
  ``ref_per_token_logps`` (beta != 0), ``sampling_per_token_logps`` /
  ``importance_sampling_ratio`` (vLLM), ``tool_mask``, multimodal fields. B is this process's
  share of the generation batch; advantages are computed on the gathered rewards of all processes
  and then sliced to the local rows.
- Advantages: rewards = weighted sum over reward functions (``reward_weights``); ``A = r − mean
  of the group``, divided by ``std + 1e-4`` of the group (``scale_rewards="group"``, default), of
  the whole batch (``"batch"``) or not at all (``"none"``); NaN (all reward functions returned
  None) → 0. ``multi_objective_aggregation="normalize_then_sum"`` normalises per function first.
- Per-token advantages: ``_compute_loss`` unsqueezes the advantages *only if* they are 1-D
  (``if advantages.dim() == 1: advantages = advantages.unsqueeze(1)``, with a comment saying
  subclasses may supply (B, T)), so a (B, T) tensor passes through to every loss
  (``grpo``/``bnpo``/``dr_grpo``/``dapo``/``luspo`` clipped ratio, ``cispo``, ``sapo``, ``vespo``)
  and to the clip metrics. The off-policy mask, SAPO's temperatures, VESPO's gamma weights and
  the clip metrics branch on ``advantages > 0``/``>= 0`` per element, so they behave exactly as
  for plain GRPO when no token flips sign, which our formula guarantees. ``shuffle_sequence_dict``
  and ``split_tensor_dict`` index dim 0, so (B, T) survives buffering. The loss multiplies by
  ``completion_mask`` (× ``tool_mask``), so padding values do not matter (we set them to 0).
  The default ``loss_type`` is ``"dapo"`` (sum over tokens / tokens in the global batch).
- Reward functions are called as ``f(prompts=..., completions=..., completion_ids=...,
  **columns, trainer_state=..., log_extra=..., log_metric=...)``, one list entry per completion
  (prompts repeated per generation); ``columns`` are every dataset column except ``prompt``
  (e.g. ``answer``, ``solution``) — ``remove_unused_columns`` defaults to False in GRPOConfig.
  ``completions`` are strings, or ``[{"role": "assistant", "content": ...}]`` for
  conversational prompts. They must return one float (or None) per completion.
- Policy: ``self.model`` is the unwrapped model (the PEFT model under LoRA), ``self.model_wrapped``
  the DDP/DeepSpeed wrapper; TRL generates through ``unwrap_model_for_generation`` (gathers ZeRO-3
  parameters, disables gradient checkpointing) under ``torch.no_grad()`` and leaves the model in
  train mode. TRL patches the model's ``forward`` with a fused LM head that is active only with
  ``fused_lm_head=True``: a plain forward is unchanged.
- Logs: ``self._metrics[mode][name]`` lists, averaged and cleared in ``log()`` every
  ``logging_steps`` (``reward``, ``reward_std``, ``rewards/<func>/mean``, ``frac_reward_zero_std``,
  ``completions/*_length``, ``completions/clipped_ratio``, ``entropy``, ``kl``, ``clip_ratio/*``,
  ``num_tokens``, ``step_time``); they land in ``trainer.state.log_history`` and
  ``trainer_state.json``. ``log_completions=True`` writes per-completion parquet tables to
  ``output_dir/completions`` (with the scalar advantages). ``self._logs`` keeps the last
  generation batch's prompts, completions, rewards and scalar advantages.
- Checkpoints: ``transformers.Trainer`` machinery (``save_steps``, ``output_dir/checkpoint-N``
  with weights, optimizer, scheduler, RNG state, ``trainer_state.json``); ``_save_checkpoint``
  also writes a model card. ``trainer.train(resume_from_checkpoint=path_or_True)`` restores them
  and skips the consumed batches; the generation buffer is empty after resuming, so the first
  step regenerates.
- Config gotchas: ``GRPOConfig`` has no ``max_prompt_length`` (prompts are never truncated);
  ``bf16`` defaults to True and ``GRPOConfig()`` raises on a machine without a bf16 GPU unless
  ``bf16=False`` (or ``use_cpu=True``, which then trains in bf16 autocast on CPU);
  ``gradient_checkpointing`` defaults to True (slower for tiny models; transformers 5 warns it
  is renamed ``activation_checkpointing``); ``learning_rate`` defaults to 1e-6, ``beta`` to 0
  (no reference model), ``loss_type`` to ``"dapo"``, ``logging_steps`` to 10.
- CPU: works with ``use_cpu=True`` or ``bf16=False``; a 2-step run of a tiny random Llama takes
  seconds (see ``tests/test_train_smoke.py``).

The RREDCoT step (``_rredcot_advantages``) runs in training only (evaluation keeps TRL's scalar
advantages, so the eval loss stays comparable between modes). It skips completions whose
advantage is 0 (a group where every completion got the same reward) or that have no unmasked
tokens: there is nothing to redistribute, and scoring is the expensive part. It calls
``segment_rewards_fn`` once per remaining completion with the prompt's token ids (no padding)
and the completion's token ids (up to and including EOS) — and, when the callable accepts a
keyword ``example`` (or ``**kwargs``), the completion's dataset row (a dict with ``prompt``,
``answer``, ``solution``... as TRL received it; row i of TRL's output belongs to ``inputs[i]``) —
inside ``torch.no_grad()`` with the
policy unwrapped (ZeRO-3 parameters gathered) and in eval mode. The callable scores with the
*current* policy by holding a reference to the model object given to the trainer (the same
object as ``trainer.model`` unless PEFT wraps it, in which case build it from ``trainer.model``
after construction and assign ``trainer.segment_rewards_fn``). It returns the segment rewards
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
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation

from cotcredit.train.advantages import (
    DEFAULT_FLOOR,
    DEFAULT_STRENGTH,
    MODES,
    batch_token_advantages,
)

SegmentRewards = tuple[Sequence[float], Sequence[tuple[int, int]]]
SegmentRewardsFn = Callable[[list[int], list[int]], SegmentRewards | None]


class RredcotGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer whose advantages are per token, reweighted by segment rewards.

    Extra keyword arguments (all others go to ``GRPOTrainer``):
    ``advantage_mode`` — ``"grpo"`` (TRL unchanged) or ``"rredcot"``;
    ``segment_rewards_fn(prompt_ids, completion_ids[, example=row]) -> (rewards, spans) | None``
    — required in mode ``rredcot``; ``strength`` and ``floor`` — see ``advantages.segment_token_advantages``.
    """

    def __init__(
        self,
        *args,
        advantage_mode: str = "rredcot",
        segment_rewards_fn: SegmentRewardsFn | None = None,
        strength: float = DEFAULT_STRENGTH,
        floor: float = DEFAULT_FLOOR,
        **kwargs,
    ):
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
        self.rredcot_seconds_total = 0.0  # this process's seconds in segment_rewards_fn so far
        self._scoring_examples = None
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.advantage_mode == "rredcot" and self.model.training:
            self._scoring_examples = inputs  # row i of the output is inputs[i] (TRL keeps order)
            try:
                output["advantages"] = self._rredcot_advantages(output)
            finally:
                self._scoring_examples = None
        return output

    def _wants_example(self) -> bool:
        """Whether ``segment_rewards_fn`` takes the dataset row as keyword ``example``."""
        fn = self.segment_rewards_fn
        if getattr(self, "_signature_of", None) is not fn:
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
        examples = getattr(self, "_scoring_examples", None)
        pass_example = (
            examples is not None and len(examples) == len(plain) and self._wants_example()
        )
        start = time.perf_counter()
        with self._policy_for_scoring():
            for i, (a, n) in enumerate(zip(plain, lengths, strict=True)):
                if a == 0.0 or n == 0:
                    continue
                extra = {"example": examples[i]} if pass_example else {}
                result = self.segment_rewards_fn(
                    prompt_ids[i][prompt_mask[i]].tolist(),
                    completion_ids[i, : int(n)].tolist(),
                    **extra,
                )
                if result is not None:
                    rewards[i], spans[i] = result
                    n_segments.append(len(rewards[i]))
        seconds = time.perf_counter() - start
        self.rredcot_seconds_total += seconds
        try:
            token_advantages = batch_token_advantages(
                advantages,
                rewards,
                spans,
                completion_mask,
                mode="rredcot",
                strength=self.strength,
                floor=self.floor,
            )
        except ValueError as exc:
            raise ValueError(f"segment_rewards_fn returned unusable segments: {exc}") from exc
        self._log_rredcot(advantages, token_advantages, completion_mask, n_segments, seconds)
        return token_advantages

    def _log_rredcot(self, advantages, token_advantages, completion_mask, n_segments, seconds):
        """Metrics, averaged over processes: how many completions were scored, and how much the
        per-token advantages spread around the plain one (max/min of a_t / A over a completion)."""
        mask = completion_mask.bool()
        nonzero = (advantages != 0) & mask.any(dim=1)
        ratio = token_advantages / advantages.unsqueeze(1).where(nonzero.unsqueeze(1), 1.0)
        spread_max = ratio.masked_fill(~mask, -torch.inf).amax(dim=1)[nonzero]
        spread_min = ratio.masked_fill(~mask, torch.inf).amin(dim=1)[nonzero]
        local = torch.tensor(
            [
                len(n_segments),  # completions scored
                float(nonzero.sum()),  # completions with something to redistribute
                float(len(advantages)),
                float(sum(n_segments)),
                float(spread_max.sum()),
                float(spread_min.sum()),
                seconds,
            ],
            device=advantages.device,
        )
        totals = self.accelerator.gather(local).view(-1, local.numel()).sum(dim=0).tolist()
        scored, nonzero_n, total, segments, smax, smin, secs = totals
        metrics = self._metrics["train"]
        metrics["rredcot/scored_fraction"].append(scored / max(total, 1.0))
        metrics["rredcot/segments_mean"].append(segments / max(scored, 1.0))
        if nonzero_n:
            metrics["rredcot/token_adv_ratio_max"].append(smax / nonzero_n)
            metrics["rredcot/token_adv_ratio_min"].append(smin / nonzero_n)
        metrics["rredcot/scoring_seconds"].append(secs / self.accelerator.num_processes)
