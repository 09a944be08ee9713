"""The one out-of-memory back-off, which every batched forward pass and generation goes through:
on out-of-memory halve the batch (3 -> 2 -> 1) and retry the same items, keeping the smaller
size for later batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cotcredit.errors import UserError, is_oom

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class BatchSize:
    """A batch size that halves on out-of-memory and stays halved (`minimum` at least);
    `retries` counts the halvings."""

    value: int
    minimum: int = 1
    retries: int = 0

    def halve(self, used: int) -> None:
        """Halve after a batch of size `used` ran out of memory (rounding up)."""
        self.value = max(self.minimum, (min(self.value, used) + 1) // 2)
        self.retries += 1


def free_accelerator_memory() -> None:
    """Return cached blocks to the accelerator after an out-of-memory error."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_batched(
    items: Sequence[T],
    fn: Callable[[Sequence[T]], list[R]],
    size: BatchSize,
    *,
    too_big: Callable[[Sequence[T], BaseException], str] | None = None,
    take: Callable[[Sequence[T], int], int] | None = None,
    cost: Callable[[Sequence[T]], int] = len,
    on_oom: Callable[[BaseException], None] | None = None,
    alone: Callable[[Sequence[T]], list[R]] | None = None,
) -> list[R]:
    """`fn` over batches of `items` (one result per item, in order), halving `size` on
    out-of-memory. `take(remaining, size)`: items in the next batch; `cost(batch)`: its size in
    `size`'s unit; `on_oom` runs before a retry. Out of memory at the smallest size:
    `alone(batch)` if given, else a `UserError` with `too_big(batch, error)`, else the error.
    """
    out: list[R] = []
    pos = 0
    while pos < len(items):
        rest = items[pos:]
        n = max(1, min(len(rest), take(rest, size.value) if take else size.value))
        batch = rest[:n]
        try:
            got = fn(batch)
        except Exception as e:  # torch.OutOfMemoryError is a RuntimeError
            if not is_oom(e):
                raise
            free_accelerator_memory()
            if on_oom is not None:
                on_oom(e)
            used = cost(batch)
            if min(size.value, used) <= size.minimum:
                if alone is not None:
                    got = alone(batch)
                elif too_big is not None:
                    raise UserError(too_big(batch, e)) from None
                else:
                    raise
            else:
                size.halve(used)
                continue
        out.extend(got)
        pos += n
    return out
