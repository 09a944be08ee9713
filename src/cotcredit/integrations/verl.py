"""RREDCoT segment credit in verl: an advantage estimator ``rredcot`` and the trainer hook.

verl's GRPO sums a completion's token-level rewards into one score and normalises it within the
prompt's group; an advantage estimator is given only ``token_level_rewards``, ``response_mask``,
``index`` (the group ids) and ``config``. Segment credit therefore reaches the estimator from a
hook that runs on the rollout batch just before verl computes advantages:

1. ``attach_segment_credit(data, credit)`` — the hook. For every completion whose GRPO advantage
   is not 0 it scores the completion with ``cotcredit.online.OnlineRredcot`` (prompt ids from
   ``prompts`` without padding, completion ids from ``responses`` up to ``response_mask``, the
   reference answer from ``reward_model["ground_truth"]``, an optional reference solution from
   ``extra_info["solution"]``) and redistributes the completion's own reward: ζ = the sum of its
   ``token_level_scores`` (the reward function's score, before any KL penalty; else
   ``token_level_rewards``). The segment rewards and spans go into ``non_tensor_batch``
   (``rredcot_rewards``, ``rredcot_spans``) and are handed to the estimator.
2. ``compute_rredcot_advantage`` — registered in verl's registry as ``rredcot``
   (``register_adv_est``), so ``algorithm.adv_estimator=rredcot`` selects it. It computes verl's
   own GRPO advantage ``A`` (``core_algos.compute_grpo_outcome_advantage``, with
   ``algorithm.norm_adv_by_std_in_grpo``) and moves it between the segments exactly as
   ``cotcredit train`` does (``cotcredit.token_advantages``): every completion's total
   Σ_t a_t = A · n (verl's GRPO total), no token changes sign, and ``strength: 0`` returns verl's
   GRPO advantages unchanged. Completions without credit (no reasoning, A = 0) keep plain GRPO.
3. ``RredcotRayPPOTrainer`` — verl's ``RayPPOTrainer`` whose ``_compute_advantage(batch, ...)``
   runs the hook and then verl's ``compute_advantage``. verl 0.9's ``fit`` calls the module
   function ``ray_trainer.compute_advantage`` directly, so during ``fit`` that name is routed to
   this method (in the trainer's own process only). Options under ``algorithm.rredcot``:
   ``model`` (weights that score; default: ``actor_rollout_ref.model.path``), ``segments``,
   ``value``, ``strength``, ``floor``, ``device``.

Where the scoring forward runs: in the process that runs ``fit`` (verl's single controller, the
``TaskRunner`` actor), on ``algorithm.rredcot.device``, with its own copy of the weights, loaded
once: the initial policy (= the frozen reference) unless ``model`` names other weights or a
``credit=`` object bound to another model is given. It does not see the actor's updates: the
credit comes from the frozen starting policy, unlike ``cotcredit train``, which scores with the
current policy. Cost per batch: one forward over prompt + reasoning of each scored completion,
plus packed probe passes of (segments + 1) × |exit string + answer| tokens each (twice that and
the solution's length with ``value: both``); with the 135M embedded model, 32 completions of
12k tokens in all took 210 s on 2 busy CPU cores (``benchmarks/bench_online.py``): give that
process a GPU. Needs verl (``pip install --no-deps verl==0.9.1``) and ``cotcredit[verl]``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo import core_algos

from cotcredit.online import OnlineRredcot, token_advantages
from cotcredit.training.advantages import DEFAULT_FLOOR, DEFAULT_STRENGTH

ESTIMATOR = "rredcot"

# Segment credit of a batch, keyed by its token_level_rewards tensor (the object verl hands the
# estimator): {id(tensor): (weakref to it, rewards, spans, strength, floor)}.
_CREDIT: dict[int, tuple] = {}


def _grpo(token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo, config):
    return core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=token_level_rewards,
        response_mask=response_mask,
        index=index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        config=config,
    )[0]


def _norm_by_std(config, default: bool = True) -> bool:
    return bool(config.get("norm_adv_by_std_in_grpo", default)) if config is not None else default


def _row_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A per completion, read where GRPO wrote it (its first response token), bit for bit."""
    first = response_mask.long().argmax(dim=1, keepdim=True)
    return advantages.gather(1, first)[:, 0]


