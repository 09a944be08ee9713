"""GPU readiness check: cotcredit measured at real model sizes in one short, time-boxed run.

    python benchmarks/gpu_check.py --json gpu_check.json                # CUDA, real shapes, ~9 min
    python benchmarks/gpu_check.py --device cpu --small --json out.json # CPU, tiny shapes (CI)
    python benchmarks/gpu_check.py --parts agreement,speed --budget 200

Models are built with random weights from transformers configs at real shapes (SmolLM2-135M,
Qwen2.5-1.5B, Qwen2.5-7B, a Gemma-3-1B-like hybrid sliding-window model) with a byte-level BPE
tokenizer trained in milliseconds on a few sentences and padded with filler tokens to the
model's real vocabulary, so the output head costs what it really costs. Speed, memory and
packed-vs-naive agreement do not depend on trained weights; nothing is downloaded. `--small`
builds tiny twins of the same families (same code paths) for a CPU run of seconds.

Parts (`--parts`, in this order; each has a deadline, the run a global one `--budget`; a part
past its deadline is stopped, recorded as "skipped: time" with what it finished, and the next
part runs):

- agreement: RREDCoT's R̂ and v̂ (one reference, and four: v̂'s mixture over several valid
  paths) and leave-one-out coalition values scored with packed probes on the trace's KV cache vs
  one plain forward of the model per probe (the reference), in float32 and bfloat16 from the
  same weights; bfloat16 is also compared with the float32 reference.
- speed: `redistribute` (R̂; R̂ + v̂; R̂ + v̂ over four references) vs one plain forward of the
  model (`model(input_ids)`, logits at every position) at 1k, 8k and 32k tokens with K = 16 and
  64 segments; naive (one forward per probe; timed on a sample of probes and scaled to all of
  them) vs packed; peak GPU memory of each measurement.
- generation: batched transformers `generate` throughput for rollouts (completions/s and
  tokens/s at a few batch sizes).
- mc: Monte Carlo rollouts as `mc-baseline` samples them vs plain batched `generate` on the same
  rows (benchmarks/bench_rollouts.py's two sides), tokens/s; whether a rollout's samples stay the
  same across repeats and at half the batch size.
- bench: `cotcredit bench` at its quick size on the regimes with shipped checkpoints (unique,
  multipath, forecast, long), traces sampled on the device: seconds per regime and per method
  (needs math-verify and pydantic; skipped with a note when missing).
- train: one GRPO step in each advantage mode (grpo, rredcot) on a random model of the small
  real shape, then one `cotcredit.train` step per credit source (grpo, oracle, mc, rredcot,
  shuffled) and advantage form (reweight, segment-rewards) on the `unique` checkpoint (needs
  trl and datasets; skipped with a note when they are missing).

Prints one table and writes every figure as JSON (`--json`) with the device name, torch and
transformers versions and the date. Exit status 1 when an agreement check fails or a part
raises; timeouts and skips are not failures.

Travels light: only the standard library, torch, transformers, tokenizers and cotcredit are
imported at the top (cotcredit itself needs numpy, pandas, pyarrow, pyyaml); rich, trl,
datasets, math-verify and pydantic are imported inside the parts that use them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "src" / "cotcredit").is_dir():  # run from a checkout: use its source, installed or not
    sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast  # noqa: E402

import cotcredit  # noqa: E402
from cotcredit.data.trace import Trace  # noqa: E402
from cotcredit.lm import Continuation, Scorer, resolve_dtype  # noqa: E402
from cotcredit.lm.forcing import ForcingOptions, answer_forcing  # noqa: E402
from cotcredit.lm.generation import SamplingOptions  # noqa: E402
from cotcredit.lm.sampling import get_generator  # noqa: E402
from cotcredit.methods import rredcot  # noqa: E402
from cotcredit.methods.attribution import ValueFunction  # noqa: E402
from cotcredit.methods.base import TraceContext  # noqa: E402
from cotcredit.segmentation import SegmentOptions, segment_encoded  # noqa: E402

PARTS = ("agreement", "speed", "generation", "mc", "bench", "train")
# Share of the remaining global budget each part gets; time a part leaves unused flows on.
# Sized from the first H200 run (docs/guides/performance.md): agreement ~40 s a model, speed
# ~20 s a model and length, mc ~35 s a model, bench 20-45 s a regime, train ~10 s a step.
SHARES = {"agreement": 0.22, "speed": 0.28, "generation": 0.05, "mc": 0.12, "bench": 0.15,
          "train": 0.18}
GIB = 1 << 30
GRACE_S = 5.0  # a part still running this long after its deadline is interrupted

# Agreement tolerances, in nats, on a summed log-probability (R̂, v̂ or a coalition value).
# float32: packed and naive run the same arithmetic in another order (and the scorer's float32
# head vs the model's): differences are rounding, measured ~1e-5 on CPU; 1e-3 leaves room for
# the GPU's other kernels and 30-layer depth and is still far below any real difference.
TOL_FP32 = 1e-3
# bfloat16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%) in every hidden state. The
# packed pass (4-D mask, sdpa, KV cache) and the naive one (causal kernel over the whole
# sequence) round at different places, the naive reference also computes its logits in
# bfloat16 (an error up to |logit| * 2^-9 per token) while the scorer uses a float32 head, and
# these differences grow through the layers and add up over the scored tokens. So packed and
# naive cannot agree to float32 precision; the meaningful bar is that packed bfloat16 is as
# faithful as the naive bfloat16 reference: its distance from the float32 reference of the
# same weights is at most BF16_FACTOR times the naive bfloat16 one, plus BF16_FLOOR_PER_TOKEN
# per scored token (measured spreads in the notes and the README).
BF16_FACTOR = 2.0
BF16_FLOOR_PER_TOKEN = 0.002


# ---- model shapes ----------------------------------------------------------------------------
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


# ---- tokenizer and traces --------------------------------------------------------------------
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 (see build_config)
PROMPT = "Apples cost 3 dollars and oranges cost 2 dollars. What do 4 apples and 5 oranges cost?"
ANSWER = "22"
SOLUTION = "4 apples cost 4 * 3 = 12 dollars and 5 oranges cost 5 * 2 = 10 dollars, so the total " \
           "is 12 + 10 = 22 dollars."
LINES = [
    "Let me compute the cost of the apples first: 4 apples at 3 dollars each is 12 dollars.",
    "Wait, I should double-check the price of the oranges in the table.",
    "So the oranges cost 2 dollars each, and 5 of them cost 10 dollars.",
    "Hmm, the question asks for the total, so I add the two amounts.",
    "But maybe the apples were 4 dollars? No, the table says 3 dollars.",
    "Therefore the total is 12 + 10 = 22 dollars.",
    "Actually, let me verify once more by adding item by item: step {i} gives {v}.",
    "Alternatively, 4 * 3 + 5 * 2 = 22, which matches.",
]
# Other valid paths to the answer: v̂ over several references (`rredcot_paths`).
OTHER_SOLUTIONS = [
    "5 oranges cost 5 * 2 = 10 dollars.\n4 apples cost 4 * 3 = 12 dollars.\n"
    "Together they cost 10 + 12 = 22 dollars.",
    "An apple and an orange cost 3 + 2 = 5 dollars.\nFour such pairs cost 4 * 5 = 20 dollars.\n"
    "One more orange makes 20 + 2 = 22 dollars.",
    "4 * 3 + 5 * 2 = 12 + 10 = 22.",
]
REFERENCES = [SOLUTION, *OTHER_SOLUTIONS]


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on the trace sentences, padded with filler tokens (" qab",
    ...) to `vocab_size`, so every id a random model samples decodes to text."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=min(600, vocab_size), special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = [*LINES, PROMPT, SOLUTION, "</think>\n\nThe final answer is $\\boxed{22}$."]
    tk.train_from_iterator(corpus * 4, trainer)
    state = json.loads(tk.to_str())["model"]
    vocab: dict[str, int] = dict(state["vocab"])
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    n = 0
    while len(vocab) < vocab_size:  # fillers: never produced by encoding, decoded as words
        word, k = "", n
        while True:
            word, k = word + chr(ord("a") + k % 26), k // 26
            if not k:
                break
        n += 1
        token = "\u0120q" + word  # \u0120 is byte-level BPE's space
        if token not in vocab:
            vocab[token] = len(vocab)
    full = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    full.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    full.decoder = decoders.ByteLevel()
    full.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=full, eos_token="<|im_end|>", pad_token="<|im_end|>",
        bos_token="<|im_start|>", unk_token="<|endoftext|>",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def synthetic_trace(tok, n_tokens: int, prompt_len: int) -> Trace:
    """A reasoning trace with line breaks and discourse keywords whose prompt + reasoning is
    about `n_tokens` tokens (cut at a line end), with its answer and a reference solution."""
    lines, i = [], 0
    per_line = 24  # grown until the text is long enough
    want = max(8, n_tokens - prompt_len)
    while True:
        while len(lines) < want // per_line + 2:
            lines.append(LINES[i % len(LINES)].format(i=i, v=3 * i))
            i += 1
        text = "\n".join(lines)
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) > want:
            break
        per_line = max(1, per_line // 2)
    cut = enc["offset_mapping"][want][0]
    cut = text.rfind("\n", 0, cut) if "\n" in text[:cut] else cut
    reasoning = text[:cut]
    return Trace(
        id=f"synthetic-{n_tokens}", prompt=PROMPT,
        response=reasoning + "\n</think>\n\nThe final answer is $\\boxed{22}$.",
        answer=ANSWER, solution=SOLUTION, outcome=1.0,
    )


def trace_for(scorer: Scorer, n_tokens: int) -> Trace:
    return synthetic_trace(scorer.tokenizer, n_tokens, len(scorer.encode_prompt(PROMPT)))


def rhat_options(value: str = "rhat", probe_mode: str = "packed") -> rredcot.RredcotOptions:
    return rredcot.RredcotOptions(value=value, probe_mode=probe_mode).validate()


# ---- time boxes, timing, memory --------------------------------------------------------------
class PartTimeout(BaseException):
    """A part ran past its deadline (BaseException: no `except Exception` may swallow it)."""


class Deadline:
    """A part's deadline: `check()` between measurements, and a watchdog thread that interrupts
    the main thread `grace` seconds after it (a single long call cannot hold the run)."""

    def __init__(self, seconds: float, grace: float | None = None):
        self.end = time.monotonic() + seconds
        self.grace = GRACE_S if grace is None else grace
        self.fired = False
        self._done = threading.Event()

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self) -> None:
        if self.left() <= 0:
            raise PartTimeout()

    def __enter__(self) -> Deadline:
        # interrupt_main does nothing while SIGINT is ignored, as it is for a job started in
        # the background (`nohup ... &`): give the main thread Python's handler meanwhile.
        self._saved = None
        if threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGINT)
            if current in (signal.SIG_IGN, signal.SIG_DFL, None):
                self._saved = current
                signal.signal(signal.SIGINT, signal.default_int_handler)

        def watch():
            if not self._done.wait(max(0.0, self.left() + self.grace)):
                self.fired = True
                import _thread

                _thread.interrupt_main()  # KeyboardInterrupt in the main thread

        threading.Thread(target=watch, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._saved is not None:
            signal.signal(signal.SIGINT, self._saved)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def measure(device: torch.device, out: dict):
    """Wall seconds of the `with` block and the most accelerator memory allocated during it above
    what was allocated when it started (`extra_gib`; None on CPU)."""
    base = 0
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    yield
    sync(device)
    out["seconds"] = time.perf_counter() - t0
    out["extra_gib"] = (
        (torch.cuda.max_memory_allocated(device) - base) / GIB if device.type == "cuda" else None
    )


def timed(fn: Callable[[], object], device: torch.device, deadline: Deadline,
          repeats: int = 3, quick: float = 1.0) -> dict:
    """Median seconds of up to `repeats` runs (one when a run takes over `quick` seconds or the
    deadline is near) and the largest peak memory; call it after a warm-up."""
    runs: list[dict] = []
    while len(runs) < repeats:
        deadline.check()
        m: dict = {}
        with measure(device, m):
            fn()
        runs.append(m)
        if m["seconds"] > quick or deadline.left() < 3 * m["seconds"]:
            break
    extras = [r["extra_gib"] for r in runs if r["extra_gib"] is not None]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "extra_gib": max(extras) if extras else None,
        "runs": len(runs),
    }


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def gib_of(model) -> float:
    return sum(p.numel() * p.element_size() for p in model.parameters()) / GIB


# ---- part: agreement -------------------------------------------------------------------------
@torch.no_grad()
def naive_sequence_value(model, seq: list[int], n_target: int, terminators) -> float:
    """log p(last n_target tokens of seq | the rest) [+ log terminator mass after them] from one
    plain forward of the model (its own logits): the reference for a coalition value."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([seq], device=device), logits_to_keep=n_target + 1)
    lp = torch.log_softmax(logits.logits[0].float(), dim=-1)  # row j predicts seq[-n_target + j]
    target = torch.tensor(seq[len(seq) - n_target :], device=device)
    total = float(lp[:n_target].gather(1, target[:, None]).double().sum())
    if terminators:
        total += float(torch.logsumexp(lp[n_target, list(terminators)], dim=0))
    return total


