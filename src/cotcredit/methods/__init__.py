"""The method registry: every module in this package that defines `SPEC` is a method, and so
is every `MethodSpec` a package outside cotcredit registers through the entry point group
``cotcredit.methods``.

Adding a method means adding one file with a `run(ctx, options)` function and a `SPEC` (see
`base.MethodSpec`): here, or in any installed package that declares it, e.g. in its
pyproject.toml::

    [project.entry-points."cotcredit.methods"]
    mymethod = "mypackage.mymethod:SPEC"

It then runs in `compare`, through `cotcredit.score`, and (with a `MethodCommand`) gets its own
command; nothing else changes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import warnings
from collections.abc import Sequence

from cotcredit.errors import UserError
from cotcredit.methods.base import MethodCommand, MethodRows, MethodSpec, TraceContext
from cotcredit.options import comma_list

#: The entry point group of methods defined outside cotcredit.
ENTRY_POINTS = "cotcredit.methods"

__all__ = [
    "ENTRY_POINTS",
    "MethodCommand",
    "MethodRows",
    "MethodSpec",
    "TraceContext",
    "get_method",
    "label_to_method",
    "method_commands",
    "method_order",
    "parse_methods",
    "plugin_specs",
    "registry",
    "shared_command",
]

_REGISTRY: dict[str, MethodSpec] | None = None


def plugin_specs() -> list[MethodSpec]:
    """The specs registered under the entry point group `ENTRY_POINTS` (an entry point names a
    `MethodSpec`, or a module holding one as `SPEC`). One that fails to load is left out with
    a warning naming it: a broken package must not break every command."""
    found = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        try:
            spec = ep.load()
        except Exception as e:  # noqa: BLE001  (any error of someone else's package)
            warnings.warn(f"method {ep.name} ({ep.value}) did not load: {e}", stacklevel=2)
            continue
        spec = getattr(spec, "SPEC", spec)
        if not isinstance(spec, MethodSpec):
            warnings.warn(f"method {ep.name} ({ep.value}) is not a MethodSpec", stacklevel=2)
            continue
        found.append(spec)
    return found


def registry() -> dict[str, MethodSpec]:
    """Name -> spec of every available method, in display order (discovered once): the
    modules of this package, then those of entry points (a name taken already is skipped,
    with a warning)."""
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
        for spec in plugin_specs():
            if spec.name in found:
                warnings.warn(f"method {spec.name} of an entry point is taken already; left "
                              "out", stacklevel=2)
                continue
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


def parse_methods(methods: str | Sequence[str], flag: str = "--methods") -> list[str]:
    """Method names from ``"a,b"`` or a list, blanks and repeats dropped; at least one (else a
    UserError naming `flag`)."""
    names = comma_list(methods)
    if not names:
        raise UserError(f"{flag}: name at least one method")
    return names


def method_commands() -> dict[str, tuple[MethodCommand, list[MethodSpec]]]:
    """Command name -> (its `MethodCommand`, the specs that name it), in registry order: what
    the command line, the Python API and the docs make one command, function and page of."""
    found: dict[str, tuple[MethodCommand, list[MethodSpec]]] = {}
    for spec in registry().values():
        if spec.command is not None:
            found.setdefault(spec.command.name, (spec.command, []))[1].append(spec)
    return found


def shared_command(name: str) -> bool:
    """Whether method `name`'s command is shared with other methods (chosen with --method)."""
    command = registry()[name].command
    return command is not None and sum(
        s.command is not None and s.command.name == command.name for s in registry().values()
    ) > 1


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