@core_algos.register_adv_est(ESTIMATOR)
def compute_rredcot_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``rredcot``: verl's GRPO advantage, reweighted per token by the
    segment credit ``attach_segment_credit`` attached to this batch (see the module doc).
    Returns (advantages, returns), both (bs, response_length), as verl's GRPO does."""
    entry = _CREDIT.pop(id(token_level_rewards), None)
    if entry is None or entry[0]() is not token_level_rewards:
        raise ValueError(
            "adv_estimator 'rredcot': no segment credit attached to this batch; train with "
            "cotcredit.integrations.verl.RredcotRayPPOTrainer, or call attach_segment_credit(data, "
            "credit) before compute_advantage"
        )
    _, rewards, spans, strength, floor = entry
    grpo = _grpo(token_level_rewards, response_mask, index, epsilon, _norm_by_std(config), config)
    plain = _row_advantages(grpo, response_mask)
    advantages = token_advantages(
        plain, rewards, spans, response_mask, strength=strength, floor=floor
    )
    return advantages, advantages


def _ground_truth(row) -> str | None:
    if isinstance(row, dict):
        value = row.get("ground_truth")
        return None if value is None else str(value)
    return None if row is None else str(row)


def _solution(row) -> str | None:
    return (row.get("solution") or None) if isinstance(row, dict) else None