def probe_values(scorer: Scorer, enc, seg) -> dict:
    """R̂_k, v̂_k (k = 0..K) and LOO coalition values (all present, then each segment left out),
    packed and naive, for one scorer; plus the number of scored tokens of each kind."""
    fwd = scorer.forward(enc.ids, keep_cache=True, stats_from=enc.prompt_len)
    ctx = TraceContext(scorer, enc, fwd, seg)
    packed = rredcot.estimate(ctx, rhat_options("both", "packed"))
    naive = rredcot.estimate(ctx, rhat_options("both", "naive"))
    # v̂ over the four references (the default mixture: the probability of any of the paths).
    packed_m = rredcot.estimate(ctx, rhat_options("both", "packed"), references=REFERENCES)
    naive_m = rredcot.estimate(ctx, rhat_options("both", "naive"), references=REFERENCES)
    vf = ValueFunction(ctx)
    K = vf.K
    masks = [[True] * K] + [[j != k for j in range(K)] for k in range(K)]
    loo_packed = [float(v) for v in vf(masks)]
    loo_naive = []
    for m in masks:
        seq, n_target = vf.sequence(m)
        loo_naive.append(naive_sequence_value(scorer.model, seq, n_target, vf.terminators))
    forcing = answer_forcing(scorer, ForcingOptions())
    r_probe = forcing.answer_probe(ANSWER)
    v_probe = forcing.solution_probe("\n", SOLUTION, ANSWER)
    term = 1 if forcing.terminators else 0
    a0, a1 = r_probe.span("answer")
    u0, u1 = v_probe.span("solution")
    y0, y1 = v_probe.span("answer")

    def v_tokens(solution: str) -> int:
        probe = forcing.solution_probe("\n", solution, ANSWER)
        (s0, s1), (e0, e1) = probe.span("solution"), probe.span("answer")
        return (s1 - s0) + (e1 - e0) + term

    return {
        "packed": {"rhat": packed.r_hat, "vhat": packed.v_hat, "loo": loo_packed,
                   "vhat_multi": packed_m.v_hat},
        "naive": {"rhat": naive.r_hat, "vhat": naive.v_hat, "loo": loo_naive,
                  "vhat_multi": naive_m.v_hat},
        "scored_tokens": {"rhat": a1 - a0 + term, "vhat": (u1 - u0) + (y1 - y0) + term,
                          "loo": a1 - a0 + term,
                          # a mixture's error is at most its worst path's
                          "vhat_multi": max(v_tokens(r) for r in REFERENCES)},
    }


