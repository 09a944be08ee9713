"""One run, one process: the lock file that lets several workers share a plan (`run_plan`)."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def claim(run: Path) -> bool:
    """Take `run` for this process: a lock file beside it, made atomically with this process's
    id in it. False while a live process (on this machine) holds it; a dead holder's lock is
    taken over (its run resumes from its last checkpoint)."""
    lock = run.parent / f"{run.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    # the temporary name is unique per thread too: threads of one process share its id
    mine = lock.parent / f"{run.name}.lock.{os.getpid()}.{threading.get_ident()}"
    mine.write_text(str(os.getpid()))
    try:
        while True:
            try:
                os.link(mine, lock)  # atomic: fails when the lock exists
                return True
            except FileExistsError:
                try:
                    holder = int(lock.read_text())
                except (OSError, ValueError):
                    continue  # removed or replaced meanwhile: try again
                try:
                    os.kill(holder, 0)
                    return False
                except ProcessLookupError:
                    lock.unlink(missing_ok=True)
                except PermissionError:
                    return False
    finally:
        mine.unlink(missing_ok=True)


def release(run: Path) -> None:
    """Give up `run`'s lock if this process holds it."""
    lock = run.parent / f"{run.name}.lock"
    try:
        if int(lock.read_text()) == os.getpid():
            lock.unlink()
    except (OSError, ValueError):
        pass
