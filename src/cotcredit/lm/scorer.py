"""The scorer: every forward pass the methods need, on one loaded causal LM.

Methods ask it questions (token log-probs and entropies, log p(continuation | prefix) for many
prefixes, perturbed sequences, differentiable embedding scores) and never call the model
themselves, so speed work happens in one place.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import time
from collections.abc import Sequence

import torch

from cotcredit.data.trace import Trace
from cotcredit.errors import first_line
from cotcredit.lm import packing
from cotcredit.lm.backoff import BatchSize, run_batched
from cotcredit.lm.encoding import (
    EncodedTrace,
    completion_text,
    encode_completion,
    encode_trace,
    rendered_by_template,
    template_markers,
)
from cotcredit.lm.head import OutputHead, cache_arg, decoder_of
from cotcredit.lm.loading import (
    ModelOptions,
    load_model_files,
    locate_model,
    model_fingerprint,
    resolve_device,
    resolve_dtype,
)
from cotcredit.lm.packing import MIN_QUERY_BUDGET, AttentionLayout, PackedModel
from cotcredit.lm.passes import (
    Continuation,
    ContinuationScore,
    TracePass,
    continuation_scores,
    token_stats,
)


def _home_relative(path: str) -> str:
    """`path` with the user's home folder written as ~ (other paths and hub ids unchanged)."""
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (path == home or path.startswith(home + os.sep)):
        return "~" + path[len(home):]
    return path


