"""The method registry: every module in this package that defines `SPEC` is a method.

Adding a method means adding one file here with a `run(ctx, options)` function and a `SPEC`.
"""

from __future__ import annotations

import importlib
import pkgutil

from cotcredit.errors import UserError
from cotcredit.methods.base import MethodRows, MethodSpec, TraceContext

__all__ = ["MethodRows", "MethodSpec", "TraceContext", "registry", "get_method", "label_to_method"]

_REGISTRY: dict[str, MethodSpec] | None = None


def registry() -> dict[str, MethodSpec]:
    """Name -> spec of every available method (discovered once)."""
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, MethodSpec] = {}
        for mod in pkgutil.iter_modules(__path__):
            if mod.name == "base":
                continue
            module = importlib.import_module(f"{__name__}.{mod.name}")
            spec = getattr(module, "SPEC", None)
            if isinstance(spec, MethodSpec):
                found[spec.name] = spec
        _REGISTRY = dict(sorted(found.items()))
    return _REGISTRY


def get_method(name: str) -> MethodSpec:
    """The spec registered under `name`, or a UserError listing the known names."""
    reg = registry()
    if name not in reg:
        owner = label_to_method(name)
        if owner:
            return reg[owner]
        raise UserError(f"unknown method '{name}' (known: {', '.join(reg)})")
    return reg[name]


def label_to_method(label: str) -> str | None:
    """The method that writes rows labelled `label` (e.g. gradient-ig -> gradient)."""
    for name, spec in registry().items():
        if label == name or label in spec.labels(spec.options_type()):
            return name
        if label.startswith(name + "-"):
            return name
    return None
