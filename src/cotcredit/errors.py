"""Errors a user can cause: reported as one line and a nonzero exit, never a traceback."""


class UserError(Exception):
    """A mistake in input, options or files that the user can fix; the message says how."""