class Scorer:
    """Owns a causal LM and its tokenizer and answers every scoring question of the methods.

    Logits are computed in float32 whatever the model's dtype, with the family's output
    processing (`head`); the first pass checks them against the model's own `forward`.
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
        # On CPU the masked-out part of a large pass costs more than the extra passes of a
        # small one (benchmarks/bench_query_budget.py).
        self.query_budget = query_budget or (4096 if self.device.type == "cuda" else 256)
        self.fingerprint = ""  # content hash of a local model folder (set by load_scorer)
        self.layout = AttentionLayout.of(model.config)
        self.head = OutputHead(model)  # the float32 head, checked once against the model
        self.forward_tokens = 0  # tokens run through the model so far (cost accounting)
        self.notes: list[str] = []  # things a run should say once (e.g. attention switched)
        self._prefix_terminators: dict[str, tuple[int, ...]] = {}

    def with_options(self, options: ModelOptions) -> Scorer:
        """This scorer (same model, head, notes, budget) with other `ModelOptions`."""
        s = copy.copy(self)
        s.options = options
        return s

    # ---- description -------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        """The model's context length in tokens (unbounded when its config names none)."""
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
    @functools.cached_property
    def template_markers(self) -> tuple[str, ...]:
        """The special tokens the tokenizer's chat template writes (`encoding.template_markers`),
        found once."""
        return template_markers(self.tokenizer)

    @property
    def uses_chat_template(self) -> bool:
        """Whether prompts are rendered with the tokenizer's chat template."""
        return bool(self.options.chat_template and getattr(self.tokenizer, "chat_template", None))

    def render_prompt(self, prompt: str) -> str:
        """The prompt as the model sees it, ready for the response to be appended. A prompt
        already in the model's chat format (few-shot conversations, traces logged with their
        template) is used as it is."""
        if not self.uses_chat_template or rendered_by_template(self.tokenizer, prompt,
                                                                 self.template_markers):
            return prompt
        messages = []
        if self.options.system_prompt:
            messages.append({"role": "system", "content": self.options.system_prompt})
        messages.append({"role": "user", "content": prompt})
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def encode_text(self, text: str) -> list[int]:
        """Token ids of `text`, no special tokens added."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of a prompt as the model sees it (`render_prompt`; a BOS token where the
        model's training data began with one)."""
        ids = self.encode_text(self.render_prompt(prompt))
        bos = self.tokenizer.bos_token_id
        # Without a template, start like the model's training data did when it uses a BOS token.
        if (
            not self.uses_chat_template
            and not rendered_by_template(self.tokenizer, prompt, self.template_markers)
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

    # ---- logits (the float32 head: `head`) ------------------------------------------------
    def _decoder(self):
        return decoder_of(self.model)

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits for hidden states (..., hidden), with the family's output processing."""
        return self.head.logits(hidden)

    def check_head(self) -> None:
        """Compare `head_logits` on the decoder's hidden states with the model's own forward on a
        short sequence, once per model; a mismatch is a UserError naming the model family."""
        if self.head.checked:
            return
        ids = self.encode_text("Let me check: 3 + 4 = 7, so the answer is 7.")[:16] or [0, 1, 2]
        self.head.check(self._decoder(), ids)

    # ---- forward passes ------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, ids: Sequence[int], keep_cache: bool = True,
                stats_from: int = 0) -> TracePass:
        """One pass over `ids`: log-probs and entropies from position `stats_from` - 1 on (the
        distributions tokens `stats_from`.. were drawn from), computed in chunks of positions so
        a long trace never materialises a (tokens x vocabulary) tensor; the KV cache keeps every
        layer's keys whole (also sliding-window layers), for the packed probes."""
        from transformers import DynamicCache

        self.check_head()
        t0 = time.perf_counter()
        x = torch.tensor([list(ids)], device=self.device)
        cache = DynamicCache() if keep_cache else None
        decoder = self._decoder()
        out = decoder(input_ids=x, **cache_arg(decoder, cache), use_cache=keep_cache)
        self.forward_tokens += x.shape[1]
        logprobs, entropies = token_stats(self.head, out.last_hidden_state[0], x[0], stats_from)
        # The cache object is filled in place by the forward pass.
        return TracePass(list(ids), logprobs, entropies, cache, time.perf_counter() - t0)

    @torch.no_grad()
    def hidden_states(self, ids: Sequence[int], positions: Sequence[int],
                      layer: str | int = "last") -> torch.Tensor:
        """Float32 hidden states (len(positions), hidden) at `positions` of one forward pass over
        `ids`: layer "last" is the decoder's output (after its final norm: what the head reads),
        "middle" the output of block ⌈L/2⌉ of L, an int i the i-th of the model's
        `hidden_states` (0: the embeddings)."""
        x = torch.tensor([list(ids)], device=self.device)
        decoder = self._decoder()
        out = decoder(input_ids=x, output_hidden_states=layer != "last", use_cache=False)
        self.forward_tokens += x.shape[1]
        if layer == "last":
            hidden = out.last_hidden_state
        else:
            states = out.hidden_states
            index = len(states) // 2 if layer == "middle" else int(layer)  # L + 1 states
            hidden = states[index]
        return hidden[0, list(positions)].float().cpu()

    @torch.no_grad()
    def forward_batch(
        self, seqs: Sequence[Sequence[int]], stats_from: Sequence[int]
    ) -> tuple[list[TracePass], object]:
        """`forward` for several sequences in one right-padded pass: a `TracePass` per sequence
        (without a cache of its own) and the batch's KV cache (B rows of the longest length),
        for `score_continuation_batch`. Equal to `forward` row by row up to float rounding."""
        from transformers import DynamicCache

        self.check_head()
        t0 = time.perf_counter()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        x, att = self._right_padded(seqs, pad)
        cache = DynamicCache()
        decoder = self._decoder()
        out = decoder(input_ids=x, attention_mask=att, **cache_arg(decoder, cache),
                      use_cache=True)
        self.forward_tokens += sum(len(q) for q in seqs)
        passes = []
        for j, q in enumerate(seqs):
            n = len(q)
            stats = token_stats(self.head, out.last_hidden_state[j, :n], x[j, :n], stats_from[j])
            passes.append(TracePass(list(q), *stats, None, 0.0))
        seconds = (time.perf_counter() - t0) / len(seqs)
        for p in passes:
            p.seconds = seconds
        return passes, cache

    def score_continuation_batch(
        self, cache, rows_ids: Sequence[Sequence[int]],
        rows_conts: Sequence[Sequence[Continuation]],
    ) -> list[list[ContinuationScore]]:
        """`score_continuations` for every row of a `forward_batch` at once (`packing`);
        out-of-memory is raised (the caller splits the batch)."""
        if self.layout.unsupported:
            self._note_unpacked()
            return [self.score_continuations_naive(ids, conts)
                    for ids, conts in zip(rows_ids, rows_conts, strict=True)]
        packed = self._packed()
        try:
            return packing.score_continuation_batch(
                packed, self.query_budget, cache, rows_ids, rows_conts)
        finally:
            self.forward_tokens += packed.tokens

    def score_continuations(
        self, base: TracePass, conts: Sequence[Continuation]
    ) -> list[ContinuationScore]:
        """log p(continuation | base.ids[:prefix_len]) for many continuations, packed on
        `base.cache` (`packing`); a layout packed passes cannot reproduce runs one per block."""
        if self.layout.unsupported:
            self._note_unpacked()
            return self.score_continuations_naive(base.ids, conts)
        packed = self._packed()
        budget = BatchSize(self.query_budget, MIN_QUERY_BUDGET)
        try:
            return packing.score_continuations(packed, base, conts, budget)
        finally:
            self.query_budget = budget.value
            self.forward_tokens += packed.tokens

    def _packed(self) -> PackedModel:
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return PackedModel(self._decoder(), self.head, self.model, self.layout, self.dtype,
                           self.device,
                           pad, self._note)

    def _note_unpacked(self) -> None:
        self._note(f"packed probes do not support attention '{self.layout.unsupported}': probes "
                   "run one forward pass each (slower, same numbers)")

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

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
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        rows = list(zip(seqs, target_lens, strict=True))
        return run_batched(
            rows,
            lambda batch: self._score_batch([q for q, _ in batch], [t for _, t in batch],
                                            terminators, pad),
            BatchSize(batch_size),
            too_big=lambda batch, e: (
                f"out of memory scoring one sequence of {len(batch[0][0])} tokens "
                f"({first_line(e)}); use a shorter trace, --dtype bfloat16 or a larger GPU"),
        )

    def _right_padded(self, seqs: Sequence[Sequence[int]], pad: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, attention mask) of `seqs` padded on the right to the longest."""
        width = max(len(q) for q in seqs)
        x = torch.full((len(seqs), width), pad, dtype=torch.long, device=self.device)
        att = torch.zeros((len(seqs), width), dtype=torch.long, device=self.device)
        for j, q in enumerate(seqs):
            x[j, : len(q)] = torch.tensor(list(q), device=self.device)
            att[j, : len(q)] = 1
        return x, att

    def _score_batch(self, batch, target_lens, terminators, pad) -> list[float]:
        self.check_head()
        x, att = self._right_padded(batch, pad)
        h = self._decoder()(input_ids=x, attention_mask=att).last_hidden_state
        self.forward_tokens += sum(len(q) for q in batch)
        conts, rows, flat, at = [], [], [], 0
        for j, q in enumerate(batch):
            n, t = len(q), target_lens[j]
            conts.append(Continuation(prefix_len=n - t, ids=list(q[n - t :]),
                                      terminators=terminators))
            rows.append(list(range(at, at + t + 1)))  # the token before the target, then it
            flat.append(h[j, n - t - 1 : n])
            at += t + 1
        scores = continuation_scores(self.head, torch.cat(flat), rows, conts)
        return [s.logprob for s in scores]

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


_LOADED: dict[tuple, Scorer] = {}  # one model per (model, device, dtype) per process


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
