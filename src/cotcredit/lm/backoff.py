"""The one out-of-memory back-off: run a batched function, and on out-of-memory halve the batch
and retry, down to the smallest batch.

Every batched forward pass or generation goes through `run_batched`: sampling rows
(`sampling.HFGenerator`), perturbed sequences (`Scorer.score_sequences`), packed probes (a
budget of query tokens, `packing`), completions scored together (`training.online`). A batch
is `items[i : i + n]`, n given by `take(remaining, size)` (default: `size` items). When `fn`
runs out of memory (`errors.is_oom`, the only test of it), the accelerator's cache is emptied,
`on_oom` runs (e.g. to cut a KV cache back), the size halves (rounding up: 3 -> 2 -> 1) and
the same items are retried; the smaller size is kept for the batches after it. At the smallest
size `alone(items)` runs them one way that needs no batch (if given), else the error becomes
one `UserError` line (`too_big`). Results come back in item order.
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
    """`fn` over batches of `items`, halving `size` on out-of-memory (see the module docstring).

    `fn(batch)` returns one result per item of the batch. `take(remaining, size)` is how many
    of the remaining items the next batch holds (default: `size`); `cost(batch)` is the batch's
    size in `size`'s unit (default: its length; a token budget counts tokens). When a batch at
    the smallest size still runs out of memory: `alone(batch)` gives its results if given, else
    `too_big(batch, error)` is the message of a `UserError`, else the error propagates. Errors
    other than out-of-memory propagate unchanged.
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
