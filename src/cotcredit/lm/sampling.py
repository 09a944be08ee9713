"""Sampling completions: the one generation interface of cotcredit.

Monte Carlo rollouts (`methods/mc.py`), `cotcredit generate` and anything else that samples text
call `get_generator(scorer, backend).generate(prompts, options, keys)` (a method the run's one,
`ctx.generator(backend)`): prompts are token-id lists (already rendered, e.g. prompt + a prefix
of the reasoning), and the answer is, per prompt, `options.n` `Completion`s (generated ids,
their text, why generation stopped).

Backends
- `hf` (default; CPU and GPU): the scorer's own model (no second copy), decoding many prompts x
  n samples at once in slots (`cotcredit.lm.slots`): a row leaves its slot the step it ends and
  the next row takes the slot, so no step is spent on rows that are done. A prompt is run once
  (prefill) and its keys and values are copied to each of its n rows as they join; a prompt
  that starts the previous one (Monte Carlo's states are prefixes of one another) takes the
  previous prompt's first columns instead of running again. Rows go longest prompt first. The
  number of slots is automatic (from free memory and the KV cache size) or fixed; on
  out-of-memory the rows still decoding start again in half the slots (the rows already
  finished are kept), and the smaller number is kept for later calls.
- `vllm` (`pip install vllm`, CUDA): `LLM(model=<the scorer's model folder>,
  enable_prefix_caching=True)`, prompts given as token ids, `SamplingParams(n=..., seed=...)` per
  prompt. Imported lazily.

Sampling distribution. Only the options given count: the model's `generation_config` defaults
(temperature, top-k, repetition penalty...) are not applied. temperature 0 is greedy decoding
(its n samples are copies of one). Generation stops at the tokenizer's EOS, the model's
configured EOS ids and `<|im_end|>`/`<|eot_id|>`/`<|endoftext|>` when the vocabulary has them.

Determinism. Sample j of a prompt draws its random numbers from its own stream, seeded by
sha256(seed, key of the prompt, j), where j counts from `options.first_sample` (so a later call
continues a prompt's samples: adaptive Monte Carlo's rounds); `keys` default to the prompt's token ids (+ its occurrence
index among identical prompts of the call). The hf backend samples by inverse CDF with one
uniform number per row and step from that stream, so what a row generates does not depend on
the batch size, the order of prompts, the other prompts of the call or out-of-memory retries;
same seed + backend + device → identical output, up to float rounding: the rows decoded beside a
row and the width of its cache frame can change the last bits of its logits on some models, which
moves a draw that falls within rounding of a token boundary (SmolLM2-135M: 1 of 144 rollouts when
two traces shared one call; none between 32 and 72 slots).
"""

from __future__ import annotations

import os
import random
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads with the first generation (keeps `--help` fast)
    import torch

    from cotcredit.lm.slots import KV

from cotcredit.errors import UserError
from cotcredit.lm.backoff import BatchSize, run_batched
from cotcredit.lm.generation import (
    BACKENDS,
    Completion,
    GenerationStats,
    Generator,
    decode_continuation,
    default_keys,
    row_seed,
    stop_token_ids,
)
from cotcredit.lm.vllm_sampling import VLLMGenerator

_CPU_MAX_BATCH = 32  # slots on CPU (throughput flattens beyond; see benchmarks)
_GPU_MAX_BATCH = 512


# ---- transformers backend ------------------------------------------------------------------
def inverse_cdf_tokens(logits: torch.Tensor, rngs: list[random.Random], temperature: float,
                       top_p: float) -> list[int]:
    """One token per row of `logits`, each drawn with its row's own random stream.

    Temperature scaling, then nucleus (top-p) filtering, then one uniform number u per row:
    the token is the first whose cumulative probability exceeds u (float64 cumulative sums).
    """
    import torch

    logits = logits.float() / temperature
    order = None
    if top_p < 1.0:
        logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(logits, dim=-1)
        before = torch.cumsum(probs.double(), dim=-1) - probs.double()  # mass ranked above
        logits = logits.masked_fill(before >= top_p, float("-inf"))
    probs = torch.softmax(logits, dim=-1).double()
    cdf = torch.cumsum(probs, dim=-1)
    u = torch.tensor([r.random() for r in rngs], dtype=torch.float64, device=cdf.device)
    pick = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
    pick = pick.clamp_(max=cdf.shape[1] - 1)
    # Never pick a token of zero probability (possible only at the clamp); no host sync to ask.
    zero = probs.gather(1, pick) <= 0
    pick = torch.where(zero, probs.argmax(dim=-1, keepdim=True), pick)
    token = order.gather(1, pick) if order is not None else pick
    return token[:, 0].tolist()


