"""What sampling takes and gives: `SamplingOptions` (and `SamplingSettings`, the flags of the
commands that sample), the `Completion` record, the `Generator` interface every backend offers,
and the helpers the backends share (per-sample seeds and prompt keys, stop tokens, decoding a
continuation, vLLM engine arguments). The backends are `sampling` (transformers) and
`vllm_sampling`; `sampling.get_generator` picks one."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cotcredit.errors import UserError
from cotcredit.options import check_choices, option

BACKENDS = ("hf", "vllm")
_STOP_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>")


@dataclass(frozen=True)
class SamplingOptions:
    """How completions are sampled; the same object for rollouts, `generate` and the API."""

    n: int = 1  # samples per prompt
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # nucleus sampling mass (1: off)
    max_new_tokens: int = 1024
    seed: int = 0
    batch_size: int | None = None  # rows (prompt x sample) per generate call; None: automatic
    backend: str = "hf"  # hf | vllm
    # Index of the first sample: samples first_sample..first_sample+n-1 are drawn, each from its
    # own stream, so a later call continues an earlier one (hf backend only).
    first_sample: int = 0
    # Stop a completion once it has written this many line breaks (finish reason "lines"; the
    # last line break is kept): rollouts that look a fixed number of lines ahead (hf only).
    stop_lines: int | None = None

    def validate(self) -> SamplingOptions:
        """Check every option (a one-line UserError naming the flag); returns self."""
        if self.n < 1:
            raise UserError(f"the number of samples must be at least 1, got {self.n}")
        if not (self.temperature >= 0 and self.temperature < float("inf")):
            raise UserError(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise UserError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if self.batch_size is not None and self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.backend not in BACKENDS:
            raise UserError(f"--backend must be one of {', '.join(BACKENDS)}, got '{self.backend}'")
        if self.first_sample < 0:
            raise ValueError(f"first_sample must be at least 0, got {self.first_sample}")
        if self.stop_lines is not None and self.stop_lines < 1:
            raise ValueError(f"stop_lines must be at least 1, got {self.stop_lines}")
        return self


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling options of `mc-baseline` and `generate` (each adds its own count)."""

    temperature: float = option(1.0, help="Sampling temperature (0: greedy).")
    top_p: float = option(1.0, help="Nucleus sampling mass (1: off).")
    max_new_tokens: int = option(
        1024, help="Tokens a completion may generate; a longer one is cut (and counted as such)."
    )
    seed: int = option(0, help="Seed: the same seed, backend and device give the same samples.")
    batch_size: int | None = option(
        None, help="Completions per generate call [default: automatic; halved on out-of-memory]."
    )
    backend: str = option(
        "hf", choices=BACKENDS,
        help="hf: transformers generate (CPU/GPU); vllm: vLLM (when installed).",
    )
    vllm_args: tuple[str, ...] = option(
        (), flag="--vllm-arg",
        help="KEY=VALUE passed to vllm.LLM (e.g. tensor_parallel_size=2, "
        "gpu_memory_utilization=0.8); repeatable; --backend vllm only.",
    )

    def sampling(self, n: int) -> SamplingOptions:
        """The `SamplingOptions` of `n` samples per prompt."""
        return SamplingOptions(n=n, temperature=self.temperature, top_p=self.top_p,
                               max_new_tokens=self.max_new_tokens, seed=self.seed,
                               batch_size=self.batch_size, backend=self.backend)

    def engine_args(self) -> dict:
        """The vLLM engine arguments of `--vllm-arg` (checked)."""
        return parse_engine_args(self.vllm_args, self.backend)

    def check_sampling(self, n: int) -> None:
        """Check the settings for `n` samples per prompt (choices, engine arguments, ranges)."""
        check_choices(self)
        self.engine_args()
        self.sampling(n).validate()


