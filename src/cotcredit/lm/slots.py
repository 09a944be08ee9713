"""Decoding in slots: a row leaves its slot the step it ends, and the next row takes the slot.

`SlotCache` keeps every layer's keys and values in one buffer ``[slots, kv heads, columns, head
dim]`` written in place (`DynamicCache` concatenates, copying the cache at every token). All
slots share one column frame, as left padding does; a joining row's prompt is written
right-aligned before column ``hi`` and its mask row hides what the slot held before, and each
row keeps its own position ids. When the spare columns run out, `compact` drops unused columns
and idle slots.

Written by hand: transformers `generate` keeps its batch until the longest row ends, and its
continuous batching samples from one shared generator, where each row here keeps its own stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

# Columns added beyond what the rows need when a buffer is (re)built: the frame advances one
# column per step, so a full-cache copy happens at most once per this many steps.
SPARE_COLUMNS = 64

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values [kv heads, tokens, dim]


class SlotLayer(DynamicLayer):
    """One layer's keys and values in a `SlotCache` buffer; `update` writes in place at column
    ``hi`` and returns the live columns ``lo..hi`` (views, no copy)."""

    def bind(self, keys: torch.Tensor, values: torch.Tensor, lo: int, hi: int) -> None:
        """Point the layer at its buffers; the live columns are ``lo..hi``."""
        self.kbuf, self.vbuf, self.lo, self.hi = keys, values, lo, hi
        self.device, self.dtype, self.is_initialized = keys.device, keys.dtype, True
        self.keys, self.values = keys[:, :, lo:hi], values[:, :, lo:hi]

    def update(self, key_states, value_states, *args, **kwargs):
        """Write the step's keys and values at ``hi`` (the model's cache call)."""
        end = self.hi + key_states.shape[-2]
        self.kbuf[:, :, self.hi:end] = key_states
        self.vbuf[:, :, self.hi:end] = value_states
        self.bind(self.kbuf, self.vbuf, self.lo, end)
        return self.keys, self.values


def kv_shape(config) -> tuple[int, int, int]:
    """(layers, kv heads, head dim) of a model config."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return cfg.num_hidden_layers, kv_heads, head_dim


class SlotCache:
    """The KV cache and attention mask of `slots` rows decoded together (module docstring).

    ``hi`` starts at `first`: a joining prompt of up to ``first + 1`` tokens fits before it.
    """

    def __init__(self, config, slots: int, first: int, columns: int, dtype: torch.dtype,
                 device: torch.device):
        self.n_layers, self.kv_heads, self.head_dim = kv_shape(config)
        self.dtype, self.device = dtype, device
        self.lo = self.hi = first
        self.start = [first] * slots  # first column of each slot's row
        self.occupied = [False] * slots
        self._alloc(slots, max(columns, first + 1))
        self.layers = [SlotLayer() for _ in range(self.n_layers)]
        self.cache = DynamicCache()
        self.cache.layers = self.layers
        self.cache.layer_class_to_replicate = None  # a layer the buffer lacks is an error

    def _alloc(self, slots: int, columns: int) -> None:
        # Zeros, not empty: masked columns still enter attention's sums (times 0), so they
        # must hold finite numbers.
        shape = (slots, self.kv_heads, columns, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device)
                     for _ in range(self.n_layers)]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device)
                       for _ in range(self.n_layers)]
        self.mask = torch.zeros((slots, columns), dtype=torch.bool, device=self.device)

    @property
    def slots(self) -> int:
        """Rows the buffer holds (occupied or idle)."""
        return self.mask.shape[0]

    @property
    def columns(self) -> int:
        """Columns of the buffer (the frame's width, spare columns included)."""
        return self.mask.shape[1]

    def join(self, slot: int, kv: KV | None) -> None:
        """Put a row's prompt (all but its last token, which the next step feeds) into `slot`."""
        n = 0 if kv is None else kv[0][0].shape[-2]
        begin = self.hi - n
        self.mask[slot].zero_()
        for layer, (k, v) in enumerate(kv or ()):
            self.keys[layer][slot, :, begin:self.hi] = k
            self.values[layer][slot, :, begin:self.hi] = v
        self.mask[slot, begin:self.hi] = True
        self.start[slot], self.occupied[slot] = begin, True

    def leave(self, slot: int) -> None:
        """Empty `slot` (its row ended)."""
        self.mask[slot].zero_()
        self.occupied[slot] = False

    def forward_inputs(self) -> tuple[DynamicCache, torch.Tensor]:
        """The cache and the 2-D attention mask of the next step (one token per slot). An idle
        slot attends to its own token only, so its (unused) output stays finite."""
        self.lo = min((b for b, o in zip(self.start, self.occupied) if o), default=self.hi)
        self.mask[:, self.hi] = True
        for layer, slot_layer in enumerate(self.layers):
            slot_layer.bind(self.keys[layer], self.values[layer], self.lo, self.hi)
        return self.cache, self.mask[:, self.lo:self.hi + 1]

    def advance(self) -> None:
        """After the step's forward pass: its column is written."""
        self.hi += 1

    def full(self) -> bool:
        """Whether the next step has no column left to write (time to `compact`)."""
        return self.hi >= self.columns

    def compact(self, keep: Sequence[int], keep_from: int) -> None:
        """Keep only the slots `keep` (in that order) and the columns from `keep_from` on
        (no occupied slot's row may start before it)."""
        width = self.hi - keep_from
        columns = max(self.columns, width + SPARE_COLUMNS)
        index = torch.tensor(list(keep), dtype=torch.long, device=self.device)
        old_k, old_v, old_mask = self.keys, self.values, self.mask
        self._alloc(len(keep), columns)
        for layer in range(self.n_layers):
            live = slice(keep_from, self.hi)
            self.keys[layer][:, :, :width] = old_k[layer][:, :, live].index_select(0, index)
            self.values[layer][:, :, :width] = old_v[layer][:, :, live].index_select(0, index)
        self.mask[:, :width] = old_mask[:, keep_from:self.hi].index_select(0, index)
        self.start = [self.start[s] - keep_from for s in keep]
        self.occupied = [self.occupied[s] for s in keep]
        self.hi = width
