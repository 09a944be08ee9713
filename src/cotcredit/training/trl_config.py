"""The TRL and peft objects a ``TrainConfig`` makes: ``trl.GRPOConfig`` (``to_grpo_config``,
its keyword arguments ``grpo_kwargs``) and peft's ``LoraConfig`` (``lora_config``).

Kept apart from the config's schema (``training.config``): these are the only places that read
the machine (CUDA, bf16 support) and import TRL or peft, and their mistakes (a ``grpo.extra``
key GRPOConfig does not take, TRL refusing a combination) are still one-line ``UserError``s
naming the config file.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import warnings
from typing import TYPE_CHECKING, Any

from cotcredit.errors import UserError
from cotcredit.extras import require

if TYPE_CHECKING:
    from cotcredit.training.config import TrainConfig


def grpo_config_fields() -> set[str]:
    """The field names of TRL's ``GRPOConfig`` (what ``grpo.extra`` may hold)."""
    import trl

    return {f.name for f in dataclasses.fields(trl.GRPOConfig)}


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _bf16_supported() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def grpo_kwargs(cfg: TrainConfig) -> dict[str, Any]:
    """The keyword arguments ``to_grpo_config`` passes to ``trl.GRPOConfig``."""
    options = cfg.grpo.model_dump(exclude={"extra"}, exclude_none=True)
    if options.get("bf16") is None:
        options["bf16"] = _bf16_supported()
    options.setdefault("logging_steps", 1)  # metrics.jsonl gets one line per step
    valid = grpo_config_fields()
    # transformers 5.24 renamed it (the old name is a deprecated alias there); before, only the
    # old name exists.
    if "gradient_checkpointing" in options and "activation_checkpointing" in valid:
        options["activation_checkpointing"] = options.pop("gradient_checkpointing")
    kwargs: dict[str, Any] = {"output_dir": str(cfg.output_dir), "seed": cfg.seed, **options}
    if not _cuda_available() and "use_cpu" not in cfg.grpo.extra:
        # Without it accelerate forms no process group on CPU: under torchrun/accelerate launch
        # each process would train alone (and write every log line twice).
        kwargs["use_cpu"] = True
    for key, value in cfg.grpo.extra.items():
        if key not in valid:
            close = difflib.get_close_matches(key, sorted(valid), n=1, cutoff=0.6)
            hint = f" (did you mean 'grpo.extra.{close[0]}'?)" if close else ""
            raise UserError(f"{cfg._source}: grpo.extra: '{key}' is not a GRPOConfig option{hint}")
        if key in type(cfg.grpo).model_fields or key in ("output_dir", "seed"):
            place = key if key in ("output_dir", "seed") else f"grpo.{key}"
            raise UserError(f"{cfg._source}: grpo.extra.{key}: set it as '{place}' instead")
        if key == "activation_checkpointing":
            raise UserError(f"{cfg._source}: grpo.extra.{key}: set 'grpo.gradient_checkpointing'")
        kwargs[key] = value
    return kwargs


def lora_config(cfg: TrainConfig):
    """peft's ``LoraConfig`` for ``cfg.lora`` (None when ``rank`` is 0)."""
    if cfg.lora.rank == 0:
        return None
    require(f"{cfg._source}: lora", "train", ["peft"])
    import peft
    return peft.LoraConfig(
        r=cfg.lora.rank,
        lora_alpha=cfg.lora.alpha,
        target_modules=cfg.lora.target_modules,
        lora_dropout=cfg.lora.dropout,
        task_type="CAUSAL_LM",
    )


def to_grpo_config(cfg: TrainConfig):
    """Build TRL's ``GRPOConfig``; TRL's own consistency checks become ``UserError``."""
    import trl

    kwargs = grpo_kwargs(cfg)
    if kwargs.get("use_vllm"):
        require(f"{cfg._source}: grpo.use_vllm", "vllm")
    try:
        with warnings.catch_warnings():
            # TRL's own default (gradient_checkpointing=True) trips transformers' rename warning.
            warnings.filterwarnings("ignore", message="`gradient_checkpointing` is deprecated")
            return trl.GRPOConfig(**kwargs)
    except (ValueError, TypeError) as exc:
        message = re.sub(r"\s+", " ", str(exc)).strip()
        raise UserError(f"{cfg._source}: grpo: {message}") from None
