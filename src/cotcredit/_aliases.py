"""Import paths of the flat layout before 0.3 (``cotcredit.traces``, ...), and of the modules
merged since into the one that holds their names (``cotcredit.data.fields``), kept until 0.4.

`AliasFinder` imports the new module under the old name too (the same module object, so
monkeypatching is shared) with one ``DeprecationWarning`` naming the new path. A split module
maps to its layer's package, whose index holds every public name it had. A real module at an
old path is always found first.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import warnings

#: The release that removes these aliases.
REMOVED_IN = "0.4"

#: Old module path -> the module (or layer package) that holds its names now.
ALIASES: dict[str, str] = {
    # data: reading input
    "cotcredit.traces": "cotcredit.data",  # split: fields, trace, records, traces
    "cotcredit.readers": "cotcredit.data.readers",
    "cotcredit.grading": "cotcredit.data.grading",
    "cotcredit.outcome": "cotcredit.data.trace",
    "cotcredit.data.fields": "cotcredit.data.trace",
    "cotcredit.data.outcome": "cotcredit.data.trace",
    "cotcredit.data.records": "cotcredit.data.traces",
    # reading problems moved on to cotcredit.data.problems
    "cotcredit.problems": "cotcredit.pipeline.generate",
    # store: tables on disk
    "cotcredit.io": "cotcredit.store.io",
    "cotcredit.tables": "cotcredit.store",  # split: parts, tables
    "cotcredit.store.schema": "cotcredit.store.tables",
    "cotcredit.shards": "cotcredit.store.shards",
    # lm: the model and everything that runs it
    "cotcredit.encoding": "cotcredit.lm.encoding",
    "cotcredit.forcing": "cotcredit.lm.encoding",
    "cotcredit.lm.forcing": "cotcredit.lm.encoding",
    "cotcredit.sampling": "cotcredit.lm",  # split: generation, sampling, vllm_sampling
    # methods: the contract, the run's cache and the registry are the package's index;
    # RREDCoT is a package (the method and its estimate, then its probes and known paths)
    "cotcredit.run_cache": "cotcredit.methods",
    "cotcredit.methods.base": "cotcredit.methods",
    "cotcredit.methods.rredcot_paths": "cotcredit.methods.rredcot.probes",
    "cotcredit.methods.rredcot.paths": "cotcredit.methods.rredcot.probes",
    "cotcredit.methods.rredcot.rewards": "cotcredit.methods.rredcot",
    # pipeline: the one analysis path and the API of the commands
    "cotcredit.api": "cotcredit.pipeline.api",
    "cotcredit.pipeline.inputs": "cotcredit.pipeline.run",
    "cotcredit.exports": "cotcredit.pipeline.export",
    "cotcredit.report.scores": "cotcredit.pipeline.scores",
    # report
    "cotcredit.comparison": "cotcredit.report.compare",
    # training
    "cotcredit.online": "cotcredit.training.online",
    "cotcredit.integrations": "cotcredit.training",  # cotcredit.integrations.verl: training.verl
    # cli
    "cotcredit.cli_params": "cotcredit.options",
    "cotcredit.cli.params": "cotcredit.options",
    "cotcredit.cli.methods": "cotcredit.cli.commands",
    "cotcredit.cli.output": "cotcredit.cli.commands",
    # bench: the model organism (task, checker, model, train) of the benchmark's regimes
    "cotcredit.organism": "cotcredit.bench.organism",
}


def new_name(old: str) -> str | None:
    """The module an old path stands for now (None: not an old path), a submodule of an
    aliased package included (``cotcredit.integrations.verl`` -> ``cotcredit.training.verl``)."""
    if old in ALIASES:
        return ALIASES[old]
    head, dot, _ = old.rpartition(".")
    while dot:
        if head in ALIASES:
            return ALIASES[head] + old[len(head) :]
        head, dot, _ = head.rpartition(".")
    return None


def _caller_stacklevel() -> int:
    """The `stacklevel` that makes the warning name the line that imported the old path.

    Called from `exec_module` (level 1). `warnings.warn` does not count the import system's
    own frames (importlib._bootstrap); the others are counted up to the first one outside
    importlib (`import_module`) and this module."""
    here = os.path.dirname(importlib.__file__)
    frame, level = sys._getframe(2), 1
    while frame is not None:
        name = frame.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):
            level += 1
            if name != __file__ and os.path.dirname(name) != here:
                return level
        frame = frame.f_back
    return level


class _AliasLoader(importlib.abc.Loader):
    """Loads an old path as the module it moved to (the same object)."""

    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return None  # a placeholder: `exec_module` replaces it in sys.modules

    def exec_module(self, module) -> None:
        old = module.__name__
        real = importlib.import_module(self.new)
        # The import system returns what sys.modules holds under the old name once this
        # returns: the real module, its attributes (__name__, __spec__) untouched.
        sys.modules[old] = real
        warnings.warn(
            f"{old} is deprecated and goes in cotcredit {REMOVED_IN}: import {self.new}",
            DeprecationWarning,
            stacklevel=_caller_stacklevel(),
        )


class AliasFinder(importlib.abc.MetaPathFinder):
    """Finds the old import paths of `ALIASES` (see the module docstring)."""

    def find_spec(self, fullname, path=None, target=None):
        """A spec loading the new module under the old name `fullname`; None when it is no old path
        (or a real module is still there)."""
        if not fullname.startswith("cotcredit."):
            return None
        parent, _, child = fullname.rpartition(".")
        moved = sys.modules.get(parent)
        if moved is not None and moved.__name__ != parent:
            # A submodule of a package imported under its old path: the new package's own.
            new = f"{moved.__name__}.{child}"
        elif fullname in ALIASES:
            if path is None and moved is not None:
                path = getattr(moved, "__path__", None)
            if path is not None and importlib.machinery.PathFinder.find_spec(fullname, path):
                return None  # a real module is still there (not moved yet): it wins
            new = ALIASES[fullname]
        else:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Put the finder first in ``sys.meta_path``, once (``import cotcredit`` does): it must see
    a submodule of an aliased package before the path finder would load a second copy of it
    from the new package's folder."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
