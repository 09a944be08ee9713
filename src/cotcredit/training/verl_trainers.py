"""verl's PPO/GRPO trainers with RREDCoT segment credit: the v1 trainer (verl's default) and
the legacy ``RayPPOTrainer`` (``trainer.use_v1=false``, deprecated by verl).

    python -m cotcredit.training.verl_trainers --config-path "$PWD/examples/verl" \
        --config-name rredcot data.train_files=train.parquet ...

is verl's ``main_ppo`` with two changes: the actor workers are ``verl_workers``'
``RredcotActorRolloutRefWorker`` (verl's worker plus ``compute_segment_credit``), and the trainer
runs, in its advantage step when ``algorithm.adv_estimator=rredcot``:

1. ``rows_to_score``: verl's GRPO advantage of every completion, from its score; those with
   advantage 0 are not scored. Done in the trainer process on the scores alone.
2. ``actor_rollout_wg.compute_segment_credit``: the workers score their data-parallel shares
   with the actor's current weights (or the reference weights) — the trainer process holds no
   model.
3. verl's own advantage step, with the credit handed to the estimator ``rredcot``.

v1 (``with_segment_credit(trainer_cls)``, any of verl's registered trainer modes): the rows go
to the workers through verl's TransferQueue (the workers read them and write the credit back);
legacy (``RredcotRayPPOTrainer``): the rows go as a TensorDict, and ``fit``'s call of
``ray_trainer.compute_advantage`` is routed through the hook in the trainer's process only.
Metrics ``rredcot/scored_fraction``, ``rredcot/segments_mean``, ``rredcot/seconds`` are logged
with verl's.
"""

from __future__ import annotations

import contextlib
import time
from functools import cache

import numpy as np
import torch

from cotcredit.extras import require
from cotcredit.training import verl_workers
from cotcredit.training.verl import (
    ESTIMATOR,
    OPTIONS,
    OUTCOME,
    REWARDS,
    SCORE,
    SPANS,
    credit_handed_to_estimator,
    credit_metrics,
    credit_options,
    options_dict,
    rows_to_score,
)

require("the verl integration", "verl")  # one line naming the install, not a traceback
import ray  # noqa: E402
from verl.trainer.ppo import ray_trainer  # noqa: E402
from verl.trainer.ppo.utils import Role  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

__all__ = ["RredcotTrainerMixin", "advantage_with_credit", "main", "with_segment_credit"]

_ACTOR_ROLES = (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef)


def _estimator_is_rredcot(value) -> bool:
    return str(getattr(value, "value", value)) == ESTIMATOR


def _with_credit_workers(mapping: dict) -> None:
    """Give the actor roles of a role → Ray worker class mapping ``compute_segment_credit``."""
    for role in _ACTOR_ROLES:
        if role in mapping:
            base = mapping[role].__ray_actor_class__
            mapping[role] = ray.remote(verl_workers.with_credit_worker(base))


# ---- v1 ------------------------------------------------------------------------------------
class RredcotTrainerMixin:
    """Segment credit for a v1 ``PPOTrainer`` (see the module doc); ``with_segment_credit``
    puts it in front of a registered trainer class."""

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        _with_credit_workers(self.role_worker_mapping)

    def _compute_advantage(self, batch, metrics: dict):
        if not _estimator_is_rredcot(self.config.algorithm.adv_estimator):
            return super()._compute_advantage(batch, metrics)
        import transfer_queue as tq
        from transfer_queue import KVBatchMeta

        start = time.perf_counter()
        section = options_dict(self.config.algorithm.get("rredcot", None))
        options = credit_options(section)
        keys, partition = batch.keys, batch.partition_id
        seen = tq.kv_batch_get(keys=keys, partition_id=partition,
                               select_fields=["uid", "rm_scores", "response_mask"])
        uids = [str(u) for u in seen["uid"]]
        padded = seen.select("rm_scores", "response_mask").to_padded_tensor()
        mask = padded["response_mask"]
        score, outcome = rows_to_score(
            padded["rm_scores"], mask, np.array(uids, dtype=object),
            bool(self.config.algorithm.get("norm_adv_by_std_in_grpo", True)),
        )
        tq.kv_batch_put(keys=keys, partition_id=partition,
                        fields=tu.get_tensordict({SCORE: score, OUTCOME: outcome}))
        self.actor_rollout_wg.compute_segment_credit(
            KVBatchMeta(keys=list(keys), tags=list(batch.tags), partition_id=partition,
                        extra_info={OPTIONS: section})
        )
        credit = tq.kv_batch_get(keys=keys, partition_id=partition, select_fields=[REWARDS, SPANS])
        rewards, spans = list(credit[REWARDS]), list(credit[SPANS])
        metrics.update(credit_metrics(rewards, len(keys)))
        metrics["rredcot/seconds"] = time.perf_counter() - start
        with credit_handed_to_estimator(uids, mask, rewards, spans, options):
            return super()._compute_advantage(batch, metrics)


@cache
def with_segment_credit(trainer_cls: type) -> type:
    """The v1 trainer class ``trainer_cls`` (e.g. ``PPOTrainerSync``) with segment credit."""
    return type(f"Rredcot{trainer_cls.__name__}", (RredcotTrainerMixin, trainer_cls), {})


