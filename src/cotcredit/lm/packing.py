"""Many continuations of one trace's prefixes scored in one forward pass on its KV cache.

An additive 4-D mask lets block j see the cached trace up to its prefix length p_j and itself
causally, at positions p_j, p_j+1, ... A block whose first token is scored re-feeds the token
at p_j - 1, so the trace's own logits are never needed again. Blocks of one prefix that share
leading tokens form a trie scored once. Sliding-window layers get their own mask; attention
without arbitrary masks is switched to sdpa for the pass; out-of-memory halves the pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cotcredit.errors import first_line
from cotcredit.lm.backoff import BatchSize, run_batched
from cotcredit.lm.head import OutputHead, cache_arg
from cotcredit.lm.passes import Continuation, ContinuationScore, TracePass, continuation_scores

FULL, SLIDING = "full_attention", "sliding_attention"
# Attention implementations that take an arbitrary additive 4-D mask (packed probes need one).
MASKABLE_ATTENTION = ("eager", "sdpa")


@dataclass(frozen=True)
class AttentionLayout:
    """Which attention each decoder layer uses. `window`: keys at most window - 1 positions
    back; `per_type`: the model takes a {type: mask} mapping (hybrid models); `unsupported`: a
    layer type packed passes cannot reproduce (probes then run one by one)."""

    types: tuple[str, ...]
    window: int | None
    per_type: bool
    unsupported: str | None = None

    @classmethod
    def of(cls, config) -> AttentionLayout:
        """The layout of a model config (its text config for multimodal models)."""
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


@dataclass
class PackedModel:
    """What a packed pass needs of the model (decoder stack, float32 head, layer layout, mask
    dtype and device, padding id, a once-per-run note); `tokens` counts query tokens run."""

    decoder: Callable[..., Any]
    head: OutputHead
    model: Any
    layout: AttentionLayout
    dtype: torch.dtype
    device: torch.device
    pad_id: int
    note: Callable[[str], None]
    tokens: int = 0


MIN_QUERY_BUDGET = 64  # query tokens per packed pass below which out-of-memory is an error



@torch.no_grad()
def score_continuations(
    packed: PackedModel, base: TracePass, conts: Sequence[Continuation], budget: BatchSize
) -> list[ContinuationScore]:
    """log p(continuation | base.ids[:prefix_len]) for many continuations: one forward on
    `base.cache` per group of at most `budget` query tokens. Out-of-memory halves the budget
    (kept for later calls) down to `MIN_QUERY_BUDGET`."""
    if base.cache is None:
        raise ValueError("score_continuations needs a TracePass with keep_cache=True")
    L = len(base.ids)
    for c in conts:
        if not 1 <= c.prefix_len <= L:
            raise ValueError(f"prefix_len {c.prefix_len} outside 1..{L}")
    # Sorted so continuations of one prefix that share leading tokens are neighbours: each
    # packed pass holds them as a token trie and scores shared tokens once (attribution's
    # coalitions share long stretches of kept reasoning).
    order = sorted(range(len(conts)), key=lambda i: (conts[i].prefix_len, conts[i].ids))
    scores = run_batched(
        order,
        lambda group: score_group(packed, base, conts, group),
        budget,
        take=lambda rest, size: len(next(groups(conts, rest, size))),
        cost=lambda group: budget.value,  # halve the budget itself, not the group's share
        on_oom=lambda e: restore_cache(base.cache, L),
        too_big=lambda group, e: (
            f"out of memory scoring probes even with {budget.value} query tokens per pass "
            f"({first_line(e)}); use a shorter trace, --dtype bfloat16 or a larger GPU"),
    )
    results: list[ContinuationScore | None] = [None] * len(conts)
    for i, r in zip(order, scores, strict=True):
        results[i] = r
    return results  # type: ignore[return-value]


def groups(conts: Sequence[Continuation], indices, budget: int) -> Iterator[list[int]]:
    """Continuation indices in groups of at most `budget` query tokens (tokens shared with the
    previous continuation of the same prefix cost nothing: the trie)."""
    cur, cur_len, prev = [], 0, None
    for i in indices:
        c = conts[i]
        size = len(c.ids) + 1
        if cur and prev.prefix_len == c.prefix_len:
            size -= common_prefix(prev.ids, c.ids) + 1
        if cur and cur_len + size > budget:
            yield cur
            cur, cur_len, size = [], 0, len(c.ids) + 1
        cur.append(i)
        cur_len += size
        prev = c
    if cur:
        yield cur


def pack(conts: Sequence[Continuation], indices, budget: int) -> list[list[int]]:
    """Every group of `groups`."""
    return list(groups(conts, indices, budget))


def packed_mask(
    L: int, positions: list[int], parents: list[int], layout: AttentionLayout,
    dtype: torch.dtype, device: torch.device,
):
    """Additive attention mask(s) of Q trie nodes on L cached tokens: a node sees the trace
    before its root's position, its ancestors and itself (sliding layers: within `window`, by
    position). One (1, 1, Q, L + Q) tensor, or {layer type: tensor} for hybrid models."""
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
    dev = device
    qpos = torch.tensor(positions, device=dev)
    seen_trace = torch.arange(L, device=dev)[None, :] < torch.from_numpy(root).to(dev)[:, None]
    visible = torch.cat([seen_trace, torch.from_numpy(anc).to(dev)], dim=1)
    blocked = torch.finfo(dtype).min
    masks = {}
    for kind in layout.types:
        v = visible
        if kind == SLIDING:
            kpos = torch.cat([torch.arange(L, device=dev), qpos])
            v = v & (qpos[:, None] - kpos[None, :] < layout.window)
        zero = torch.zeros((), dtype=dtype, device=dev)
        masks[kind] = torch.where(v, zero, torch.tensor(blocked, dtype=dtype, device=dev))[
            None, None
        ]
    return masks if layout.per_type else masks[layout.types[0]]


@contextlib.contextmanager
def maskable_attention(model, note: Callable[[str], None]):
    """Run with an attention implementation that takes an arbitrary 4-D mask: flash
    attention and others are switched to sdpa for the pass (said once per run)."""
    cfg = model.config
    impl = getattr(cfg, "_attn_implementation", None)
    if impl is None or impl in MASKABLE_ATTENTION:
        yield
        return
    note(f"packed probes run with sdpa attention (the model uses {impl}, which takes no "
         "arbitrary attention mask)")
    # The attention layers read the shared config at every call: switch it for this pass.
    cfg._attn_implementation = "sdpa"
    try:
        yield
    finally:
        cfg._attn_implementation = impl


def probe_trie(
    ids: Sequence[int], conts: Sequence[Continuation], group: Sequence[int]
) -> tuple[list[int], list[int], list[int], list[list[int]]]:
    """The token trie of one packed pass over the continuations `group` of trace `ids`:
    (tokens, positions, parents, paths), `paths[i][j]` the node whose hidden state predicts
    `ids[j]` of the i-th continuation. The token at prefix_len - 1 is re-fed as the root only
    when some block scores its first token."""
    refeed = {conts[i].prefix_len for i in group if conts[i].target_start == 0}
    tokens: list[int] = []
    positions: list[int] = []
    parents: list[int] = []
    paths: list[list[int]] = []

    def add(token: int, position: int, parent: int) -> int:
        tokens.append(token)
        positions.append(position)
        parents.append(parent)
        return len(tokens) - 1

    prev: Continuation | None = None
    for i in group:
        c = conts[i]
        if prev is not None and prev.prefix_len == c.prefix_len:
            share = common_prefix(prev.ids, c.ids)
            path = paths[-1][: share + 1]
        else:
            share = 0
            root = -1  # no node: the first block token hangs off the cached trace
            if c.prefix_len in refeed:
                root = add(ids[c.prefix_len - 1], c.prefix_len - 1, -1)
            path = [root]
        for j in range(share, len(c.ids)):
            path.append(add(c.ids[j], c.prefix_len + j, path[-1]))
        paths.append(path)
        prev = c
    return tokens, positions, parents, paths


def score_group(
    packed: PackedModel, base: TracePass, conts: Sequence[Continuation], group: Sequence[int]
) -> list[ContinuationScore]:
    """One packed pass over the continuations of `group` on top of `base.cache` (`probe_trie`)."""
    L = len(base.ids)
    tokens, positions, parents, paths = probe_trie(base.ids, conts, group)
    mask = packed_mask(L, positions, parents, packed.layout, packed.dtype, packed.device)
    with maskable_attention(packed.model, packed.note):
        out = packed.decoder(
            input_ids=torch.tensor([tokens], device=packed.device),
            position_ids=torch.tensor([positions], device=packed.device),
            attention_mask=mask,
            **cache_arg(packed.decoder, base.cache),
            use_cache=True,
        )
    base.cache.crop(-len(tokens))  # remove the probe tokens again
    packed.tokens += len(tokens)
    return continuation_scores(packed.head, out.last_hidden_state[0], paths,
                               [conts[i] for i in group])


@torch.no_grad()
def score_continuation_batch(
    packed: PackedModel,
    budget: int,
    cache,
    rows_ids: Sequence[Sequence[int]],
    rows_conts: Sequence[Sequence[Continuation]],
) -> list[list[ContinuationScore]]:
    """`score_continuations` for the B traces of one right-padded batch (`cache`: from
    `Scorer.forward_batch`): pass j packs group j of every row into one (B, Q) query batch.
    Out-of-memory is raised (the caller splits the batch). `budget`: query tokens per row."""
    if len(rows_ids) != len(rows_conts):
        raise ValueError(f"{len(rows_ids)} traces but {len(rows_conts)} lists of continuations")
    W = max((len(ids) for ids in rows_ids), default=0)
    for r, (ids, conts) in enumerate(zip(rows_ids, rows_conts)):
        for c in conts:
            if not 1 <= c.prefix_len <= len(ids):
                raise ValueError(f"row {r}: prefix_len {c.prefix_len} outside 1..{len(ids)}")
    groups = []
    for conts in rows_conts:
        order = sorted(range(len(conts)), key=lambda i: (conts[i].prefix_len, conts[i].ids))
        groups.append(pack(conts, order, budget) if conts else [])
    results: list[list[ContinuationScore | None]] = [[None] * len(c) for c in rows_conts]
    pad, dev, layout = packed.pad_id, packed.device, packed.layout
    for j in range(max((len(g) for g in groups), default=0)):
        tries = [
            probe_trie(ids, conts, g[j]) if j < len(g) else ([], [], [], [])
            for ids, conts, g in zip(rows_ids, rows_conts, groups)
        ]
        Q = max(len(t[0]) for t in tries)
        tokens, positions, masks = [], [], []
        for t, p, par, _ in tries:
            extra = Q - len(t)
            # A padding query is its own root at position 0: it sees no trace key, only itself.
            tokens.append(t + [pad] * extra)
            positions.append(p + [0] * extra)
            masks.append(packed_mask(W, positions[-1], par + [-1] * extra, layout,
                                     packed.dtype, dev))
        if layout.per_type:
            mask = {k: torch.cat([m[k] for m in masks]) for k in layout.types}
        else:
            mask = torch.cat(masks)
        try:
            with maskable_attention(packed.model, packed.note):
                out = packed.decoder(
                    input_ids=torch.tensor(tokens, device=dev),
                    position_ids=torch.tensor(positions, device=dev),
                    attention_mask=mask,
                    **cache_arg(packed.decoder, cache),
                    use_cache=True,
                )
        finally:
            restore_cache(cache, W)  # remove the probe tokens again (also after a failure)
        packed.tokens += sum(len(t[0]) for t in tries)
        for r, (t, g) in enumerate(zip(tries, groups)):
            if j >= len(g):
                continue
            conts = rows_conts[r]
            scores = continuation_scores(packed.head, out.last_hidden_state[r], t[3],
                                         [conts[i] for i in g[j]])
            for i, s in zip(g[j], scores):
                results[r][i] = s
    return results  # type: ignore[return-value]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common leading run of two token lists."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n



def restore_cache(cache, length: int) -> None:
    """Cut every cache layer back to `length` tokens (a failed pass may have grown only some)."""
    for layer in getattr(cache, "layers", []):
        n = layer.get_seq_length() if getattr(layer, "is_initialized", True) else 0
        if n > length:
            layer.crop(-(n - length))
