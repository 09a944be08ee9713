"""The model shapes (real, and tiny twins for --small), what each part measures (`Plan`), and
random-weight models built from a shape."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM


@dataclass(frozen=True)
class Shape:
    """A decoder-only model shape (random weights are built from it)."""

    name: str
    family: str  # llama | qwen2 | gemma3
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    context: int  # the real model's context; longer traces are not measured
    head_dim: int | None = None
    window: int | None = None  # sliding window (gemma3: 5 sliding layers per full one)
    tied: bool = True
    rope_theta: float = 1e6


REAL = {
    s.name: s
    for s in (
        Shape("smollm2-135m", "llama", 576, 30, 9, 3, 1536, 49152, 8192, rope_theta=1e5),
        Shape("qwen2.5-1.5b", "qwen2", 1536, 28, 12, 2, 8960, 151936, 32768),
        Shape("qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, tied=False),
        Shape("gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, head_dim=256,
              window=512),
    )
}
# Tiny twins of the same families for --small (CPU, CI): same code paths, seconds.
SMALL = {
    s.name: s
    for s in (
        Shape("llama-tiny", "llama", 64, 2, 4, 2, 128, 4096, 2048),
        Shape("qwen2-tiny", "qwen2", 64, 2, 4, 2, 128, 4096, 2048, tied=False),
        Shape("gemma3-tiny", "gemma3", 64, 3, 4, 1, 128, 4096, 2048, head_dim=16, window=16),
    )
}


@dataclass(frozen=True)
class Plan:
    """What each part measures (real shapes on a GPU, or tiny ones with --small)."""

    agreement_models: tuple[str, ...]
    agreement_tokens: int
    agreement_segments: int
    speed_models: tuple[str, ...]
    speed_runs: tuple[tuple[int, tuple[int, ...]], ...]  # (trace tokens, segment counts K)
    naive_sample: int  # probes timed one by one when a trace is longer than naive_all_below
    naive_all_below: int
    generation_models: tuple[str, ...]
    generation_batches: tuple[int, ...]
    generation_new_tokens: int
    generation_samples: int  # completions per prompt (MC rollouts from one boundary)
    mc_models: tuple[str, ...]
    mc_tokens: int  # trace length of the Monte Carlo part
    mc_segments: int
    mc_rollouts: int  # per boundary
    mc_new_tokens: int
    bench_regimes: tuple[str, ...]
    bench_size: str | tuple[int, int, int]  # a named size, or (problems, samples, rollouts)
    train_model: str
    train_completion: int
    train_generations: int
    train_batch: int
    budget: float


REAL_PLAN = Plan(
    agreement_models=("smollm2-135m", "qwen2.5-1.5b", "gemma3-1b", "qwen2.5-7b"),
    agreement_tokens=1024,
    agreement_segments=16,
    speed_models=("qwen2.5-1.5b", "qwen2.5-7b", "gemma3-1b", "smollm2-135m"),
    speed_runs=((1024, (16, 64)), (8192, (16, 64)), (32768, (64,))),
    naive_sample=4,
    naive_all_below=2048,
    generation_models=("qwen2.5-1.5b",),  # the mc part compares generate with the rollouts
    generation_batches=(8, 64),
    generation_new_tokens=128,
    generation_samples=4,
    mc_models=("smollm2-135m", "qwen2.5-7b"),
    mc_tokens=1024,  # the demo's work per trace: 8 rollouts from 9 boundaries, 64 new tokens
    mc_segments=8,
    mc_rollouts=8,
    mc_new_tokens=64,
    bench_regimes=("unique", "multipath", "forecast", "long"),
    bench_size="quick",
    train_model="smollm2-135m",
    train_completion=64,
    train_generations=4,
    train_batch=8,
    budget=540.0,
)
SMALL_PLAN = Plan(
    agreement_models=("llama-tiny", "qwen2-tiny", "gemma3-tiny"),
    agreement_tokens=160,
    agreement_segments=6,
    speed_models=("llama-tiny", "gemma3-tiny"),
    speed_runs=((128, (4, 8)), (512, (4, 8))),
    naive_sample=3,
    naive_all_below=256,
    generation_models=("llama-tiny",),
    generation_batches=(2, 8),
    generation_new_tokens=16,
    generation_samples=2,
    mc_models=("llama-tiny",),
    mc_tokens=160,
    mc_segments=4,
    mc_rollouts=2,
    mc_new_tokens=8,
    bench_regimes=("unique",),
    bench_size=(2, 1, 2),
    train_model="llama-tiny",
    train_completion=16,
    train_generations=2,
    train_batch=4,
    budget=60.0,
)


def only_models(plan: Plan, keep: list[str]) -> Plan:
    """The plan restricted to the shapes in `keep` (training uses the first kept one when its
    own shape is not kept)."""
    def pick(names):
        return tuple(n for n in names if n in keep)

    return dataclasses.replace(
        plan, agreement_models=pick(plan.agreement_models), speed_models=pick(plan.speed_models),
        generation_models=pick(plan.generation_models), mc_models=pick(plan.mc_models),
        train_model=plan.train_model if plan.train_model in keep else keep[0],
    )


def parse_ints(text: str | None) -> list[int]:
    values = [int(v) for v in (text or "").split(",") if v.strip()]
    if any(v < 1 for v in values):
        raise ValueError(text)
    return values


def with_sizes(plan: Plan, tokens: list[int], segments: list[int]) -> Plan:
    """The plan with other trace lengths and/or segment counts."""
    runs = plan.speed_runs
    if tokens:
        ks = segments or sorted({k for _, group in runs for k in group})
        runs = tuple((n, tuple(ks)) for n in tokens)
    elif segments:
        runs = tuple((n, tuple(segments)) for n, _ in runs)
    return dataclasses.replace(
        plan, speed_runs=runs,
        agreement_tokens=tokens[0] if tokens else plan.agreement_tokens,
        agreement_segments=segments[0] if segments else plan.agreement_segments,
    )


def build_config(shape: Shape):
    """The transformers config of a shape, with room for probes after its longest trace."""
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, max_position_embeddings=shape.context + 1024,
        tie_word_embeddings=shape.tied, bos_token_id=1, eos_token_id=2, pad_token_id=2,
    )
    rope = {"rope_type": "default", "rope_theta": shape.rope_theta}
    if shape.family == "llama":
        return LlamaConfig(**common, rope_parameters=rope)
    if shape.family == "qwen2":
        return Qwen2Config(**common, rope_parameters=rope)
    if shape.family == "gemma3":
        types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                 for i in range(shape.layers)]
        if "full_attention" not in types:  # a tiny twin still needs one global layer
            types[-1] = "full_attention"
        return Gemma3TextConfig(
            **common, head_dim=shape.head_dim, sliding_window=shape.window, layer_types=types,
            query_pre_attn_scalar=shape.head_dim,
            rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                             "full_attention": {"rope_type": "default", "rope_theta": 1e6}},
        )
    raise ValueError(f"unknown family {shape.family}")


def build_model(shape: Shape, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """A random-weight model of `shape`, initialised directly on `device`, in eval mode."""
    torch.manual_seed(seed)
    config = build_config(shape)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device).eval()
