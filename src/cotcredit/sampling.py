"""Sampling completions: the one generation interface of cotcredit.

Monte Carlo rollouts (`methods/mc.py`), `cotcredit generate` and anything else that samples text
call `get_generator(scorer, backend).generate(prompts, options, keys)`: prompts are token-id
lists (already rendered, e.g. prompt + a prefix of the reasoning), and the answer is, per prompt,
`options.n` `Completion`s (generated ids, their text, why generation stopped).

Backends
- `hf` (default; CPU and GPU): the scorer's own model (no second copy) through transformers
  `generate`, many prompts x n samples per call, left padding with an attention mask, KV cache.
  A prompt's n samples share one prefill: the prompt is run once and its KV cache is copied to
  the n rows. Decoding runs in chunks of 16 tokens; between chunks the rows that stopped leave
  the batch and the KV cache (`generate` alone keeps them decoding padding until the longest
  row ends). Rows are sorted by length so a batch holds similar lengths. Batch size automatic
  (from free memory and the KV cache size) or fixed; on out-of-memory the batch is halved and
  retried, and the smaller size is kept for later batches.
- `vllm` (`pip install vllm`, CUDA): `LLM(model=<the scorer's model folder>,
  enable_prefix_caching=True)`, prompts given as token ids, `SamplingParams(n=..., seed=...)` per
  prompt. Imported lazily.

Sampling distribution. Only the options given count: the model's `generation_config` defaults
(temperature, top-k, repetition penalty...) are not applied. temperature 0 is greedy decoding
(its n samples are copies of one). Generation stops at the tokenizer's EOS, the model's
configured EOS ids and `<|im_end|>`/`<|eot_id|>`/`<|endoftext|>` when the vocabulary has them.

Determinism. Sample j of a prompt draws its random numbers from its own stream, seeded by
sha256(seed, key of the prompt, j); `keys` default to the prompt's token ids (+ its occurrence
index among identical prompts of the call). The hf backend samples by inverse CDF with one
uniform number per row and step from that stream, so what a row generates does not depend on
the batch size, the order of prompts, the other prompts of the call or out-of-memory retries;
same seed + backend + device → identical output (up to floating-point effects of padding, which
can only matter where two tokens' cumulative probabilities tie to float precision).
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # torch loads with the first generation (keeps `--help` fast)
    import torch

from cotcredit.errors import UserError
from cotcredit.options import check_choices, option

BACKENDS = ("hf", "vllm")
_STOP_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|end_of_text|>")
_CPU_MAX_BATCH = 32  # rows per generate call on CPU (throughput flattens beyond; see benchmarks)
_GPU_MAX_BATCH = 512
# Tokens decoded per `generate` call before finished rows leave the batch: a finished row
# idles at most this many steps, and each call's fixed cost stays small beside its decoding.
_DECODE_CHUNK = 16


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

    def validate(self) -> SamplingOptions:
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
        check_choices(self)
        self.engine_args()
        self.sampling(n).validate()


@dataclass
class Completion:
    """One sampled continuation of a prompt: generated ids (without the stop token), their text
    (what they add after the prompt) and why generation ended: "stop" (a stop token) or
    "length" (max_new_tokens reached: truncated)."""

    token_ids: list[int]
    text: str
    finish_reason: str

    @property
    def truncated(self) -> bool:
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


def _is_oom(e: BaseException) -> bool:
    import torch

    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(e, oom_type):
        return True
    return isinstance(e, (RuntimeError, MemoryError)) and (
        isinstance(e, MemoryError) or "out of memory" in str(e).lower())


# ---- transformers backend ------------------------------------------------------------------
class _InverseCdfSampler:
    """A logits processor that samples each row with its own random stream and returns a mask
    that makes greedy decoding pick that token (-inf everywhere else).

    Temperature scaling, then nucleus (top-p) filtering, then one uniform number u per row:
    the token is the first whose cumulative probability exceeds u (float64 cumulative sums).
    """

    def __init__(self, rngs: list[random.Random], temperature: float, top_p: float):
        self.rngs, self.temperature, self.top_p = rngs, temperature, top_p

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        logits = scores.float() / self.temperature
        order = None
        if self.top_p < 1.0:
            logits, order = torch.sort(logits, dim=-1, descending=True)
            probs = torch.softmax(logits, dim=-1)
            before = torch.cumsum(probs.double(), dim=-1) - probs.double()  # mass ranked above
            logits = logits.masked_fill(before >= self.top_p, float("-inf"))
        probs = torch.softmax(logits, dim=-1).double()
        cdf = torch.cumsum(probs, dim=-1)
        u = torch.tensor([r.random() for r in self.rngs], dtype=torch.float64, device=cdf.device)
        pick = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
        pick = pick.clamp_(max=cdf.shape[1] - 1)
        # Never pick a token of zero probability (possible only at the clamp).
        zero = probs.gather(1, pick) <= 0
        if bool(zero.any()):
            pick = torch.where(zero, probs.argmax(dim=-1, keepdim=True), pick)
        token = order.gather(1, pick) if order is not None else pick
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, token, 0.0)
        return out


class HFGenerator:
    """transformers `generate` on the scorer's model (see the module docstring)."""

    backend = "hf"

    def __init__(self, model, tokenizer, max_batch: int | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        self.stop_ids = stop_token_ids(tokenizer, model)
        if not self.stop_ids:
            raise UserError("the tokenizer has no end-of-sequence token: cannot tell when a "
                            "completion ends")
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.stop_ids[0]
        self.stats = GenerationStats()
        self._oom_cap: int | None = max_batch  # lowered after an out-of-memory error

    # -- batch size --------------------------------------------------------------------
    def _kv_bytes_per_token(self) -> int:
        import torch

        cfg = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") \
            else self.model.config
        layers = getattr(cfg, "num_hidden_layers", 24)
        heads = getattr(cfg, "num_attention_heads", 16)
        kv = getattr(cfg, "num_key_value_heads", None) or heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        elem = torch.finfo(next(self.model.parameters()).dtype).bits // 8
        return 2 * layers * kv * head_dim * elem

    def auto_batch_size(self, max_len: int) -> int:
        """Rows per call that fit in memory: KV cache + per-row logits/sampling buffers."""
        vocab = int(getattr(self.model.config.get_text_config(), "vocab_size", 50_000) or 50_000)
        per_row = self._kv_bytes_per_token() * max_len + 48 * vocab
        if self.device.type == "cuda":
            import torch

            free, _ = torch.cuda.mem_get_info(self.device)
            budget, cap = 0.6 * free, _GPU_MAX_BATCH
        else:
            try:
                avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (ValueError, OSError, AttributeError):
                avail = 4 << 30
            budget, cap = 0.3 * avail, _CPU_MAX_BATCH
        return int(max(1, min(cap, budget // max(per_row, 1))))

    # -- generation ----------------------------------------------------------------------
    def generate(self, prompts, options, keys=None, progress=None):
        import torch

        options.validate()
        if options.backend != "hf":
            raise ValueError("HFGenerator serves backend 'hf'")
        prompts = [list(p) for p in prompts]
        if any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token")
        keys = list(keys) if keys is not None else default_keys(prompts)
        if len(keys) != len(prompts):
            raise ValueError("one key per prompt")
        greedy = options.temperature == 0
        n_rows = 1 if greedy else options.n
        # Rows (prompt, sample), longest prompts first: similar lengths share a batch and an
        # out-of-memory error, if any, comes on the first batch.
        rows = [(i, j) for i in sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), i))
                for j in range(n_rows)]
        results: list[list[Completion | None]] = [[None] * n_rows for _ in prompts]
        t0 = time.perf_counter()
        pos = 0
        while pos < len(rows):
            max_len = len(prompts[rows[pos][0]]) + options.max_new_tokens
            size = options.batch_size or self.auto_batch_size(max_len)
            if self._oom_cap is not None:
                size = min(size, self._oom_cap)
            batch = rows[pos : pos + size]
            try:
                with torch.no_grad():
                    outs = self._generate_rows(prompts, keys, batch, options, greedy)
            except Exception as e:
                if not _is_oom(e):
                    raise
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                if len(batch) == 1:
                    raise UserError(
                        f"out of memory generating one completion of a {len(prompts[batch[0][0]])}"
                        f"-token prompt with --max-new-tokens {options.max_new_tokens}; lower it "
                        "or use a smaller model/dtype") from None
                self._oom_cap = max(1, len(batch) // 2)
                self.stats.oom_retries += 1
                continue
            for (i, j), c in zip(batch, outs, strict=True):
                results[i][j] = c
            pos += len(batch)
            self.stats.batches += 1
            self.stats.batch_sizes.append(len(batch))
            if progress:
                progress(len(batch) * (options.n if greedy else 1))
        self.stats.seconds += time.perf_counter() - t0
        final: list[list[Completion]] = []
        for res in results:
            cs = [c for c in res if c is not None]
            if greedy:
                cs = [Completion(list(cs[0].token_ids), cs[0].text, cs[0].finish_reason)
                      for _ in range(options.n)]
            final.append(cs)
        self.stats.completions += sum(len(cs) for cs in final)
        self.stats.tokens += sum(len(c.token_ids) for cs in final for c in cs)
        return final

    def _left_pad(self, seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[r, width - len(s):] = 1
        return ids.to(self.device), mask.to(self.device)

    def _prefill(self, uniq: list[list[int]], repeats: list[int]):
        """KV cache of each unique prompt minus its last token, copied to its rows."""
        import torch
        from transformers import DynamicCache

        ids, mask = self._left_pad([p[:-1] for p in uniq])
        pos = (mask.cumsum(-1) - 1).clamp_(min=0)
        cache = DynamicCache(config=self.model.config)
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        decoder(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
        index = torch.repeat_interleave(torch.arange(len(uniq), device=self.device),
                                        torch.tensor(repeats, device=self.device))
        cache.reorder_cache(index)
        return cache

    def _generate_rows(self, prompts, keys, batch, options, greedy) -> list[Completion]:
        """Sample the completions of `batch` (called under `torch.no_grad()`)."""
        from transformers import GenerationConfig, LogitsProcessorList

        seqs = [prompts[i] for i, _ in batch]
        ids, mask = self._left_pad(seqs)
        config = GenerationConfig(
            do_sample=False, max_new_tokens=options.max_new_tokens, eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id, bos_token_id=self.tokenizer.bos_token_id, use_cache=True,
            num_beams=1, return_dict_in_generate=True,
        )
        processors = LogitsProcessorList()
        if not greedy:
            rngs = [random.Random(row_seed(options.seed, keys[i], j)) for i, j in batch]
            processors.append(_InverseCdfSampler(rngs, options.temperature, options.top_p))
        # Shared prefill: worth it when prompts repeat in the batch (n samples per prompt).
        uniq_idx: list[int] = []
        repeats: list[int] = []
        for i, _ in batch:
            if uniq_idx and uniq_idx[-1] == i:
                repeats[-1] += 1
            else:
                uniq_idx.append(i)
                repeats.append(1)
        kwargs = {}
        if len(uniq_idx) < len(batch) and min(len(prompts[i]) for i in uniq_idx) > 1:
            kwargs["cache"] = self._prefill([prompts[i] for i in uniq_idx], repeats)
            self.stats.prompt_tokens += sum(len(prompts[i]) for i in uniq_idx)
        else:
            self.stats.prompt_tokens += sum(len(s) for s in seqs)
        # Only our options count: the model's generation_config defaults are set aside.
        saved = self.model.generation_config
        self.model.generation_config = GenerationConfig(
            eos_token_id=self.stop_ids, pad_token_id=self.pad_id,
            bos_token_id=self.tokenizer.bos_token_id)
        try:
            gen = self._decode(ids, mask, config, processors, options.max_new_tokens,
                               kwargs.get("cache"))
        finally:
            self.model.generation_config = saved
        completions = []
        for seq, (toks, stopped) in zip(seqs, gen, strict=True):
            reason = "stop" if stopped else "length"
            completions.append(Completion(toks, decode_continuation(self.tokenizer, seq, toks), reason))
        return completions

    def _decode(self, ids, mask, config, processors, max_new_tokens: int, cache
                ) -> list[tuple[list[int], bool]]:
        """(generated ids without the stop token, whether a stop token ended them) per row.

        `generate` keeps a finished row in the batch, decoding padding, until the longest row
        ends; so decoding runs in chunks of `_DECODE_CHUNK` tokens and rows that stopped leave
        the batch (and the KV cache) between chunks. A row's tokens do not change: its random
        stream advances one draw per token it decodes, whichever rows share its batch."""
        import torch

        stops = set(self.stop_ids)
        rows = list(range(ids.shape[0]))  # the original row of each row still decoding
        tokens: list[list[int]] = [[] for _ in rows]
        stopped = [False] * len(rows)
        sampler = processors[0] if len(processors) else None
        left = max_new_tokens
        while left > 0:
            config.max_new_tokens = min(_DECODE_CHUNK, left)
            extra = {"cache": cache} if cache is not None else {}
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                      logits_processor=processors, **extra)
            new = out.sequences[:, ids.shape[1]:]
            left -= new.shape[1]
            keep = []  # positions in this batch of the rows still decoding
            for k, (r, g) in enumerate(zip(rows, new.tolist(), strict=True)):
                end = next((t for t, tok in enumerate(g) if tok in stops), None)
                tokens[r].extend(g if end is None else g[:end])
                stopped[r] = end is not None
                if end is None:
                    keep.append(k)
            if not keep or left <= 0:
                break
            cache = out.cache
            if len(keep) < len(rows):
                cache.reorder_cache(torch.tensor(keep, device=ids.device))
                if sampler is not None:
                    sampler.rngs = [sampler.rngs[k] for k in keep]
                rows = [rows[k] for k in keep]
            ids = out.sequences[keep]
            mask = torch.cat([mask, torch.ones_like(new)], dim=1)[keep]
        return list(zip(tokens, stopped, strict=True))


# ---- vLLM backend --------------------------------------------------------------------------
_VLLM: dict[str, object] = {}


class VLLMGenerator:
    """vLLM with prefix caching; the model folder is the scorer's (see the module docstring)."""

    backend = "vllm"

    def __init__(self, model_path: str, tokenizer, dtype: torch.dtype, stop_ids: list[int],
                 engine_args: dict | None = None):
        import torch

        try:
            import vllm
        except ImportError:
            raise UserError("--backend vllm: vLLM is not installed (pip install vllm, on a CUDA "
                            "machine), or use --backend hf") from None
        self.vllm, self.tokenizer, self.stop_ids = vllm, tokenizer, stop_ids
        self.stats = GenerationStats()
        if model_path not in _VLLM:
            util = 0.9
            if torch.cuda.is_available():  # leave room for the scorer's copy of the model
                free, total = torch.cuda.mem_get_info()
                util = max(0.05, min(0.9, 0.9 * free / total))
            # The user's engine arguments (tensor/data parallel, memory...) override ours.
            kwargs = {"model": model_path, "tokenizer": model_path, "enable_prefix_caching": True,
                      "dtype": str(dtype).replace("torch.", ""), "gpu_memory_utilization": util,
                      "seed": 0, **(engine_args or {})}
            try:
                _VLLM[model_path] = vllm.LLM(**kwargs)
            except TypeError as e:  # an unknown engine argument
                raise UserError(f"--vllm-arg: vLLM refused the engine arguments ({e})") from None
        self.llm = _VLLM[model_path]

    def generate(self, prompts, options, keys=None, progress=None):
        options.validate()
        prompts = [list(p) for p in prompts]
        keys = list(keys) if keys is not None else default_keys(prompts)
        greedy = options.temperature == 0
        params = [
            self.vllm.SamplingParams(
                n=1 if greedy else options.n, temperature=options.temperature, top_p=options.top_p,
                max_tokens=options.max_new_tokens, seed=row_seed(options.seed, k, 0) % (1 << 63),
                stop_token_ids=self.stop_ids, skip_special_tokens=True)
            for k in keys
        ]
        t0 = time.perf_counter()
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        final = []
        for p, o in zip(prompts, outs, strict=True):
            cs = []
            for c in o.outputs:
                toks = [t for t in c.token_ids]
                if toks and toks[-1] in self.stop_ids:
                    toks = toks[:-1]
                reason = "length" if c.finish_reason == "length" else "stop"
                cs.append(Completion(toks, decode_continuation(self.tokenizer, p, toks), reason))
            if greedy:
                cs = [Completion(list(cs[0].token_ids), cs[0].text, cs[0].finish_reason)
                      for _ in range(options.n)]
            final.append(cs)
        self.stats.seconds += time.perf_counter() - t0
        self.stats.completions += sum(len(cs) for cs in final)
        self.stats.tokens += sum(len(c.token_ids) for cs in final for c in cs)
        self.stats.prompt_tokens += sum(len(p) for p in prompts)
        self.stats.batches += 1
        if progress:
            progress(sum(len(cs) for cs in final))
        return final


# ---- choosing a backend --------------------------------------------------------------------
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


def get_generator(scorer, backend: str = "hf", engine_args: dict | None = None) -> Generator:
    """The generator of `backend` for the scorer's model (one per model, reused).
    `engine_args` go to `vllm.LLM` unchanged (tensor/data parallel, memory settings...)."""
    if backend not in BACKENDS:
        raise UserError(f"--backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    cache = scorer.__dict__.setdefault("_generators", {})
    if backend not in cache:
        if backend == "hf":
            cache[backend] = HFGenerator(scorer.model, scorer.tokenizer)
        else:
            path = getattr(scorer.model.config, "_name_or_path", "") or ""
            if not path:
                raise UserError("--backend vllm needs a model loaded from a folder or hub id")
            cache[backend] = VLLMGenerator(path, scorer.tokenizer, scorer.dtype,
                                           stop_token_ids(scorer.tokenizer, scorer.model),
                                           engine_args or {})
    return cache[backend]