def max_diff(a: list[float], b: list[float]) -> float:
    """The largest |a_i - b_i|; equal infinities (a state with no path left) differ by 0."""
    return max(0.0 if x == y else abs(x - y) for x, y in zip(a, b, strict=True))


QUANTITIES = ("rhat", "vhat", "vhat_multi", "loo")


def agreement_rows(name: str, vals32: dict, vals16: dict | None, tokens: int, K: int) -> list:
    rows = []
    n_tok = vals32["scored_tokens"]
    for kind in QUANTITIES:
        ref = vals32["naive"][kind]
        d32 = max_diff(vals32["packed"][kind], ref)
        row = {
            "model": name, "quantity": kind, "tokens": tokens, "segments": K,
            "values": len(ref), "scored_tokens": n_tok[kind],
            # how much the values differ between probes (finite ones)
            "spread": max(finite) - min(finite) if (finite := [v for v in ref
                                                             if math.isfinite(v)]) else 0.0,
            "fp32_packed_vs_naive": d32, "fp32_tolerance": TOL_FP32, "fp32_ok": d32 <= TOL_FP32,
            # every boundary's value, to see where a disagreement sits
            "fp32_values": {"packed": list(vals32["packed"][kind]), "naive": list(ref)},
        }
        if vals16 is not None:
            p16, n16 = vals16["packed"][kind], vals16["naive"][kind]
            naive_err = max_diff(n16, ref)
            packed_err = max_diff(p16, ref)
            tol = BF16_FACTOR * naive_err + BF16_FLOOR_PER_TOKEN * n_tok[kind]
            row.update({
                "bf16_packed_vs_naive": max_diff(p16, n16),
                "bf16_naive_vs_fp32": naive_err,
                "bf16_packed_vs_fp32": packed_err,
                "bf16_tolerance": tol,
                "bf16_ok": packed_err <= tol,
                "bf16_values": {"packed": list(p16), "naive": list(n16)},
            })
        rows.append(row)
    return rows


def part_agreement(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    ctx.release()
    plan = ctx.plan
    result["tolerance"] = {
        "fp32_nats": TOL_FP32,
        "bf16": f"|packed bf16 - naive fp32| <= {BF16_FACTOR} x |naive bf16 - naive fp32| + "
                f"{BF16_FLOOR_PER_TOKEN} nats x scored tokens",
    }
    for name in plan.agreement_models:
        deadline.check()
        shape = ctx.shapes[name]
        tokens = plan.agreement_tokens
        if shape.window:  # probes late in the trace must not see its start in sliding layers
            tokens = max(2 * tokens, 2 * shape.window + 64)
        tok = ctx.tokenizer(shape.vocab)
        model32 = build_model(shape, ctx.device, torch.float32)
        s32 = Scorer(model32, tok, name=name)
        trace = trace_for(s32, tokens)
        reserve = max(rredcot.reserve(s32, trace, rhat_options("both")),
                      rredcot.reserve(s32, trace, rhat_options("both"), references=REFERENCES))
        enc = s32.encode(trace, reserve=reserve)
        fwd = s32.forward(enc.ids, keep_cache=False, stats_from=enc.prompt_len)
        # One segmentation for both dtypes: the probes sit at the same boundaries.
        seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=plan.agreement_segments))
        vals32 = probe_values(s32, enc, seg)
        deadline.check()
        model16 = copy.deepcopy(model32).to(torch.bfloat16)  # the same weights, rounded
        for key in [k for k in model16.__dict__ if k.startswith("_cotcredit")]:
            del model16.__dict__[key]  # the scorer's per-model checks and caches: redo them
        vals16 = probe_values(Scorer(model16, tok, name=name), enc, seg)
        del model16
        for row in agreement_rows(name, vals32, vals16, enc.prompt_len + enc.n_reasoning,
                                  len(seg)):
            result["rows"].append(row)
        result["notes"] += [n for n in s32.notes if n not in result["notes"]]
        del model32, s32
        free_memory()
    failed = [f"{r['model']} {r['quantity']}" for r in result["rows"]
              if not r["fp32_ok"] or r.get("bf16_ok") is False]
    result["ok"] = not failed
    if failed:
        result["failed"] = failed


