"""Errors a user can cause: reported as one line and a nonzero exit, never a traceback."""


class UserError(Exception):
    """A mistake in input, options or files that the user can fix; the message says how."""


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of an error's message (its type's name when it has none), cut at `limit`
    characters: what a one-line UserError quotes of the error behind it."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:limit]


def is_oom(e: BaseException) -> bool:
    """An accelerator (CUDA, MPS, ...) or host out-of-memory error."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(e, oom):
        return True
    return isinstance(e, MemoryError) or (
        isinstance(e, RuntimeError) and "out of memory" in str(e).lower()
    )