class HFGenerator:
    """The scorer's transformers model, decoding rows in slots (see the module docstring)."""

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
        self._line_ids: set[int] | None = None  # tokens holding a line break (`stop_lines`)
        # Slots at most: lowered after an out-of-memory error, and kept lowered.
        self._cap = BatchSize(max_batch or 1 << 30)

    # -- batch size --------------------------------------------------------------------
    def _kv_bytes_per_token(self) -> int:
        import torch

        from cotcredit.lm.slots import kv_shape

        layers, kv_heads, head_dim = kv_shape(self.model.config)
        elem = torch.finfo(next(self.model.parameters()).dtype).bits // 8
        return 2 * layers * kv_heads * head_dim * elem

    def auto_batch_size(self, max_len: int) -> int:
        """Slots that fit in memory: KV cache + per-row logits/sampling buffers."""
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

    def line_break_ids(self) -> set[int]:
        """Ids of the tokens whose text holds a line break (decoded once, on first use)."""
        if self._line_ids is None:
            decode = self.tokenizer.decode
            self._line_ids = {i for i in range(len(self.tokenizer)) if "\n" in decode([i])}
        return self._line_ids

    # -- generation ----------------------------------------------------------------------
    def generate(self, prompts, options, keys=None, progress=None):
        """`options.n` completions per prompt, in prompt order (see `Generator.generate`).
        Rows run in slots, as many as `options.batch_size` or the automatic size; after an
        out-of-memory error the rows still decoding start again in half the slots, and the
        rows already finished are kept."""
        from cotcredit.lm.slots import SPARE_COLUMNS

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
        # Rows (prompt, sample), longest prompts first: a longer prompt's prefill serves the
        # prompts it starts with, and an out-of-memory error, if any, comes early.
        rows = [(i, j) for i in sorted(range(len(prompts)), key=lambda i: (-len(prompts[i]), i))
                for j in range(n_rows)]
        columns = len(prompts[rows[0][0]]) + options.max_new_tokens + SPARE_COLUMNS
        slots_wanted = options.batch_size or self.auto_batch_size(columns)
        done: dict[tuple[int, int], Completion] = {}  # kept across out-of-memory retries

        def slots(batch) -> int:
            return max(1, min(slots_wanted, self._cap.value, len(batch)))

        def decode(batch):
            todo = [r for r in batch if r not in done]
            if todo:
                self._decode_rows(prompts, keys, todo, slots(todo), options, done, progress)
                self.stats.batches += 1
                self.stats.batch_sizes.append(slots(todo))
            return [done[r] for r in batch]

        t0 = time.perf_counter()
        retries = self._cap.retries
        try:
            finished = run_batched(
                rows, decode, self._cap, take=lambda rest, size: len(rest), cost=slots,
                too_big=lambda batch, e: (
                    f"out of memory generating one completion of a {len(prompts[batch[0][0]])}"
                    f"-token prompt with --max-new-tokens {options.max_new_tokens}; lower it or "
                    "use a smaller model/dtype"),
            )
        finally:
            self.stats.oom_retries += self._cap.retries - retries
            self.stats.seconds += time.perf_counter() - t0
        results: list[list[Completion]] = [[] for _ in prompts]
        for (i, _), c in zip(rows, finished, strict=True):
            if greedy:  # n copies of the one greedy completion
                results[i] = [Completion(list(c.token_ids), c.text, c.finish_reason)
                              for _ in range(options.n)]
            else:
                results[i].append(c)
        self.stats.completions += sum(len(cs) for cs in results)
        self.stats.tokens += sum(len(c.token_ids) for cs in results for c in cs)
        return results

    def _prompt_kv(self, prompt: list[int], longest: list) -> KV | None:
        """Keys and values of `prompt` minus its last token (the first decoding step feeds
        that one). A prompt that starts the last prompt run (`longest`: [tokens, kv]) takes
        that prompt's first columns: Monte Carlo's states are prefixes of one another, so a
        trace's prompt runs once, not once per boundary."""
        import torch
        from transformers import DynamicCache

        from cotcredit.lm.head import cache_arg, decoder_of

        body = prompt[:-1]
        if not body:
            return None
        tokens, kv = longest
        if len(body) <= len(tokens) and tokens[: len(body)] == body:
            return [(k[:, : len(body)], v[:, : len(body)]) for k, v in kv]
        cache = DynamicCache()  # full-attention layers throughout: SlotCache's layout
        ids = torch.tensor([body], dtype=torch.long, device=self.device)
        decoder = decoder_of(self.model)
        decoder(input_ids=ids, **cache_arg(decoder, cache), use_cache=True)
        self.stats.prompt_tokens += len(body)
        longest[:] = [body, [(layer.keys[0], layer.values[0]) for layer in cache.layers]]
        return longest[1]

    def _decode_rows(self, prompts, keys, rows, slots: int, options, done, progress) -> None:
        """Decode `rows` in `slots` slots (`cotcredit.lm.slots`): a row takes a free slot as
        soon as one is free and leaves it the step it ends; finished rows go to `done`."""
        import torch

        from cotcredit.lm.head import cache_arg
        from cotcredit.lm.slots import SPARE_COLUMNS, SlotCache

        greedy = options.temperature == 0
        stops = set(self.stop_ids)
        line_ids = self.line_break_ids() if options.stop_lines else set()
        lines = [0] * slots  # line breaks each slot's row has written (`stop_lines`)
        pending = list(reversed(rows))  # popped from the end: rows in order
        uses: dict[int, int] = {}
        for i, _ in rows:
            uses[i] = uses.get(i, 0) + 1
        kv: dict[int, KV | None] = {}
        longest: list = [[], []]
        first = max(len(prompts[i]) for i, _ in rows) - 1
        batch = SlotCache(self.model.config, slots, first,
                          first + options.max_new_tokens + SPARE_COLUMNS,
                          next(self.model.parameters()).dtype, self.device)
        row: list[tuple[int, int] | None] = [None] * slots
        tokens: list[list[int]] = [[] for _ in range(slots)]
        rngs: list[random.Random | None] = [None] * slots
        # Each slot's next input token and its position, kept on the host and sent as one
        # tensor a step: per-slot writes into device tensors cost a kernel launch each.
        feed = [self.pad_id] * slots
        pos = [0] * slots
        with torch.no_grad():
            while True:
                for s in range(batch.slots):  # free slots take the next rows
                    if row[s] is not None or not pending:
                        continue
                    i, j = r = pending.pop()
                    if i not in kv:
                        kv[i] = self._prompt_kv(prompts[i], longest)
                    batch.join(s, kv[i])
                    self.stats.prompt_tokens += 1  # its last token, fed by the next step
                    uses[i] -= 1
                    if not uses[i]:
                        del kv[i]
                    row[s], tokens[s], lines[s] = r, [], 0
                    rngs[s] = None if greedy else random.Random(
                        row_seed(options.seed, keys[i], options.first_sample + j))
                    feed[s], pos[s] = prompts[i][-1], len(prompts[i]) - 1
                active = [s for s in range(batch.slots) if row[s] is not None]
                if not active:
                    return
                # Rebuild when the columns run out, or to drop idle slots once no row waits.
                idle = not pending and len(active) <= 3 * batch.slots // 4
                if batch.full() or idle:
                    keep = active if idle else list(range(batch.slots))
                    keep_from = min(batch.start[s] for s in active)
                    if pending:  # room before the frame for the longest prompt still to join
                        keep_from = min(keep_from, batch.hi - (len(prompts[pending[-1][0]]) - 1))
                    batch.compact(keep, keep_from)
                    row, tokens, rngs, feed, pos, lines = (
                        [x[s] for s in keep] for x in (row, tokens, rngs, feed, pos, lines))
                    active = [s for s in range(batch.slots) if row[s] is not None]
                cache, mask = batch.forward_inputs()
                step = torch.tensor([feed, pos], dtype=torch.long, device=self.device)
                out = self.model(input_ids=step[0, :, None], attention_mask=mask,
                                 position_ids=step[1, :, None], **cache_arg(self.model, cache),
                                 use_cache=True, logits_to_keep=1)
                batch.advance()
                logits = (out.logits[:, -1, :] if len(active) == batch.slots
                          else out.logits[active, -1, :])
                picked = (logits.argmax(-1).tolist() if greedy else inverse_cdf_tokens(
                    logits, [rngs[s] for s in active], options.temperature, options.top_p))
                ended = 0
                for s, tok in zip(active, picked, strict=True):
                    stop = tok in stops
                    if not stop:
                        tokens[s].append(tok)
                        lines[s] += tok in line_ids
                    ended_lines = bool(options.stop_lines) and lines[s] >= options.stop_lines
                    if stop or ended_lines or len(tokens[s]) >= options.max_new_tokens:
                        i, _ = row[s]
                        done[row[s]] = Completion(
                            tokens[s], decode_continuation(self.tokenizer, prompts[i], tokens[s]),
                            "stop" if stop else "lines" if ended_lines else "length")
                        row[s] = None
                        batch.leave(s)
                        feed[s], pos[s] = self.pad_id, 0
                        ended += 1
                    else:
                        feed[s] = tok
                        pos[s] += 1
                if ended and progress:
                    progress(ended * (options.n if greedy else 1))


def get_generator(scorer, backend: str = "hf", engine_args: dict | None = None) -> Generator:
    """A new generator of `backend` for the scorer's model (a method gets the run's, whose token
    counts are the run's: `TraceContext.generator`). `engine_args` go to `vllm.LLM` unchanged
    (tensor/data parallel, memory settings...)."""
    if backend not in BACKENDS:
        raise UserError(f"--backend must be one of {', '.join(BACKENDS)}, got '{backend}'")
    if backend == "hf":
        return HFGenerator(scorer.model, scorer.tokenizer)
    path = getattr(scorer.model.config, "_name_or_path", "") or ""
    if not path:
        raise UserError("--backend vllm needs a model loaded from a folder or hub id")
    return VLLMGenerator(path, scorer.tokenizer, scorer.dtype,
                         stop_token_ids(scorer.tokenizer, scorer.model), engine_args or {})