# ---- legacy RayPPOTrainer ----------------------------------------------------------------------
def legacy_rows(data, norm_adv_by_std_in_grpo: bool = True) -> tuple[dict, list[str], torch.Tensor]:
    """What the workers get from a legacy rollout batch (a padded ``DataProto``): unpadded
    prompts and responses, the scoring flags and outcomes, ground truth and extra info."""
    batch = data.batch
    prompts, responses = batch["prompts"], batch["responses"]
    mask = batch["response_mask"] if "response_mask" in batch.keys() else (
        batch["attention_mask"][:, -responses.shape[1]:]
    )
    prompt_mask = batch["attention_mask"][:, : prompts.shape[1]].bool()
    scores = batch["token_level_scores"] if "token_level_scores" in batch.keys() else (
        batch["token_level_rewards"]
    )
    uids = [str(u) for u in data.non_tensor_batch["uid"]]
    score, outcome = rows_to_score(scores, mask, data.non_tensor_batch["uid"],
                                   norm_adv_by_std_in_grpo)
    lengths = mask.sum(dim=1).tolist()

    def jagged(rows):
        return torch.nested.as_nested_tensor(rows, layout=torch.jagged)

    fields = {
        "prompts": jagged([prompts[i][prompt_mask[i]] for i in range(len(uids))]),
        "responses": jagged([responses[i, : int(n)] for i, n in enumerate(lengths)]),
        "response_mask": jagged([mask[i, : int(n)] for i, n in enumerate(lengths)]),
        SCORE: score, OUTCOME: outcome,
    }
    for key in ("reward_model", "extra_info"):
        if key in data.non_tensor_batch:
            fields[key] = list(data.non_tensor_batch[key])
    return fields, uids, mask


def advantage_with_credit(data, worker_group, **kwargs):
    """verl's ``compute_advantage(data, **kwargs)`` on a rollout batch in the legacy layout (a
    padded ``DataProto``), with segment credit from ``worker_group`` (actor workers with
    ``compute_segment_credit``) when ``kwargs["adv_estimator"]`` is ``rredcot``; options from
    ``kwargs["config"]``'s ``rredcot`` section. Returns (the batch, metrics)."""
    if not _estimator_is_rredcot(kwargs.get("adv_estimator")):
        return ray_trainer.compute_advantage(data, **kwargs), {}
    start = time.perf_counter()
    config = kwargs.get("config")
    section = options_dict(config.get("rredcot", None) if config is not None else None)
    options = credit_options(section)
    fields, uids, mask = legacy_rows(data, bool(kwargs.get("norm_adv_by_std_in_grpo", True)))
    rows = tu.get_tensordict(fields)
    tu.assign_non_tensor(rows, **{OPTIONS: section})
    credit = worker_group.compute_segment_credit(rows)
    rewards, spans = tu.get(credit, REWARDS), tu.get(credit, SPANS)
    metrics = credit_metrics(rewards, len(uids))
    metrics["rredcot/seconds"] = time.perf_counter() - start
    with credit_handed_to_estimator(uids, mask, rewards, spans, options):
        return ray_trainer.compute_advantage(data, **kwargs), metrics


class _LegacyHook:
    """The legacy trainer's hook: ``advantage_with_credit`` with the trainer's workers."""

    def _compute_advantage(self, data, **kwargs):
        data, self.rredcot_metrics = advantage_with_credit(data, self.actor_rollout_wg, **kwargs)
        return data


@contextlib.contextmanager
def _routed_compute_advantage(module, trainer):
    """``fit`` calls ``module.compute_advantage(batch, ...)``: route it to the trainer's hook."""
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


@cache
def _legacy_trainer_class() -> type:
    class RredcotRayPPOTrainer(_LegacyHook, ray_trainer.RayPPOTrainer):
        """verl's legacy ``RayPPOTrainer`` with segment credit (module doc)."""

        def fit(self, *args, **kwargs):
            self.rredcot_metrics = {}
            with _routed_compute_advantage(ray_trainer, self):
                return super().fit(*args, **kwargs)

    return RredcotRayPPOTrainer


# ---- entry point ---------------------------------------------------------------------------
@cache
def _task_runners() -> tuple:
    from verl.trainer import main_ppo, main_ppo_v0

    @ray.remote
    class RredcotTaskRunnerV1(main_ppo.TaskRunnerV1.__ray_actor_class__):
        def run(self, config):
            import verl.trainer.ppo.v1 as v1

            original = v1.get_trainer_cls
            v1.get_trainer_cls = lambda mode: with_segment_credit(original(mode))
            try:
                return super().run(config)
            finally:
                v1.get_trainer_cls = original

    @ray.remote(num_cpus=1)
    class RredcotTaskRunner(main_ppo_v0.TaskRunner.__ray_actor_class__):
        def add_actor_rollout_worker(self, config):
            out = super().add_actor_rollout_worker(config)
            _with_credit_workers(self.role_worker_mapping)
            return out

        def run(self, config):
            main_ppo_v0.RayPPOTrainer = _legacy_trainer_class()
            return super().run(config)

    return RredcotTaskRunnerV1, RredcotTaskRunner


def main() -> None:
    """verl's ``main_ppo`` (Hydra command line) with segment credit in both trainers."""
    from verl.trainer import main_ppo, main_ppo_v0

    main_ppo.TaskRunnerV1, main_ppo_v0.TaskRunner = _task_runners()
    main_ppo.main()


def __getattr__(name: str):
    if name == "RredcotRayPPOTrainer":  # imports verl's legacy trainer: on first use only
        return _legacy_trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
