"""The one out-of-memory back-off (`cotcredit.lm.backoff`), with a fake out-of-memory error: the
batch halves and the same items are retried, results come back in order, the smaller size is
kept, and at the smallest size there is one clear line (or the single-item path)."""

from __future__ import annotations

import pytest

from cotcredit.errors import UserError
from cotcredit.lm.backoff import BatchSize, run_batched


class FakeMemory:
    """A batched function that runs out of memory above `capacity` items (an error text as
    torch gives it), and records every batch size it was called with."""

    def __init__(self, capacity: int, error=lambda: RuntimeError("CUDA out of memory. Tried to "
                                                                   "allocate 2.00 GiB")):
        self.capacity, self.error, self.sizes = capacity, error, []

    def __call__(self, batch):
        self.sizes.append(len(batch))
        if len(batch) > self.capacity:
            raise self.error()
        return [x * 10 for x in batch]


def test_halves_until_it_fits_keeps_the_size_and_the_order():
    fn = FakeMemory(capacity=2)
    size = BatchSize(8)
    items = list(range(11))
    got = run_batched(items, fn, size, too_big=lambda batch, e: "never")
    assert got == [x * 10 for x in items]
    assert fn.sizes[:3] == [8, 4, 2] and max(fn.sizes[3:]) <= 2
    assert size.value == 2 and size.retries == 2
    # A later call starts at the size that fit.
    fn.sizes.clear()
    run_batched(items, fn, size, too_big=lambda batch, e: "never")
    assert max(fn.sizes) == 2


def test_halving_rounds_up_and_follows_the_batch_that_failed():
    fn = FakeMemory(capacity=2)
    size = BatchSize(100)  # a cap far above the items: the batch itself is what halves
    run_batched(list(range(6)), fn, size, too_big=lambda batch, e: "never")
    assert fn.sizes[:3] == [6, 3, 2]


def test_at_the_smallest_size_one_clear_line():
    fn = FakeMemory(capacity=0, error=lambda: MemoryError())
    with pytest.raises(UserError, match="^out of memory on 1 item$") as exc:
        run_batched([1, 2, 3], fn, BatchSize(4),
                    too_big=lambda batch, e: f"out of memory on {len(batch)} item")
    assert "\n" not in str(exc.value) and fn.sizes == [3, 2, 1]


def test_at_the_smallest_size_the_single_item_path_runs():
    fn = FakeMemory(capacity=0)
    alone = []
    got = run_batched([1, 2, 3], fn, BatchSize(2), alone=lambda batch: alone.extend(batch) or
                      [x * 10 for x in batch])
    assert got == [10, 20, 30] and alone == [1, 2, 3]


def test_a_minimum_above_one_and_a_custom_batch():
    """A token budget (packed probes): batches made by `take`, halving the budget down to its
    minimum; below it, one line naming it."""
    budget = BatchSize(256, minimum=64)
    calls = []

    def fn(batch):
        calls.append(budget.value)
        raise RuntimeError("out of memory")

    with pytest.raises(UserError, match="64"):
        run_batched(list(range(5)), fn, budget, take=lambda rest, size: 1,
                    cost=lambda batch: budget.value,
                    too_big=lambda batch, e: f"even with {budget.value}")
    assert calls == [256, 128, 64] and budget.value == 64


def test_other_errors_are_not_retried():
    def broken(batch):
        raise RuntimeError("shape mismatch")

    size = BatchSize(8)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_batched([1, 2, 3], broken, size, too_big=lambda batch, e: "never")
    assert size.value == 8 and size.retries == 0
