"""RREDCoT scoring inside verl's actor workers, with the actor's current weights.

``RredcotActorRolloutRefWorker`` is verl's ``ActorRolloutRefWorker`` (the worker both verl
trainers build for the actor) with one more method, ``compute_segment_credit``, registered the
way verl registers ``compute_log_prob`` (``make_nd_compute_dataproto_dispatch_fn(mesh_name="actor")``):
the trainer's call is split over the data-parallel ranks, each rank scores its share, the
results are gathered back; with the v1 trainer the rows come from and go back to the
TransferQueue (verl's ``tqbridge``), with the legacy trainer as a TensorDict.

On each rank: the actor's full current weights are streamed from its training engine
(``engine.get_per_tensor_param()``, what verl uses to sync the rollout's weights every step;
collective, so every rank runs it) into a scoring copy of the model on this rank's device; the
rank scores its rows with ``OnlineRredcot`` (no collective: each rank's number of passes is its
own) and moves the copy to the host until the next call. With ``score_with: reference`` the copy
holds the starting weights (``model.path``), loaded once. Why a copy and not the sharded module:
a sharded (FSDP) forward is collective, and RREDCoT's passes depend on each rank's rows.

``score_rows`` is the rank's work on its rows (a TensorDict as verl hands it over) and can be
called on any ``OnlineRredcot``.
"""

from __future__ import annotations

import torch

from cotcredit.errors import UserError
from cotcredit.extras import require
from cotcredit.training.online import OnlineRredcot
from cotcredit.training.verl import (
    OPTIONS,
    OUTCOME,
    REWARDS,
    SCORE,
    SPANS,
    CreditOptions,
    credit_options,
)

