"""Package indexes whose names load their module on first use, so importing a package (and
``cotcredit --help``) loads no torch or pandas. A loaded name becomes a plain attribute.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_index(
    package: str, where: Mapping[str, str], made: str | None = None,
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for `package`: `where` maps a public name to its module
    (``"cotcredit.lm.scorer"``), or to ``"module:attribute"`` when the name differs there.
    `made`: ``"module:function"`` giving {name: object} of names made at run time (the method
    commands' functions, from the registry), looked up after `where`."""

    def generated() -> Mapping[str, object]:
        if made is None:
            return {}
        module, _, function = made.partition(":")
        return getattr(importlib.import_module(module), function)()

    def submodule(name: str) -> bool:
        """Whether `name` is a module of the package (`from package import name` looks it up
        here before importing it: it must not load the made names)."""
        folders = getattr(sys.modules[package], "__path__", [])
        return any(os.path.exists(os.path.join(f, name + ".py"))
                   or os.path.isdir(os.path.join(f, name)) for f in folders)

    def __getattr__(name: str) -> object:
        if name not in where:
            made_here = not name.startswith("_") and not submodule(name)
            value = generated().get(name) if made_here else None
            if value is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            setattr(sys.modules[package], name, value)
            return value
        module, _, attr = where[name].partition(":")
        value = getattr(importlib.import_module(module), attr or name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        names: Iterable[str] = generated()
        return sorted({*vars(sys.modules[package]), *where, *names})

    return __getattr__, __dir__
