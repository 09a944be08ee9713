"""Old import paths (the flat layout before 0.3, and modules merged since) keep importing for one
release: each is the new module object itself, and importing it warns once, naming the new
path."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from cotcredit import _aliases

# Every old module path and a name that code imported from it.
OLD_NAMES = {
    "cotcredit.traces": "read_traces",
    "cotcredit.readers": "open_records",
    "cotcredit.grading": "grade_completion",
    "cotcredit.outcome": "trace_outcome",
    "cotcredit.data.fields": "FieldNames",
    "cotcredit.data.outcome": "trace_outcome",
    "cotcredit.data.records": "parse_record",
    "cotcredit.problems": "generate_traces",
    "cotcredit.io": "read_table",
    "cotcredit.tables": "TableWriter",
    "cotcredit.store.schema": "table_schema",
    "cotcredit.shards": "merge_tables",
    "cotcredit.encoding": "encode_trace",
    "cotcredit.forcing": "answer_forcing",
    "cotcredit.lm.forcing": "answer_forcing",
    "cotcredit.sampling": "get_generator",
    "cotcredit.run_cache": "RunCache",
    "cotcredit.methods.base": "TraceContext",
    "cotcredit.methods.rredcot_paths": "paths_after",
    "cotcredit.methods.rredcot.paths": "known_paths",
    "cotcredit.methods.rredcot.rewards": "redistribute_rewards",
    "cotcredit.api": "redistribute",
    "cotcredit.pipeline.inputs": "check_inputs",
    "cotcredit.exports": "export_scores",
    "cotcredit.report.scores": "load_scores",
    "cotcredit.comparison": "compare",
    "cotcredit.online": "OnlineRredcot",
    "cotcredit.integrations": None,  # a package: its submodule verl, tested below
    "cotcredit.cli_params": "with_options",
    "cotcredit.cli.params": "params_of",
    "cotcredit.cli.methods": "command_function",
    "cotcredit.cli.output": "report_run",
}


def _forget(monkeypatch, name: str) -> None:
    """Import `name` afresh in this test (its new module stays loaded). The parent's attribute
    is looked up in its namespace: `getattr(cotcredit, "io")` would import the old path."""
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and child in vars(sys.modules[parent]):
        monkeypatch.delattr(sys.modules[parent], child)
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_every_alias_is_listed_here():
    moved = {k for k in _aliases.ALIASES if k != "cotcredit.organism"}  # (bench's, when moved)
    assert moved == set(OLD_NAMES)


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_old_path_is_the_new_module_and_warns(old, monkeypatch):
    new = importlib.import_module(_aliases.ALIASES[old])
    _forget(monkeypatch, old)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated.*import {new.__name__}$"):
        module = importlib.import_module(old)
    assert module is new
    assert module.__name__ == new.__name__ and module.__spec__.name == new.__name__
    if OLD_NAMES[old]:
        assert getattr(module, OLD_NAMES[old]) is not None
    # Imported again, the module comes from sys.modules: no second warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module(old) is new


def test_a_submodule_of_an_aliased_package_is_the_new_submodule(monkeypatch):
    """`cotcredit.integrations.verl` is `cotcredit.training.verl`, never a second copy loaded
    from the new package's folder under the old name."""
    pytest.importorskip("verl")
    new = importlib.import_module("cotcredit.training.verl")
    for name in ("cotcredit.integrations", "cotcredit.integrations.verl"):
        _forget(monkeypatch, name)
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module("cotcredit.integrations.verl")
    assert old is new
    assert _aliases.new_name("cotcredit.integrations.verl") == "cotcredit.training.verl"


def test_from_import_of_an_old_module_and_attribute_access(monkeypatch):
    _forget(monkeypatch, "cotcredit.io")
    with pytest.warns(DeprecationWarning, match="import cotcredit.store.io"):
        from cotcredit import io
    import cotcredit
    import cotcredit.store.io

    assert io is cotcredit.store.io is cotcredit.io


def test_a_real_module_at_an_old_path_wins():
    """An old path whose module has not moved yet (a package being moved) loads as itself."""
    finder = _aliases.AliasFinder()
    assert finder.find_spec("cotcredit.segmentation", None) is None  # not an alias
    assert finder.find_spec("cotcredit.traces", None) is not None


@pytest.mark.subprocess
def test_the_warning_names_the_importing_line(tmp_path):
    """The DeprecationWarning points at the user's import, not at the import machinery."""
    script = tmp_path / "user_code.py"
    script.write_text("import warnings\nwarnings.simplefilter('always')\n"
                      "import cotcredit.grading\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{script}:3: DeprecationWarning: cotcredit.grading is deprecated" in proc.stderr
