"""The method registry: every module in this package that defines `SPEC` is a method.

Adding a method means adding one file here with a `run(ctx, options)` function and a `SPEC`.
"""

from __future__ import annotations

import importlib
import pkgutil

from cotcredit.errors import UserError
from cotcredit.methods.base import MethodRows, MethodSpec, TraceContext

__all__ = [
    "MethodRows",
    "MethodSpec",
    "TraceContext",
    "get_method",
    "label_to_method",
    "method_order",
    "registry",
]

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
        _REGISTRY = dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))
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
        if label == name or label in spec.all_labels:
            return name
        if label.startswith(name + "-"):
            return name
    return None


def method_order(labels) -> list[str]:
    """Distinct row labels (method names or labels such as gradient-ig) in display order: the
    registry's order of their methods, a method's labels in its own order, then unknown labels
    alphabetically."""
    distinct = list(dict.fromkeys(str(x) for x in labels))
    rank: dict[str, tuple[int, int]] = {}
    for pos, (name, spec) in enumerate(registry().items()):
        for sub, lab in enumerate((name, *spec.all_labels)):
            rank.setdefault(lab, (pos, sub))
    known = sorted((x for x in distinct if x in rank), key=lambda x: rank[x])
    return known + sorted(x for x in distinct if x not in rank)
