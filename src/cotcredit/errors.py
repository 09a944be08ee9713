"""Errors a user can cause: reported as one line and a nonzero exit, never a traceback."""


class UserError(Exception):
    """A mistake in input, options or files that the user can fix; the message says how."""


def is_oom(e: BaseException) -> bool:
    """An accelerator (CUDA, MPS, ...) or host out-of-memory error."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(e, oom):
        return True
    return isinstance(e, MemoryError) or (
        isinstance(e, RuntimeError) and "out of memory" in str(e).lower()
    )
