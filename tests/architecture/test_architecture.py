"""The package's shape, checked with `ast` over src/cotcredit: folders are layers, a module
imports only its own layer or lower ones, there is no import cycle, and no module is over 600
lines.

The layers, lowest first (a folder's package `__init__` is in its folder's layer):

    0 core        cotcredit/__init__, version, errors, extras, options (and the CLI's parameters),
                  distributed, _aliases, _lazy
    1 data        reading input, the Trace record, problem sets, grading
    2 store       tables on disk
    3 lm          loading, the scorer, packing, encoding and answer forcing, sampling
    4 segmentation
    5 methods     the method contract, the run's cache, the registry, one file per method
    6 pipeline    the input and run_analysis, the API of the commands, generate, export, scores
    7 report      statistics, figures, renderers, compare
    8 bench       known-truth regimes (and the model organism)
    9 training    credit in training: advantages, online scoring, the TRL trainer, verl
   10 cli         the command line (and __main__)

Every import counts, also one inside a function (a lazy import is still a dependency). An
import from a layer's package index (`from cotcredit.lm import Scorer`) counts as an import of
the module that defines the name. Imports under `if TYPE_CHECKING:` (annotations only, never
run) are exempt from the cycle rule, since they create no import at run time, but not from the
layer rule: a lower layer must not even name a higher one's types.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from conftest import ROOT

SRC = ROOT / "src"
PACKAGE = SRC / "cotcredit"
MAX_LINES = 600
MAX_PATH_FILES = 14  # files on the path of `cotcredit redistribute` (below)

LAYERS = {
    "data": 1, "store": 2, "lm": 3, "segmentation": 4, "methods": 5, "pipeline": 6,
    "report": 7, "bench": 8, "organism": 8, "training": 9, "cli": 10, "__main__": 10,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS.get(parts[1], 0) if len(parts) > 1 else 0


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(module: str) -> bool:
    return MODULES.get(module, Path()).name == "__init__.py"


def _index(package: str) -> dict[str, str]:
    """A package's lazy index: name -> defining module (`_WHERE`, or the top level's `_LAZY`)."""
    if not _is_package(package):
        return {}
    mod = importlib.import_module(package)
    where = getattr(mod, "_WHERE", None) or getattr(mod, "_LAZY", None) or {}
    return {name: value.partition(":")[0] for name, value in where.items()
            if isinstance(value, str)}


def _target(module: str, name: str | None) -> str:
    """The module `from module import name` (or `import module`) depends on."""
    if name is not None:
        if f"{module}.{name}" in MODULES:
            return f"{module}.{name}"
        index = _index(module)
        if name in index:
            return index[name]
    return module


def _old(module: str) -> bool:
    """Whether `module` is an old import path (`cotcredit._aliases`)."""
    from cotcredit import _aliases

    return _aliases.new_name(module) is not None and module not in MODULES


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports(module: str, source: str | None = None) -> list[tuple[str, str, int, bool]]:
    """(imported module, as written, line, under TYPE_CHECKING) for every cotcredit import of
    `module` (its file, or `source`)."""
    tree = ast.parse(source if source is not None else MODULES[module].read_text("utf-8"))
    guarded = _type_checking_lines(tree)
    package = module if _is_package(module) else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "cotcredit":
                    out.append((_target(a.name, None), a.name, node.lineno,
                                node.lineno in guarded))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "cotcredit":
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                written = full if full in MODULES or _old(full) else base
                out.append((_target(base, a.name), written, node.lineno, node.lineno in guarded))
    return out


def _graph(include_type_checking: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _, guarded in imports(m):
            if (include_type_checking or not guarded) and target in MODULES and target != m:
                graph[m].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_from_a_higher_layer():
    """Also not lazily inside a function, and not under TYPE_CHECKING."""
    bad = [
        f"{MODULES[m].relative_to(SRC)}:{line}: {m} (layer {layer(m)}) imports {written} "
        f"({target}, layer {layer(target)})"
        for m in MODULES
        for target, written, line, _ in imports(m)
        if layer(target) > layer(m)
    ]
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    """No cycle of modules importing each other, through function-level imports too."""
    found = cycles(_graph(include_type_checking=False))
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_no_module_over_600_lines():
    long = {str(p.relative_to(SRC)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, long


def test_no_state_is_kept_in_an_object_s_dict():
    """No module keeps a cache in an object's `__dict__` (the model's, the tokenizer's, the
    scorer's, a context's): what a run builds once is in its `RunCache`, what depends on the
    model alone is the scorer's own declared state, what depends on one trace is on its
    `TraceContext`. Any `__dict__` in the package fails, so none can come back unseen."""
    found = [f"{path.relative_to(SRC)}:{i}" for path in MODULES.values()
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "__dict__" in line]
    assert not found, found


def test_the_package_uses_no_old_import_path():
    """Old paths (`cotcredit.traces`, ...) are for code outside the package."""
    bad = [f"{MODULES[m].relative_to(SRC)}:{line}: {written}"
           for m in MODULES for _, written, line, _ in imports(m) if _old(written)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_finder_finds_cycles(graph, expected):
    assert cycles(graph) == expected


def test_the_checks_see_function_level_and_type_checking_imports():
    """The import reader finds an import inside a function, resolves a package index and a
    relative import, and marks TYPE_CHECKING ones."""
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from cotcredit.lm import Scorer\n"
              "def f():\n    from cotcredit.report import stats\n    from . import trace\n")
    found = imports("cotcredit.data.readers", source)
    assert ("cotcredit.lm.scorer", "cotcredit.lm", 3, True) in found
    assert ("cotcredit.report.stats", "cotcredit.report.stats", 5, False) in found
    assert ("cotcredit.data.trace", "cotcredit.data.trace", 6, False) in found
    assert [layer(t) for t, *_ in found] == [3, 7, 1]  # two violations, were this data/


def test_every_name_of_a_package_index_is_where_the_index_says():
    """`from cotcredit.lm import Scorer` loads the module the index names, and the name is
    defined there (not merely imported), so the layer checks above see the real dependency."""
    checked = 0
    for package in [m for m in MODULES if _is_package(m)]:
        mod = importlib.import_module(package)
        lazy = getattr(getattr(mod, "__getattr__", None), "__module__", None) == "cotcredit._lazy"
        if not (lazy or package == "cotcredit"):
            continue  # an index of its own (bench's)
        where = getattr(mod, "_WHERE", None) or getattr(mod, "_LAZY", None) or {}
        # A name that is also a submodule's would turn into the module once it is imported.
        clash = [n for n in where if f"{package}.{n}" in MODULES]
        assert not clash, (package, clash)
        for name, value in where.items():
            module, _, attr = value.partition(":")
            obj = getattr(importlib.import_module(module), attr or name)
            assert getattr(mod, name) is obj, (package, name)
            if callable(obj) and hasattr(obj, "__module__"):
                assert obj.__module__ == module, (package, name, obj.__module__)
            checked += 1
    assert checked > 150


# ---- the path of `cotcredit redistribute` -----------------------------------------------------
CARRY = ("cli/", "pipeline/", "methods/")  # the layers that carry a trace along


def redistribute_path(traces, model_dir, out) -> dict[str, set[str]]:
    """File (under src/cotcredit) -> functions that `cotcredit redistribute` runs in the layers
    that carry the trace (`CARRY`), with every cotcredit function they call (one level into the
    lower layers; calls made by the import system are not the path's)."""
    import os
    import sys

    from cotcredit.cli import main

    root = str(PACKAGE)
    found: dict[str, set[str]] = {}

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or not code.co_filename.startswith(root):
            return
        if code.co_name.startswith("<") and code.co_name != "<lambda>":
            return  # module bodies, comprehensions
        caller = frame.f_back
        while caller is not None and not caller.f_code.co_filename.startswith(root):
            if "importlib" in caller.f_code.co_filename:
                return
            caller = caller.f_back  # through other packages' frames (typer, click)
        here = os.path.relpath(code.co_filename, root)
        by = os.path.relpath(caller.f_code.co_filename, root) if caller is not None else ""
        if here.startswith(CARRY) or by.startswith(CARRY):
            found.setdefault(here, set()).add(code.co_qualname)

    sys.setprofile(profile)
    try:
        main(["redistribute", str(traces), "--model", str(model_dir), "-o", str(out), "-q",
              "-k", "3"])
    except SystemExit as e:
        assert not e.code
    finally:
        sys.setprofile(None)
    return found


def test_the_architecture_page_lists_every_file_on_the_path_of_redistribute(
        traces_file, tiny_model_dir, tmp_path):
    page = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## The path of `cotcredit redistribute`")[1].split("\n## ")[0]
    path = redistribute_path(traces_file, tiny_model_dir, tmp_path / "rredcot.parquet")
    assert "methods/rredcot/probes.py" in path and "store/tables.py" in path
    missing = sorted(f for f in path if f"`{f}`" not in section)
    assert not missing, f"docs/architecture.md does not list {missing} on the path"
    # A newcomer following RREDCoT from the command line to its rows reads at most this many
    # files (26 before the modules that were one concept in two were merged).
    assert len(path) <= MAX_PATH_FILES, sorted(path)