require("the verl integration", "verl")  # one line naming the install, not a traceback
from tensordict import TensorDict  # noqa: E402
from verl.single_controller.base.decorator import (  # noqa: E402
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.engine_workers import ActorRolloutRefWorker  # noqa: E402

__all__ = ["CreditWorker", "RredcotActorRolloutRefWorker", "score_rows"]


def _rows(value) -> list[torch.Tensor]:
    """One 1-D tensor per row: jagged nested tensors unbound, a (B, T) tensor by rows (the
    TransferQueue returns equal-length rows as a plain tensor)."""
    return list(value.unbind()) if value.is_nested else list(value)


def _objects(data: TensorDict, key: str) -> list | None:
    if key not in data.keys():
        return None
    value = data[key]
    return list(value.tolist() if hasattr(value, "tolist") else value)


def _answer(row) -> str | None:
    value = row.get("ground_truth") if isinstance(row, dict) else row
    return None if value is None else str(value)


def _solution(row) -> str | list[str] | None:
    """The reference solution(s) of a row's ``extra_info``: its ``solutions`` list, else its
    ``solution``."""
    if not isinstance(row, dict):
        return None
    listed = row.get("solutions")
    if isinstance(listed, str):
        return [listed]
    return list(listed) if listed is not None and len(listed) else (row.get("solution") or None)


def score_rows(data: TensorDict, credit: OnlineRredcot) -> TensorDict:
    """Segment credit of the rows flagged ``rredcot_score``: ``rredcot_rewards`` and
    ``rredcot_spans`` per row ([] for rows not scored or that cannot be segmented).

    ``data`` holds per row ``prompts`` and ``responses`` (unpadded token ids, jagged or equal
    length), ``response_mask`` (optional; a response with masked tokens inside, e.g. tool
    output, is not scored), ``rredcot_score``, ``rredcot_outcome``, ``reward_model`` (its
    ``ground_truth`` is the reference answer) and optionally ``extra_info`` (``solution``)."""
    prompts, responses = _rows(data["prompts"]), _rows(data["responses"])
    masks = _rows(data["response_mask"]) if "response_mask" in data.keys() else None
    flags = data[SCORE].tolist()
    outcomes = data[OUTCOME].tolist()
    truth, extra = _objects(data, "reward_model"), _objects(data, "extra_info")
    chosen = [i for i, f in enumerate(flags)
              if f and (masks is None or bool(masks[i].bool().all()))]
    rewards: list[list[float]] = [[] for _ in flags]
    spans: list[list[list[int]]] = [[] for _ in flags]
    if chosen:
        if truth is None:
            raise UserError("verl batch: no 'reward_model' column; RREDCoT needs "
                            "reward_model.ground_truth (the reference answer)")
        answers = [_answer(truth[i]) for i in chosen]
        missing = next((i for i, a in zip(chosen, answers) if a is None), None)
        if missing is not None:
            raise UserError(f"verl batch row {missing}: reward_model has no ground_truth")
        results = credit(
            [prompts[i].tolist() for i in chosen], [responses[i].tolist() for i in chosen],
            answers, [_solution(extra[i]) if extra is not None else None for i in chosen],
            [outcomes[i] for i in chosen],
        )
        for i, result in zip(chosen, results):
            if result is not None:
                rewards[i] = [float(r) for r in result.rewards]
                spans[i] = [[int(a), int(b)] for a, b in result.spans]
    return tu.get_tensordict({REWARDS: rewards, SPANS: spans})


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
        else torch.device("cpu")


def _dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


class CreditWorker:
    """The scoring method; mixed into verl's actor worker classes (see the module doc)."""

    _rredcot_copy = None  # (source, model) kept between calls

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_segment_credit(self, data: TensorDict) -> TensorDict | None:
        """Segment credit of this rank's rows (``score_rows``), scored with the actor's current
        weights or the reference weights (``algorithm.rredcot.score_with``)."""
        options = credit_options(tu.get(data, OPTIONS, default=None))
        engine = self.actor.engine
        model = self._rredcot_model(engine, options)  # collective for the actor's weights
        try:
            if not engine.is_mp_src_rank_with_outputs():
                return None  # a rank whose outputs verl does not collect (sequence parallel)
            credit = OnlineRredcot(
                model, engine.model_config.tokenizer, options.rredcot,
                segments=options.segments, on_unscorable="skip",
                max_batch_tokens=options.max_batch_tokens, name=options.score_with,
            )
            return score_rows(data, credit)
        finally:
            if model.device.type != "cpu":  # give the device back to training
                model.to("cpu")
                torch.cuda.empty_cache()

    def _rredcot_model(self, engine, options: CreditOptions):
        """The scoring copy on this rank's device, holding the weights to score with."""
        from transformers import AutoModelForCausalLM

        device = _device()
        dtype = _dtype(options.dtype, device)
        source = (options.score_with, dtype)
        kept = self._rredcot_copy
        if options.score_with == "reference":
            if kept is None or kept[0] != source:
                path = engine.model_config.local_path or engine.model_config.path
                model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
                self._rredcot_copy = kept = (source, model.eval())
            return kept[1].to(device)
        if kept is None or kept[0] != source:
            with torch.device(device):
                model = AutoModelForCausalLM.from_config(engine.model_config.hf_config,
                                                         dtype=dtype)
            self._rredcot_copy = kept = (source, model.eval())
        model = kept[1].to(device)
        load_current_weights(model, engine)
        return model


def load_current_weights(model: torch.nn.Module, engine) -> None:
    """Copy the engine's full current weights (HF names) into ``model``, every parameter."""
    tensors, adapter = engine.get_per_tensor_param()
    if adapter is not None:
        raise UserError(
            "algorithm.rredcot: scoring a LoRA actor needs its merged weights; set "
            "actor_rollout_ref.model.lora.merge=true"
        )
    params = dict(model.named_parameters(remove_duplicate=False))
    filled: set[int] = set()
    with torch.no_grad():
        for name, tensor in tensors:
            target = params.get(name)
            if target is None:
                raise UserError(f"algorithm.rredcot: the actor's weight {name!r} is not in the "
                                f"scoring model ({type(model).__name__})")
            target.copy_(tensor)
            filled.add(id(target))
    left = sorted(n for n, p in params.items() if id(p) not in filled)
    if left:
        raise UserError(f"algorithm.rredcot: the actor's weights lack {', '.join(left[:3])}")


class RredcotActorRolloutRefWorker(CreditWorker, ActorRolloutRefWorker):
    """verl's ``ActorRolloutRefWorker`` with ``compute_segment_credit``."""


def with_credit_worker(worker_cls: type) -> type:
    """``worker_cls`` (a verl actor worker class) with ``compute_segment_credit``."""
    if issubclass(worker_cls, CreditWorker):
        return worker_cls
    if worker_cls is ActorRolloutRefWorker:
        return RredcotActorRolloutRefWorker
    return type(f"Rredcot{worker_cls.__name__}", (CreditWorker, worker_cls), {})