# ---- part: speed ------------------------------------------------------------------------------
def redistribute_once(scorer: Scorer, trace: Trace, K: int, value: str) -> dict:
    """What `cotcredit redistribute` does for one trace after loading, timed by step. `value`:
    rhat, both (R̂ + v̂), or multi (R̂ + v̂ over the trace's solution and OTHER_SOLUTIONS, listed
    in its `solutions` field as a user's file lists them)."""
    dev = scorer.device
    if value == "multi":
        trace = dataclasses.replace(trace, extra={**trace.extra, "solutions": OTHER_SOLUTIONS})
        value = "both"
    t0 = time.perf_counter()
    enc = scorer.encode(trace, reserve=rredcot.reserve(scorer, trace, rhat_options(value)))
    fwd = scorer.forward(enc.ids, keep_cache=True, stats_from=enc.prompt_len)
    sync(dev)
    t1 = time.perf_counter()
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=K))
    t2 = time.perf_counter()
    before = scorer.forward_tokens
    rredcot.run(TraceContext(scorer, enc, fwd, seg), rhat_options(value))
    sync(dev)
    t3 = time.perf_counter()
    return {"forward_s": t1 - t0, "segment_s": t2 - t1, "probes_s": t3 - t2,
            "probe_tokens": scorer.forward_tokens - before, "segments": len(seg),
            "ctx": (enc, fwd, seg)}


def naive_rhat(scorer: Scorer, trace: Trace, enc, seg, sample: int | None) -> dict:
    """R̂ probes with one plain forward each, on `sample` evenly spread boundaries (None: all);
    seconds scaled to all K + 1 boundaries."""
    forcing = answer_forcing(scorer, ForcingOptions())
    probe = forcing.answer_probe(trace.answer)
    a0, _ = probe.span("answer")
    bounds = seg.boundaries
    if sample is not None and sample < len(bounds):
        picks = sorted({round(i * (len(bounds) - 1) / (sample - 1)) for i in range(sample)})
        bounds = [bounds[i] for i in picks]
    conts = [Continuation(enc.prompt_len + b, probe.ids, a0, forcing.terminators or None)
             for b in bounds]
    before = scorer.forward_tokens
    m: dict = {}
    with measure(scorer.device, m):
        scorer.score_continuations_naive(enc.ids, conts)
    scale = len(seg.boundaries) / len(conts)
    return {"seconds": m["seconds"] * scale, "timed_probes": len(conts),
            "probes": len(seg.boundaries), "tokens": (scorer.forward_tokens - before) * scale,
            "extra_gib": m["extra_gib"]}


