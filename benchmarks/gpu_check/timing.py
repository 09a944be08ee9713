"""Time boxes (a part's deadline, enforced by a watchdog), timing and accelerator memory."""

from __future__ import annotations

import contextlib
import gc
import signal
import statistics
import threading
import time
from collections.abc import Callable

import torch

GIB = 1 << 30
GRACE_S = 5.0  # a part still running this long after its deadline is interrupted


class PartTimeout(BaseException):
    """A part ran past its deadline (BaseException: no `except Exception` may swallow it)."""


class Deadline:
    """A part's deadline: `check()` between measurements, and a watchdog thread that interrupts
    the main thread `grace` seconds after it (a single long call cannot hold the run)."""

    def __init__(self, seconds: float, grace: float | None = None):
        self.end = time.monotonic() + seconds
        self.grace = GRACE_S if grace is None else grace
        self.fired = False
        self._done = threading.Event()

    def left(self) -> float:
        return self.end - time.monotonic()

    def check(self) -> None:
        if self.left() <= 0:
            raise PartTimeout()

    def __enter__(self) -> Deadline:
        # interrupt_main does nothing while SIGINT is ignored, as it is for a job started in
        # the background (`nohup ... &`): give the main thread Python's handler meanwhile.
        self._saved = None
        if threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGINT)
            if current in (signal.SIG_IGN, signal.SIG_DFL, None):
                self._saved = current
                signal.signal(signal.SIGINT, signal.default_int_handler)

        def watch():
            if not self._done.wait(max(0.0, self.left() + self.grace)):
                self.fired = True
                import _thread

                _thread.interrupt_main()  # KeyboardInterrupt in the main thread

        threading.Thread(target=watch, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if self._saved is not None:
            signal.signal(signal.SIGINT, self._saved)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def measure(device: torch.device, out: dict):
    """Wall seconds of the `with` block and the most accelerator memory allocated during it above
    what was allocated when it started (`extra_gib`; None on CPU)."""
    base = 0
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    yield
    sync(device)
    out["seconds"] = time.perf_counter() - t0
    out["extra_gib"] = (
        (torch.cuda.max_memory_allocated(device) - base) / GIB if device.type == "cuda" else None
    )


def timed(fn: Callable[[], object], device: torch.device, deadline: Deadline,
          repeats: int = 3, quick: float = 1.0) -> dict:
    """Median seconds of up to `repeats` runs (one when a run takes over `quick` seconds or the
    deadline is near) and the largest peak memory; call it after a warm-up."""
    runs: list[dict] = []
    while len(runs) < repeats:
        deadline.check()
        m: dict = {}
        with measure(device, m):
            fn()
        runs.append(m)
        if m["seconds"] > quick or deadline.left() < 3 * m["seconds"]:
            break
    extras = [r["extra_gib"] for r in runs if r["extra_gib"] is not None]
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "extra_gib": max(extras) if extras else None,
        "runs": len(runs),
    }


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def gib_of(model) -> float:
    return sum(p.numel() * p.element_size() for p in model.parameters()) / GIB


def peak(weights: float, m: dict) -> float | None:
    return None if m.get("extra_gib") is None else weights + m["extra_gib"]