@dataclass
class Completion:
    """One sampled continuation of a prompt: generated ids (without the stop token), their text
    (what they add after the prompt) and why generation ended: "stop" (a stop token),
    "length" (max_new_tokens reached: truncated) or "lines" (`stop_lines` line breaks
    written)."""

    token_ids: list[int]
    text: str
    finish_reason: str

    @property
    def truncated(self) -> bool:
        """Whether generation stopped at max_new_tokens (the completion was cut)."""
        return self.finish_reason == "length"


@dataclass
class GenerationStats:
    """Counters of one generator (for benchmarks and progress)."""

    completions: int = 0
    tokens: int = 0  # tokens sampled
    prompt_tokens: int = 0  # prompt tokens run through the model before sampling (prefill)
    seconds: float = 0.0
    batches: int = 0
    oom_retries: int = 0
    batch_sizes: list[int] = field(default_factory=list)


class Generator(Protocol):
    """What every backend offers."""

    backend: str
    stats: GenerationStats

    def generate(self, prompts: Sequence[Sequence[int]], options: SamplingOptions,
                 keys: Sequence[str] | None = None,
                 progress: Callable[[int], None] | None = None) -> list[list[Completion]]:
        """`options.n` completions per prompt, in prompt order. `keys[i]` names prompt i's random
        streams (default: its token ids); `progress(k)` is called as k more completions finish."""
        ...


# ---- shared helpers ------------------------------------------------------------------------
def row_seed(seed: int, key: str, sample: int) -> int:
    """The seed of sample `sample` of the prompt keyed `key` (64 bits of sha256)."""
    h = hashlib.sha256(f"{seed}\x1f{key}\x1f{sample}".encode()).digest()
    return int.from_bytes(h[:8], "little")


def default_keys(prompts: Sequence[Sequence[int]]) -> list[str]:
    """A key per prompt from its token ids; identical prompts get #0, #1, ... appended."""
    seen: dict[str, int] = {}
    keys = []
    for p in prompts:
        h = hashlib.sha1(",".join(map(str, p)).encode()).hexdigest()[:16]
        k = seen.get(h, 0)
        seen[h] = k + 1
        keys.append(f"{h}#{k}")
    return keys


def stop_token_ids(tokenizer, model=None) -> list[int]:
    """EOS ids: the tokenizer's, the model's generation config's, and chat end tokens."""
    ids: list[int] = []

    def add(x):
        if x is None:
            return
        for i in (x if isinstance(x, (list, tuple)) else [x]):
            if isinstance(i, int) and i >= 0 and i not in ids:
                ids.append(i)

    add(tokenizer.eos_token_id)
    gc = getattr(model, "generation_config", None) if model is not None else None
    add(getattr(gc, "eos_token_id", None))
    vocab = tokenizer.get_vocab()
    for t in _STOP_TOKENS:
        add(vocab.get(t))
    return ids


def decode_continuation(tokenizer, prompt: Sequence[int], generated: Sequence[int]) -> str:
    """Text that `generated` adds after `prompt`. Decoded together with the prompt's last tokens
    so tokenizers that drop a leading space when decoding a lone piece (SentencePiece) do not."""
    if not generated:
        return ""
    tail = list(prompt[-3:])
    if tail:
        head = tokenizer.decode(tail, skip_special_tokens=True)
        both = tokenizer.decode(tail + list(generated), skip_special_tokens=True)
        if both.startswith(head):
            return both[len(head):]
    return tokenizer.decode(list(generated), skip_special_tokens=True)


def parse_engine_args(items, backend: str = "vllm") -> dict:
    """`["tensor_parallel_size=2", ...]` -> {"tensor_parallel_size": 2, ...} for `vllm.LLM`
    (values parsed as YAML scalars: numbers, booleans, strings). Engine arguments need
    `--backend vllm`; a malformed item is a one-line error."""
    import yaml

    items = list(items or ())
    if items and backend != "vllm":
        raise UserError("--vllm-arg needs --backend vllm")
    out = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise UserError(f"--vllm-arg {item}: expected KEY=VALUE (e.g. tensor_parallel_size=2)")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out
