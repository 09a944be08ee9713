"""Claims: one process at a time on a piece of work that several processes share (a bench
method's table, a split's segmentation), so processes pointed at one output folder divide the
work instead of repeating it.

A claim is an operating-system file lock (``filelock``): the system releases it when its holder
exits, killed included, so a dead process never blocks the others and leaves nothing to clean.
Lock files lie in a hidden ``.claims`` folder beside the work, which table globs skip.

Under a launcher (``torchrun``, ``accelerate launch``) no claim is taken: the process group
divides each piece of work trace by trace, every process must enter it together, and a process
waiting on a claim another holds inside a collective would never get it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

CLAIMS = ".claims"
POLL_SECONDS = 1.0  # how often a waiting process looks again


def claim_path(folder: str | Path, name: str) -> Path:
    """The lock file of the work ``name`` in ``folder`` (its ``.claims`` subfolder made)."""
    where = Path(folder) / CLAIMS
    where.mkdir(parents=True, exist_ok=True)
    return where / f"{name}.lock"


@contextlib.contextmanager
def claim(folder: str | Path, name: str, wait: bool = True) -> Iterator[bool]:
    """Hold the work ``name`` in ``folder`` for the block; yields whether this process holds it.

    ``wait``: block until the holder lets go (then yields True); otherwise yield False at once
    when another process holds it, and the caller leaves that work to it.
    """
    from filelock import FileLock, Timeout

    from cotcredit.distributed import launched

    if launched():
        yield True
        return
    lock = FileLock(str(claim_path(folder, name)), thread_local=False)
    try:
        lock.acquire(timeout=-1 if wait else 0, poll_interval=POLL_SECONDS)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