def attach_segment_credit(
    data: DataProto,
    credit: OnlineRredcot,
    *,
    strength: float = DEFAULT_STRENGTH,
    floor: float = DEFAULT_FLOOR,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> dict[str, float]:
    """The hook: segment credit of the batch's completions for the ``rredcot`` estimator.

    ``data`` is verl's rollout batch after rewards (``prompts``, ``responses``,
    ``attention_mask``, ``response_mask``, ``token_level_rewards``, non-tensor ``uid`` and
    ``reward_model``). Only completions with a nonzero GRPO advantage are scored. Returns
    metrics (``rredcot/scored_fraction``, ``rredcot/segments_mean``).
    """
    batch = data.batch
    rewards_t = batch["token_level_rewards"]
    prompts, responses = batch["prompts"], batch["responses"]
    response_mask = batch["response_mask"] if "response_mask" in batch.keys() else (
        batch["attention_mask"][:, -responses.shape[1]:]
    )
    prompt_mask = batch["attention_mask"][:, : prompts.shape[1]].bool()
    index = data.non_tensor_batch["uid"]
    grpo = _grpo(rewards_t, response_mask, index, epsilon, norm_adv_by_std_in_grpo, None)
    plain = _row_advantages(grpo, response_mask).tolist()
    lengths = response_mask.sum(dim=1).tolist()
    scores = batch["token_level_scores"] if "token_level_scores" in batch.keys() else rewards_t
    outcome = scores.sum(dim=1).tolist()
    truth = data.non_tensor_batch.get("reward_model")
    extra = data.non_tensor_batch.get("extra_info")
    chosen = [i for i, (a, n) in enumerate(zip(plain, lengths)) if a != 0.0 and n > 0]
    seg_rewards: list[Sequence[float] | None] = [None] * len(plain)
    seg_spans: list[Sequence[tuple[int, int]] | None] = [None] * len(plain)
    if chosen:
        if truth is None:
            raise ValueError("attach_segment_credit: the batch has no 'reward_model' ground truth")
        answers = [_ground_truth(truth[i]) for i in chosen]
        missing = next((i for i, a in zip(chosen, answers) if a is None), None)
        if missing is not None:
            raise ValueError(f"row {missing}: reward_model has no ground_truth")
        results = credit(
            [prompts[i][prompt_mask[i]].tolist() for i in chosen],
            [responses[i, : int(lengths[i])].tolist() for i in chosen],
            answers,
            [_solution(extra[i]) if extra is not None else None for i in chosen],
            [outcome[i] for i in chosen],
        )
        for i, r in zip(chosen, results):
            if r is not None:
                seg_rewards[i], seg_spans[i] = r.rewards, r.spans
    data.non_tensor_batch["rredcot_rewards"] = _objects(seg_rewards)
    data.non_tensor_batch["rredcot_spans"] = _objects(seg_spans)
    for key in [k for k, v in _CREDIT.items() if v[0]() is None]:  # batches gone unscored
        del _CREDIT[key]
    _CREDIT[id(rewards_t)] = (weakref.ref(rewards_t), seg_rewards, seg_spans, strength, floor)
    scored = [r for r in seg_rewards if r is not None]
    return {
        "rredcot/scored_fraction": len(scored) / max(len(plain), 1),
        "rredcot/segments_mean": float(np.mean([len(r) for r in scored])) if scored else 0.0,
    }


def _objects(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _trainer_class():
    from verl.trainer.ppo import ray_trainer

    class RredcotRayPPOTrainer(ray_trainer.RayPPOTrainer):
        """verl's ``RayPPOTrainer`` with the RREDCoT hook before advantages (module doc).

        ``credit``: an ``OnlineRredcot`` to score with (default: built at first use from
        ``algorithm.rredcot``, weights loaded in this process).
        """

        def __init__(self, *args, credit: OnlineRredcot | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self.rredcot_credit = credit
            self.rredcot_metrics: dict[str, float] = {}

        def _rredcot_options(self) -> dict:
            section = self.config.algorithm.get("rredcot", None)
            return dict(section) if section is not None else {}

        def _credit(self) -> OnlineRredcot:
            if self.rredcot_credit is None:
                from cotcredit.lm import load_model_files, locate_model, resolve_device
                from cotcredit.methods.rredcot import RredcotOptions

                o = self._rredcot_options()
                name = o.get("model") or self.config.actor_rollout_ref.model.path
                path, label = locate_model(str(name))
                model, tokenizer = load_model_files(path, torch.float32, f"algorithm.rredcot.model {name}")
                model.to(resolve_device(str(o.get("device", "auto")))).eval()
                self.rredcot_credit = OnlineRredcot(
                    model, tokenizer,
                    RredcotOptions(value=o.get("value", "rhat"), sum_to="advantage"),
                    segments=o.get("segments", 8), on_unscorable="skip", name=label,
                )
            return self.rredcot_credit

        def _compute_advantage(self, data: DataProto, **kwargs) -> DataProto:
            """The hook, then verl's ``compute_advantage`` with the same arguments."""
            if str(getattr(kwargs.get("adv_estimator"), "value", kwargs.get("adv_estimator"))) == (
                ESTIMATOR
            ):
                o = self._rredcot_options()
                self.rredcot_metrics = attach_segment_credit(
                    data, self._credit(),
                    strength=float(o.get("strength", DEFAULT_STRENGTH)),
                    floor=float(o.get("floor", DEFAULT_FLOOR)),
                    norm_adv_by_std_in_grpo=bool(kwargs.get("norm_adv_by_std_in_grpo", True)),
                )
            return ray_trainer.compute_advantage(data, **kwargs)

        def fit(self, *args, **kwargs):
            with _routed_compute_advantage(ray_trainer, self):
                return super().fit(*args, **kwargs)

    return RredcotRayPPOTrainer


@contextlib.contextmanager
def _routed_compute_advantage(module, trainer):
    """`fit` calls `module.compute_advantage(batch, ...)`: route it to the trainer's hook."""
    original = module.compute_advantage

    def routed(data, **kwargs):
        module.compute_advantage = original  # the hook calls verl's own function
        try:
            return trainer._compute_advantage(data, **kwargs)
        finally:
            module.compute_advantage = routed

    module.compute_advantage = routed
    try:
        yield
    finally:
        module.compute_advantage = original


def __getattr__(name: str):
    # The trainer class imports verl's whole Ray trainer stack: built on first use only.
    if name == "RredcotRayPPOTrainer":
        cls = _trainer_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
