"""The processes of a run started by `torchrun` or `accelerate launch` (one per device).

Traces are split by a hash of their id, each process writes its own parts, and the main process
compacts them and reports once. Without a launcher everything here is a no-op.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cotcredit.extras import require

# Processes wait for the slowest one at the end of a run; with thousands of traces per process
# that can be far longer than torch's default 10-minute collective timeout.
WAIT_LIMIT = timedelta(hours=24)
_GATHERS = itertools.count()


def launched() -> bool:
    """True when a launcher started several processes (torchrun, accelerate launch)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


@dataclass
class Processes:
    """This process's place in the run: index, count, and the collective operations."""

    index: int = 0
    count: int = 1
    state: Any = None  # accelerate.PartialState when launched

    @property
    def main(self) -> bool:
        """Whether this is the main process (rank 0), which writes and reports for the run."""
        return self.index == 0

    def takes(self, trace_id: str) -> bool:
        """Whether this process scores `trace_id`: by a hash of the id alone, so a relaunch
        with another number of processes still gives every trace to exactly one process. Bits
        other than `--shard`'s, so the two splits are independent."""
        if self.count == 1:
            return True
        h = int(hashlib.sha1(trace_id.encode()).hexdigest()[8:16], 16)
        return h % self.count == self.index

    def wait(self) -> None:
        """Barrier: return when every process got here."""
        if self.count > 1:
            self.state.wait_for_everyone()

    def gather(self, obj: Any) -> list[Any]:
        """`obj` of every process, in process order (on every process): `gather_objects`."""
        return [obj] if self.count == 1 else gather_objects(obj, self.index, self.count)


def gather_objects(obj: Any, index: int, count: int) -> list[Any]:
    """`obj` of each of the `count` processes, in process order, on every process (each must
    call this in the same order).

    Through the group's key-value store, not `gather_object`: gloo's worker thread may drop the
    last tensor reference during interpreter shutdown and abort the process (about one launch in
    fifteen on a loaded machine)."""
    import pickle

    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    key = f"cotcredit/gather/{next(_GATHERS)}/"
    store.set(key + str(index), pickle.dumps(obj))
    return [pickle.loads(store.get(key + str(i))) for i in range(count)]


def processes() -> Processes:
    """The processes of this run (one, unless launched)."""
    if not launched():
        return Processes()
    require("an analysis on several processes (torchrun, accelerate launch)", "train",
            ["accelerate"])
    from accelerate import PartialState

    state = PartialState(cpu=_cpu_only(), timeout=WAIT_LIMIT)
    atexit.register(_close_group)
    return Processes(state.process_index, state.num_processes, state)


def _close_group() -> None:
    """Tear the process group down before the interpreter does. (Its threads outlive this when
    another module still holds the group, e.g. `torch.distributed.nn`'s default arguments once
    transformers imports it; `gather_objects` is what keeps their exit safe.)"""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _cpu_only() -> bool:
    """No GPU-like device (or `accelerate launch --cpu`): PartialState must be told, else it
    sets up no process group at all on a CPU machine."""
    import torch

    if os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
        return True
    xpu = getattr(torch, "xpu", None)
    return not (torch.cuda.is_available() or (xpu is not None and xpu.is_available()))


def device() -> Any:
    """This process's device under a launcher (cuda:<local rank>, or cpu)."""
    return processes().state.device