def part_speed(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    """Trace lengths outer, models inner: a run cut short loses the longest traces, not whole
    models. Models stay loaded between lengths (and for the generation part)."""
    plan = ctx.plan
    dtype = resolve_dtype("auto", ctx.device)
    result["notes"].append(
        f"dtype {str(dtype).replace('torch.', '')}; plain forward = model(input_ids) with logits "
        "at every position; redistribute = encode + forward with KV cache and entropies + "
        "segmentation + all probes + rows; multi = R̂ + v̂ over 4 references (the trace's "
        "solution and 3 listed in its 'solutions' field); naive = the same with one plain "
        "forward per R̂ probe "
        "(timed on evenly spread probes beyond the shortest traces, scaled to all); peak = "
        "weights + the most memory allocated above them during the measurement"
    )
    for n_tokens, segment_counts in plan.speed_runs:
        for name in plan.speed_models:
            shape = ctx.shapes[name]
            if n_tokens > shape.context:
                result["notes"].append(f"{name}: {n_tokens} tokens skipped (context "
                                       f"{shape.context})")
                continue
            deadline.check()
            scorer = ctx.scorer(name, dtype)
            for row in speed_rows(ctx, scorer, n_tokens, segment_counts, deadline):
                result["rows"].append(row)
                ctx.checkpoint()
            result["notes"] += [n for n in scorer.notes if n not in result["notes"]]


def speed_rows(ctx: RunContext, scorer: Scorer, n_tokens: int, segment_counts, deadline):
    """Rows of one model at one trace length: plain forward, redistribute (R̂, R̂ + v̂), naive."""
    plan, model, dev = ctx.plan, scorer.model, ctx.device
    weights = gib_of(model)
    trace = trace_for(scorer, n_tokens)
    x = torch.tensor([scorer.encode(trace).ids], device=dev)

    def plain():
        with torch.no_grad():
            model(input_ids=x)

    if not scorer.__dict__.get("_gpu_check_warm"):  # kernels, allocator, terminator ids
        warm = trace_for(scorer, plan.speed_runs[0][0])
        redistribute_once(scorer, warm, segment_counts[0], "multi")
        model(input_ids=torch.tensor([scorer.encode(warm).ids], device=dev))
        scorer.__dict__["_gpu_check_warm"] = True
    t_plain = timed(plain, dev, deadline)
    for K in segment_counts:
        deadline.check()
        row = {"model": scorer.name, "tokens": int(x.shape[1]), "segments_asked": K,
               "weights_gib": weights, "plain_s": t_plain["seconds"],
               "plain_peak_gib": peak(weights, t_plain)}
        for value in ("rhat", "both", "multi"):
            steps: dict = {}

            def once(value=value, steps=steps, K=K):
                steps.update(redistribute_once(scorer, trace, K, value))

            t = timed(once, dev, deadline)
            enc, _, seg = steps.pop("ctx")
            row.update({f"{value}_s": t["seconds"], f"{value}_peak_gib": peak(weights, t),
                        f"{value}_x_plain": t["seconds"] / t_plain["seconds"]})
            row.update({f"{value}_{k}": v for k, v in steps.items() if k != "segments"})
            row["segments"] = steps["segments"]
        deadline.check()
        sample = None if n_tokens <= plan.naive_all_below else plan.naive_sample
        naive = naive_rhat(scorer, trace, enc, seg, sample)
        naive_total = row["rhat_forward_s"] + row["rhat_segment_s"] + naive["seconds"]
        row.update({
            "naive_rhat_s": naive_total,
            "naive_probes_s": naive["seconds"],
            "naive_timed_probes": naive["timed_probes"],
            "naive_probe_tokens": naive["tokens"],
            "naive_peak_gib": peak(weights, naive),
            "naive_x_packed": naive_total / row["rhat_s"],
            "naive_probes_x_packed": naive["seconds"] / row["rhat_probes_s"],
        })
        yield row


def peak(weights: float, m: dict) -> float | None:
    return None if m.get("extra_gib") is None else weights + m["extra_gib"]


# ---- part: generation -------------------------------------------------------------------------
def part_generation(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    plan = ctx.plan
    dtype = resolve_dtype("auto", ctx.device)
    for name in plan.generation_models:
        deadline.check()
        scorer = ctx.scorer(name, dtype)
        weights = gib_of(scorer.model)
        generator = get_generator(scorer, "hf")
        trace = trace_for(scorer, plan.speed_runs[0][0])
        enc = scorer.encode(trace)
        # Rollout prompts as Monte Carlo makes them, n samples each: the prompt + the reasoning
        # up to a boundary; distinct prompts of about half the trace, so every batch size sees
        # the same prompt length.
        mid = enc.n_reasoning // 2
        n = plan.generation_samples
        generator.generate([enc.prefix(mid)], SamplingOptions(n=1, max_new_tokens=4,
                                                              batch_size=1))
        for batch in plan.generation_batches:
            deadline.check()
            prompts = [enc.prefix(mid - i) for i in range(max(1, batch // n))]
            options = SamplingOptions(n=n, max_new_tokens=plan.generation_new_tokens,
                                      temperature=1.0, seed=0, batch_size=batch)
            m: dict = {}
            with measure(ctx.device, m):
                out = generator.generate(prompts, options)
            completions = [c for cs in out for c in cs]
            new_tokens = sum(len(c.token_ids) for c in completions)
            result["rows"].append({
                "model": name, "batch": batch, "prompts": len(prompts), "samples": n,
                "prompt_tokens": int(sum(len(p) for p in prompts) / len(prompts)),
                "max_new_tokens": plan.generation_new_tokens,
                "completions": len(completions), "new_tokens": new_tokens,
                "truncated": sum(c.truncated for c in completions),
                "seconds": m["seconds"], "peak_gib": peak(weights, m),
                "completions_per_s": len(completions) / m["seconds"],
                "tokens_per_s": new_tokens / m["seconds"],
            })
            ctx.checkpoint()
        del scorer, generator
    ctx.release()


# ---- part: mc -------------------------------------------------------------------------------
def bench_rollouts():
    """benchmarks/bench_rollouts.py (its plain `generate` and timed Monte Carlo calls)."""
    import importlib.util

    path = Path(__file__).resolve().parent / "bench_rollouts.py"
    spec = importlib.util.spec_from_file_location("gpu_check_bench_rollouts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mc_calls(scorer: Scorer, trace: Trace, segments: int, rollouts: int, new_tokens: int) -> list:
    """The generator call `mc-baseline` makes for one trace: `rollouts` samples from every
    boundary, keyed as `methods.mc.sample_rollouts` keys them."""
    from cotcredit.methods.mc import McOptions

    enc = scorer.encode(trace)
    fwd = scorer.forward(enc.ids, keep_cache=False, stats_from=enc.prompt_len)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=segments))
    options = McOptions(rollouts=rollouts, max_new_tokens=new_tokens)
    prompts = [enc.prefix(b) for b in seg.boundaries]
    keys = [f"{trace.id}@{b}" for b in seg.boundaries]
    return [(prompts, options.sampling(rollouts), keys)]


def part_mc(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    """Monte Carlo rollouts as `mc-baseline` samples them (prefill, per-row random streams,
    stopping, slot batching) vs transformers `generate` decoding the same rows in batches of the
    same size from a prefilled KV cache (benchmarks/bench_rollouts.py, on a random model of a
    real shape: rows run to the token limit on both sides). Two repeats, alternating; then the
    same rows in batches of half the size, to see whether a row's samples depend on its batch."""
    rollouts = bench_rollouts()
    plan = ctx.plan
    dtype = resolve_dtype("auto", ctx.device)
    result["notes"].append(
        f"dtype {str(dtype).replace('torch.', '')}; {plan.mc_rollouts} rollouts from each of "
        f"{plan.mc_segments + 1} boundaries of a {plan.mc_tokens}-token trace, "
        f"{plan.mc_new_tokens} new tokens; plain = transformers generate on the same rows, "
        "prefill untimed")
    for name in plan.mc_models:
        deadline.check()
        scorer = ctx.scorer(name, dtype)
        weights = gib_of(scorer.model)
        generator = get_generator(scorer, "hf")
        trace = trace_for(scorer, plan.mc_tokens)
        calls = mc_calls(scorer, trace, plan.mc_segments, plan.mc_rollouts, plan.mc_new_tokens)
        prompts = calls[0][0]
        rows = len(prompts) * plan.mc_rollouts
        batch = min(rows, generator.auto_batch_size(max(len(p) for p in prompts)
                                                    + plan.mc_new_tokens))
        generator.generate([prompts[-1]], SamplingOptions(n=1, max_new_tokens=4, batch_size=1))
        mc_tps, plain_tps, first, identical = [], [], None, True
        m: dict = {}
        for _ in range(2):
            deadline.check()
            with measure(ctx.device, m):
                mc_s, mc_tok, samples = rollouts.mc_generate(generator, calls)
            pl_s, pl_tok = rollouts.plain_generate(scorer, prompts, plan.mc_rollouts, batch,
                                                   plan.mc_new_tokens, 1.0, 1.0)
            first = samples if first is None else first
            identical &= samples == first
            mc_tps.append(mc_tok / mc_s)
            plain_tps.append(pl_tok / pl_s)
        deadline.check()
        half = [(p, dataclasses.replace(o, batch_size=max(1, batch // 2)), k)
                for p, o, k in calls]
        _, _, halved = rollouts.mc_generate(generator, half)
        same = [a == b for x, y in zip(first[0], halved[0], strict=True)
                for a, b in zip(x, y, strict=True)]
        result["rows"].append({
            "model": name, "rows": rows, "batch": batch, "prompt_tokens": len(prompts[-1]),
            "max_new_tokens": plan.mc_new_tokens,
            "mc_tokens_per_row": sum(len(t) for cs in first[0] for t in cs) / rows,
            "mc_tokens_per_s": statistics.median(mc_tps),
            "plain_tokens_per_s": statistics.median(plain_tps),
            "plain_over_mc": statistics.median(p / q for p, q in zip(plain_tps, mc_tps,
                                                                    strict=True)),
            "mc_rollouts_per_s": statistics.median(rows * t / mc_tok for t in mc_tps),
            "mc_identical_across_repeats": identical,
            "same_at_half_batch": sum(same) / len(same),
            "mc_peak_gib": peak(weights, m),
        })
        ctx.checkpoint()
    ctx.release()


# ---- part: bench ------------------------------------------------------------------------------
def part_bench(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    """`cotcredit bench` at the plan's size on the regimes with shipped checkpoints (hops needs
    the embedded model, which is not carried), one regime at a time, traces sampled on the
    device into a fresh cache; reports (figures) off. Wall seconds per regime and its headline
    figures from the leaderboard."""
    try:
        import math_verify  # noqa: F401  (grading)
        import pydantic  # noqa: F401  (the bench's variant options)
    except ImportError as e:
        result["status"] = f"skipped: {e.name} is not installed"
        result["notes"].append("needs math-verify and pydantic: carry their wheels (README)")
        return
    from cotcredit.bench.run import run_bench
    from cotcredit.bench.sizes import BenchSize

    ctx.release()
    plan = ctx.plan
    size = plan.bench_size
    if not isinstance(size, str):
        problems, samples, n = size
        size = BenchSize(problems=problems, samples=samples, rollouts=n, n_boot=50, splits=2)
    with tempfile.TemporaryDirectory(prefix="gpu_check_bench") as tmp:
        for regime in plan.bench_regimes:
            deadline.check()
            lines: list[str] = []
            m: dict = {}
            with measure(ctx.device, m):
                res = run_bench(regime, output=Path(tmp) / regime, size=size,
                                cache=str(Path(tmp) / "cache"), reports=False, log=lines.append)
            row = {"regime": regime, "seconds": m["seconds"], "peak_gib": m["extra_gib"],
                   "failures": res.failures, "log_lines": len(lines), "methods": {}}
            for r in res.leaderboard.to_dict(orient="records"):
                row["methods"][r["method"]] = {
                    k: (None if isinstance(r[k], float) and not math.isfinite(r[k]) else r[k])
                    for k in ("kind", "loc_top1", "mc_spearman", "seconds", "forward_tokens",
                              "generated_tokens")}
            result["rows"].append(row)
            ctx.checkpoint()
    result["notes"].append(f"size {plan.bench_size}; methods: the size's default and mc")


# ---- part: train ------------------------------------------------------------------------------
PROBLEMS = [
    (PROMPT, ANSWER),
    ("What is 3 + 4?", "7"),
    ("What is 5 + 7?", "12"),
    ("A pear costs 4 dollars. What do two pears cost?", "8"),
]


def varied_reward(completion_ids, **kwargs) -> list[float]:
    """A reward that differs between random completions (share of even token ids), so groups
    have a non-zero advantage and every completion is scored in mode rredcot."""
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def part_train(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    try:
        import trl
        from datasets import Dataset
    except Exception as e:  # missing, or an installed version that does not import here
        why = (f"{e.name} is not installed" if isinstance(e, ImportError) and e.name
               else f"trl/datasets do not import ({type(e).__name__}: {str(e)[:200]})")
        result["status"] = f"skipped: {why}"
        result["notes"].append(
            "needs trl and datasets: carry their wheels (`pip download --no-deps -d wheels ...` "
            "here, `pip install --no-index --no-deps --target DIR wheels/*.whl` and "
            "PYTHONPATH=DIR there; see the README)"
        )
        return
    import warnings

    from transformers.trainer_callback import PrinterCallback
    from transformers.utils import logging as hf_logging

    from cotcredit.training.scoring import PolicySegmentRewards
    from cotcredit.training.trainer import RredcotGRPOTrainer

    hf_logging.set_verbosity_error()
    ctx.release()
    plan = ctx.plan
    shape = ctx.shapes[plan.train_model]
    tok = ctx.tokenizer(shape.vocab)
    cuda = ctx.device.type == "cuda"
    dataset = Dataset.from_list([
        {"prompt": [{"role": "user", "content": q}], "answer": a, "solution": SOLUTION}
        for q, a in PROBLEMS
    ])
    for mode in ("grpo", "rredcot"):
        deadline.check()
        model = build_model(shape, torch.device("cpu"), torch.float32)  # the trainer moves it
        with tempfile.TemporaryDirectory(prefix="gpu_check_train") as out, \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args = trl.GRPOConfig(
                output_dir=out, use_cpu=not cuda, bf16=cuda and torch.cuda.is_bf16_supported(),
                gradient_checkpointing=False, num_generations=plan.train_generations,
                max_completion_length=plan.train_completion,
                per_device_train_batch_size=plan.train_batch, gradient_accumulation_steps=1,
                max_steps=1, save_strategy="no", logging_steps=1, learning_rate=1e-6,
                report_to="none", disable_tqdm=True, seed=0,
            )
            scoring = PolicySegmentRewards(model, tok, segments=8) if mode == "rredcot" else None
            trainer = RredcotGRPOTrainer(
                model=model, reward_funcs=varied_reward, args=args, train_dataset=dataset,
                processing_class=tok, advantage_mode=mode, segment_rewards_fn=scoring,
            )
            trainer.remove_callback(PrinterCallback)  # its log dicts would bury the table
            m: dict = {}
            with measure(ctx.device, m):
                trainer.train()
        logged = trainer.state.log_history[0] if trainer.state.log_history else {}
        pick = ("step_time", "loss", "reward", "completions/mean_length",
                "rredcot/scoring_seconds", "rredcot/scored_fraction", "rredcot/segments_mean")
        result["rows"].append({
            "model": shape.name, "mode": mode, "steps": trainer.state.global_step,
            "completions": plan.train_batch, "max_completion_length": plan.train_completion,
            "train_s": m["seconds"], "peak_gib": m["extra_gib"],
            "bf16": bool(args.bf16),
            **{k: logged.get(k) for k in pick if k in logged},
        })
        del trainer, model
        free_memory()
        ctx.checkpoint()
    result["notes"].append(f"trl {trl.__version__}; reward = share of even token ids (random "
                           "completions are never correct)")
    train_sources(ctx, deadline, result)


# Every credit source and advantage form through `cotcredit.train`, one step each, on the
# `unique` regime's shipped checkpoint and problems (tests/test_train_credit.py's config).
def source_config(model: str, advantage: str, form: str) -> dict:
    """A one-step `cotcredit train` config of a credit source and advantage form."""
    return {
        "model": model, "train_file": "train.jsonl", "output_dir": f"out-{advantage}-{form}",
        "seed": 3, "advantage": advantage,
        "credit": {"form": form, "segments": "lines", "shuffled": "oracle"},
        "oracle": {"regime": "unique"}, "mc": {"rollouts": 4},
        "rredcot": {"value": "both", "exit_string": "The answer is "},
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 8,
                 "max_completion_length": 48, "max_steps": 1, "save_steps": 1,
                 "learning_rate": 1e-4, "beta": 0.0, "report_to": "none",
                 "extra": {"disable_tqdm": True}},
    }


SOURCES_AND_FORMS = (("grpo", "reweight"),
                     *((a, f) for a in ("oracle", "mc", "rredcot", "shuffled")
                       for f in ("reweight", "segment-rewards")))


def train_sources(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    try:
        import math_verify  # noqa: F401  (the correctness reward)
        import pydantic  # noqa: F401  (the config)
    except ImportError as e:
        result["notes"].append(f"credit sources skipped: {e.name} is not installed")
        return
    import warnings

    import yaml

    from cotcredit.bench.regimes import checkpoint, get_regime
    from cotcredit.bench.regimes.base import write_problems
    from cotcredit.training.metrics import read_metrics
    from cotcredit.training.run import train

    with tempfile.TemporaryDirectory(prefix="gpu_check_sources") as tmp:
        folder = Path(tmp)
        write_problems(get_regime("unique").problems("train", 8), folder / "train.jsonl")
        for advantage, form in SOURCES_AND_FORMS:
            deadline.check()
            name = f"{advantage}-{form}"
            path = folder / f"{name}.yaml"
            path.write_text(yaml.safe_dump(source_config(str(checkpoint("unique")), advantage,
                                                         form)))
            m: dict = {}
            with warnings.catch_warnings(), measure(ctx.device, m):
                warnings.simplefilter("ignore")
                run = train(path, overwrite=True)
            logged = read_metrics(run.metrics)[-1]
            result["rows"].append({
                "model": "unique (shipped)", "mode": advantage, "form": form,
                "steps": logged.get("step"), "completions": 8, "max_completion_length": 48,
                "train_s": m["seconds"], "peak_gib": m["extra_gib"],
                **{k: logged.get(k) for k in ("step_time", "reward", "rredcot/scoring_seconds",
                                              "rredcot/scored_fraction")},
            })
            ctx.checkpoint()


# ---- the run ----------------------------------------------------------------------------------
@dataclass
class RunContext:
    args: argparse.Namespace
    device: torch.device
    plan: Plan
    shapes: dict[str, Shape]
    report: dict
    _tokenizers: dict = dataclasses.field(default_factory=dict)
    _scorers: dict = dataclasses.field(default_factory=dict)

    def tokenizer(self, vocab: int) -> PreTrainedTokenizerFast:
        if vocab not in self._tokenizers:
            self._tokenizers[vocab] = build_tokenizer(vocab)
        return self._tokenizers[vocab]

    def scorer(self, name: str, dtype: torch.dtype) -> Scorer:
        """A scorer on a random model of shape `name`, built once and kept until `release`."""
        key = (name, dtype)
        if key not in self._scorers:
            shape = self.shapes[name]
            model = build_model(shape, self.device, dtype)
            self._scorers[key] = Scorer(model, self.tokenizer(shape.vocab), name=name)
        return self._scorers[key]

    def release(self) -> None:
        self._scorers.clear()
        free_memory()

    def checkpoint(self) -> None:
        """Write the JSON so far: a run cut short keeps what it measured."""
        if self.args.json:
            write_json(self.args.json, self.report)


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def installed_versions(names) -> dict[str, str | None]:
    """Each distribution's version, None where it is not installed (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def metadata(device: torch.device, args, plan: Plan) -> dict:
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
        else (platform.processor() or platform.machine()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "cotcredit": cotcredit.__version__,
        "python": platform.python_version(),
        # the training and bench stack, where installed (carried as wheels on a GPU machine)
        "packages": installed_versions(("trl", "datasets", "accelerate", "pydantic",
                                        "math-verify", "pyarrow")),
        "threads": torch.get_num_threads(),
        "small": bool(args.small),
        "budget_s": args.budget,
        "argv": sys.argv[1:],
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta["device_memory_gib"] = props.total_memory / GIB
        meta["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    try:
        meta["git"] = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
            text=True, timeout=5,
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        meta["git"] = None
    return meta


RUNNERS = {"agreement": part_agreement, "speed": part_speed, "generation": part_generation,
           "mc": part_mc, "bench": part_bench, "train": part_train}


def run_parts(ctx: RunContext, parts: list[str]) -> None:
    start = time.monotonic()
    for i, part in enumerate(parts):
        left = ctx.args.budget - (time.monotonic() - start)
        share = SHARES[part] / sum(SHARES[p] for p in parts[i:])
        budget = max(0.0, left * share)
        result = {"status": "ok", "budget_s": round(budget, 1), "seconds": 0.0, "rows": [],
                  "notes": []}
        ctx.report["parts"][part] = result
        print(f"[gpu_check] {part}: budget {budget:.0f} s", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        if budget < 1.0:
            result["status"] = "skipped: time"
            continue
        deadline = Deadline(budget)
        try:
            with deadline:
                RUNNERS[part](ctx, deadline, result)
        except PartTimeout:
            result["status"] = "skipped: time"
        except KeyboardInterrupt:
            if not deadline.fired:
                raise
            result["status"] = "skipped: time"
        except Exception as e:  # a broken part is a finding: record it, run the next
            from cotcredit.errors import is_oom

            kind = "out of memory" if is_oom(e) else type(e).__name__
            first = (str(e).strip().splitlines() or [""])[0][:300]
            result["status"] = f"error: {kind}: {first}"
            result["traceback"] = traceback.format_exc(limit=12)
        result["seconds"] = round(time.monotonic() - t0, 2)
        if result["status"] == "skipped: time" and result["rows"]:
            result["notes"].append(f"stopped at its deadline after {len(result['rows'])} rows")
        free_memory()
        ctx.checkpoint()


# ---- the table --------------------------------------------------------------------------------
def fmt(x, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x == 0 or not math.isfinite(x):
            return str(x)
        return f"{x:.{digits}g}" if abs(x) < 100 else f"{x:.0f}"
    return str(x)


def gib(x) -> str:
    return "-" if x is None else f"{x:.2f} GiB"


def table_rows(report: dict) -> list[tuple[str, str, str, str, str]]:
    """(part, model, setting, figures, status) for every row of every part."""
    out = []
    for part, res in report["parts"].items():
        status = res["status"]
        for r in res["rows"]:
            if part == "agreement":
                setting = f"{r['quantity']}, {r['tokens']} tok, K={r['segments']}"
                figs = f"fp32 Δ {fmt(r['fp32_packed_vs_naive'])} (tol {fmt(r['fp32_tolerance'])})"
                if "bf16_packed_vs_fp32" in r:
                    figs += (f"; bf16 Δ vs naive {fmt(r['bf16_packed_vs_naive'])}, vs fp32 packed "
                             f"{fmt(r['bf16_packed_vs_fp32'])} / naive "
                             f"{fmt(r['bf16_naive_vs_fp32'])} (tol {fmt(r['bf16_tolerance'])})")
                figs += f"; spread {fmt(r['spread'])}"
                ok = r["fp32_ok"] and r.get("bf16_ok", True)
                out.append((part, r["model"], setting, figs, "ok" if ok else "FAIL"))
            elif part == "speed":
                setting = f"{r['tokens']} tok, K={r['segments']}"
                figs = (f"plain {fmt(r['plain_s'])} s; R̂ {fmt(r['rhat_x_plain'])}x, "
                        f"R̂+v̂ {fmt(r['both_x_plain'])}x, 4 refs "
                        f"{fmt(r.get('multi_x_plain'))}x plain; naive R̂ "
                        f"{fmt(r['naive_x_packed'])}x slower; segmentation "
                        f"{fmt(r['rhat_segment_s'])} s; peak plain {gib(r['plain_peak_gib'])}, "
                        f"R̂+v̂ {gib(r['both_peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
            elif part == "generation":
                setting = f"batch {r['batch']}, {r['prompt_tokens']}+{r['max_new_tokens']} tok"
                figs = (f"{fmt(r['completions_per_s'])} completions/s, "
                        f"{fmt(r['tokens_per_s'])} tokens/s; peak {gib(r['peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
            elif part == "mc":
                setting = (f"{r['rows']} rollouts, batch {r['batch']}, "
                           f"{r['prompt_tokens']}+{r['max_new_tokens']} tok")
                figs = (f"mc {fmt(r['mc_tokens_per_s'])} tokens/s "
                        f"({fmt(r['mc_rollouts_per_s'])} rollouts/s), plain generate "
                        f"{fmt(r['plain_tokens_per_s'])}: plain/mc {fmt(r['plain_over_mc'])}; "
                        f"same across repeats {'yes' if r['mc_identical_across_repeats'] else 'NO'}"
                        f", same at half batch {fmt(r['same_at_half_batch'])}; "
                        f"peak {gib(r['mc_peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
            elif part == "bench":
                per = "; ".join(
                    f"{k} {fmt(v['seconds'])} s/trace" + (f" loc {fmt(v['loc_top1'], 2)}"
                                                    if v.get("loc_top1") is not None else "")
                    for k, v in r["methods"].items() if v.get("seconds") is not None)
                figs = (f"{fmt(r['seconds'])} s in all; {per}"
                        + (f"; FAILED {r['failures']}" if r["failures"] else ""))
                out.append((part, r["regime"], "quick" if not meta_small(report) else "small",
                            figs, status))
            elif part == "train":
                setting = f"{r['mode']}, {r['completions']} x {r['max_completion_length']} tok"
                if r.get("form"):
                    setting = f"{r['mode']} / {r['form']}, {r['completions']} x " \
                              f"{r['max_completion_length']} tok"
                figs = (f"step {fmt(r.get('step_time'))} s (train() {fmt(r['train_s'])} s); "
                        f"scoring {fmt(r.get('rredcot/scoring_seconds'))} s; "
                        f"peak {gib(r['peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
        if not res["rows"]:
            out.append((part, "-", "-", "; ".join(res["notes"])[:200] or "-", status))
    return out


def meta_small(report: dict) -> bool:
    return bool(report.get("meta", {}).get("small"))


def print_table(report: dict) -> None:
    meta = report["meta"]
    title = (f"cotcredit gpu_check — {meta['device_name']} ({meta['device']}), torch "
             f"{meta['torch']}, transformers {meta['transformers']}, {meta['date']}")
    rows = table_rows(report)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max(len(r[i]) for r in rows + [("part", "model", "setting", "", "status")])
                  for i in range(5)]
        for r in [("part", "model", "setting", "figures", "status"), *rows]:
            print("  ".join(c.ljust(w) if i != 3 else c for i, (c, w) in
                            enumerate(zip(r, widths, strict=True))))
        return
    table = Table(title=title, show_lines=False)
    for col in ("part", "model", "setting", "figures", "status"):
        table.add_column(col, overflow="fold")
    last = None
    for r in rows:
        if last is not None and r[0] != last:
            table.add_section()
        table.add_row(*r)
        last = r[0]
    Console(width=max(120, int(os.environ.get("COLUMNS", 0) or 0))).print(table)


def markdown_table(report: dict) -> str:
    """The printed table as Markdown, under a line naming device, versions and date."""
    meta = report["meta"]
    lines = [
        f"{meta['device_name']} ({meta['device']}), torch {meta['torch']}, transformers "
        f"{meta['transformers']}, {meta['date'][:10]}: `python benchmarks/gpu_check.py "
        f"{' '.join(meta['argv'])}`",
        "",
        "| part | model | setting | figures | status |",
        "|---|---|---|---|---|",
    ]
    for row in table_rows(report):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:5]))
    ap.add_argument("--device", default="auto", help="auto (CUDA when available) | cuda | cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes and short traces (CPU, CI)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    ap.add_argument("--budget", type=float, default=None,
                    help="global deadline in seconds [default: 540, --small 60]")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--markdown", type=Path, default=None,
                    help="also write the table as Markdown (for the README)")
    ap.add_argument("--models", default=None,
                    help="comma list: only these shapes (default: all of the plan; names: "
                    f"{', '.join([*REAL, *SMALL])})")
    ap.add_argument("--tokens", default=None,
                    help="comma list: trace lengths of the speed part instead of the plan's (the "
                    "first also sizes the agreement trace), e.g. 256 for a quick look")
    ap.add_argument("--segments", default=None,
                    help="comma list: segment counts K instead of the plan's (the first also for "
                    "agreement)")
    ap.add_argument("--regimes", default=None,
                    help="comma list: the bench part's regimes instead of the plan's")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"--parts: unknown {', '.join(unknown)} (choose from {', '.join(PARTS)})")
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            ap.error("--device cuda: CUDA is not available on this machine")
    if args.threads:
        torch.set_num_threads(args.threads)
    plan = SMALL_PLAN if args.small else REAL_PLAN
    shapes = SMALL if args.small else REAL
    if args.models:
        keep = [m.strip() for m in args.models.split(",") if m.strip()]
        bad = [m for m in keep if m not in shapes]
        if bad:
            ap.error(f"--models: unknown {', '.join(bad)} here (choose from {', '.join(shapes)})")
        plan = only_models(plan, keep)
    try:
        plan = with_sizes(plan, parse_ints(args.tokens), parse_ints(args.segments))
    except ValueError:
        ap.error("--tokens and --segments take comma lists of positive integers")
    if args.regimes:
        plan = dataclasses.replace(plan, bench_regimes=tuple(
            r.strip() for r in args.regimes.split(",") if r.strip()))
    if args.budget is None:
        args.budget = plan.budget
    if device.type == "cuda":
        # Full float32 matmuls: the float32 agreement check must not run in TF32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif not args.small:
        print("[gpu_check] real shapes on CPU take far longer than --budget allows; parts will "
              "stop at their deadlines (use --small)", file=sys.stderr)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    report = {"meta": metadata(device, args, plan), "parts": {}}
    ctx = RunContext(args, device, plan, shapes, report)
    t0 = time.monotonic()
    run_parts(ctx, parts)
    report["meta"]["seconds"] = round(time.monotonic() - t0, 1)
    ctx.checkpoint()
    print_table(report)
    if args.markdown:
        args.markdown.write_text(markdown_table(report))
    if args.json:
        print(f"[gpu_check] wrote {args.json}", file=sys.stderr)
    broken = [p for p, r in report["parts"].items() if r["status"].startswith("error")]
    disagree = [r for r in report["parts"].get("agreement", {}).get("rows", [])
                if not r["fp32_ok"] or r.get("bf16_ok") is False]
    return 1 if broken or disagree else 0


if __name__ == "__main__":
    sys.exit(main())
