"""Package indexes whose names load their module on first use.

A layer's package (``cotcredit.data``, ``cotcredit.lm``, ...) lists its public names and the
module that defines each; ``from cotcredit.lm import Scorer`` then imports ``cotcredit.lm.scorer``
when asked, not before, so importing a package (and ``cotcredit --help``) loads no torch,
pandas or pyarrow. A name loads once: later lookups, and monkeypatching, see a plain attribute.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_index(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for `package`: `where` maps a public name to its module
    (``"cotcredit.lm.scorer"``), or to ``"module:attribute"`` when the name differs there."""

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = where[name].partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
