"""A method defined in one file outside cotcredit, registered through the entry point group
`cotcredit.methods`, gets a command, a Python function, a column of `compare`, a row of the
bench's leaderboard and its pages in the docs, with nothing else touched."""

from __future__ import annotations

import importlib.metadata
import sys

import pandas as pd
import pytest
from conftest import ROOT
from typer.testing import CliRunner

import cotcredit
import cotcredit.methods
from cotcredit.segmentation import SegmentOptions

PLUGIN = '''
"""tail: credit grows with the segment's position (a toy method defined outside cotcredit)."""
from dataclasses import dataclass

from cotcredit.methods import MethodCommand, MethodSpec
from cotcredit.options import option


@dataclass(frozen=True)
class TailOptions:
    scale: float = option(1.0, help="Multiply every score by this.")


def run(ctx, options):
    K = len(ctx.segmentation.segments)
    return {"tail": [{"score": options.scale * (k + 1) / K, "relative": (k + 1) / K}
                     for k in range(K)]}


SPEC = MethodSpec(
    name="tail", options_type=TailOptions, run=run, labels=lambda options: ["tail"],
    columns={"relative": "float64"}, show=("relative", "score"),
    command=MethodCommand(name="tail", help="Credit by position.", default_output="tail.parquet",
                          page="Later segments get more credit: a toy for the registry's tests."),
)
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The `tail` method, installed as an entry point (the registry read afresh)."""
    (tmp_path / "cotcredit_tail_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    real = importlib.metadata.entry_points

    def entry_points(**kw):
        if kw.get("group") == cotcredit.methods.ENTRY_POINTS:
            return [importlib.metadata.EntryPoint(
                "tail", "cotcredit_tail_plugin:SPEC", cotcredit.methods.ENTRY_POINTS)]
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(cotcredit.methods, "_REGISTRY", None)
    yield
    sys.modules.pop("cotcredit_tail_plugin", None)


@pytest.fixture
def installed(tmp_path):
    """The `tail` method as a distribution on a path (its module and its entry point, as `pip
    install` leaves them): the environment of a subprocess that has it installed."""
    import os

    site = tmp_path / "site-packages"
    (site / "cotcredit_tail_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "cotcredit_tail_plugin.py").write_text(PLUGIN)
    info = site / "cotcredit_tail_plugin-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cotcredit-tail-plugin\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text("[cotcredit.methods]\n"
                                           "tail = cotcredit_tail_plugin:SPEC\n")
    path = os.pathsep.join([str(site), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1"}


def test_an_installed_method_is_in_the_help_the_api_and_the_built_docs(installed, tmp_path):
    """No file of cotcredit names the method: its command, its function and its pages (the
    command page with its prose and flags, its place in the nav and the command index, its
    module in the API reference) all come from the registry."""
    import subprocess

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=installed,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    assert "tail" in run("-m", "cotcredit", "--help")
    assert "--scale" in run("-m", "cotcredit", "tail", "--help")
    assert "cotcredit tail" in run("-c", "import cotcredit; print(cotcredit.tail.__doc__)")
    site = tmp_path / "site"
    run("-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site))
    page = (site / "commands" / "tail" / "index.html").read_text(encoding="utf-8")
    assert "Later segments get more credit" in page and "--scale" in page
    assert "cotcredit.tail(" in page
    assert 'href="tail/"' in (site / "commands" / "index.html").read_text(encoding="utf-8")
    assert 'href="commands/tail/"' in (site / "index.html").read_text(encoding="utf-8")  # nav
    reference = (site / "reference" / "methods" / "index.html").read_text(encoding="utf-8")
    assert 'id="cotcredit_tail_plugin"' in reference
    methods = (site / "methods" / "index.html").read_text(encoding="utf-8")
    assert "<code>tail</code>" in methods and 'href="../commands/tail/"' in methods


def test_the_plugin_is_a_row_of_the_bench(plugin, tmp_path):
    from cotcredit.bench import BenchSize, run_bench

    tiny = BenchSize(problems=3, samples=2, rollouts=2, n_boot=20, splits=2)
    result = run_bench("unique", "tail", size=tiny, threads=1, output=tmp_path / "bench",
                       cache=tmp_path / "cache", reports=False)
    assert result.failures == []
    assert "tail" in set(result.leaderboard["method"])
    assert (tmp_path / "bench" / "unique" / "test" / "tail.parquet").exists()


def test_the_plugin_is_registered_after_the_built_in_methods(plugin):
    names = list(cotcredit.methods.registry())
    assert names[-1] == "tail" and names[:2] == ["rredcot", "mc"]


def test_the_plugin_gets_a_command(plugin, tiny_model_dir, traces_file, tmp_path):
    import typer

    from cotcredit.cli.commands import add_method_commands

    app = typer.Typer()
    add_method_commands(app)
    runner = CliRunner()
    help_text = runner.invoke(app, ["tail", "--help"]).output
    assert "Credit by position." in help_text and "--scale" in help_text
    out = tmp_path / "tail.parquet"
    result = runner.invoke(app, ["tail", str(traces_file), "--model", str(tiny_model_dir),
                                 "-k", "3", "--scale", "2", "-o", str(out), "--show", "first"])
    assert result.exit_code == 0, result.output
    rows = pd.read_parquet(out)
    assert set(rows["method"]) == {"tail"}
    for _, trace in rows.groupby("trace_id"):
        assert trace["score"].tolist() == pytest.approx(2 * trace["relative"])
        assert trace["relative"].iloc[-1] == 1.0


def test_the_plugin_runs_through_the_api_and_in_compare(plugin, tiny_model_dir, traces_file,
                                                        tmp_path):
    run = cotcredit.score(traces_file, methods="tail", model=tiny_model_dir,
                          segment_options=SegmentOptions(segments=3))
    frame = run.frame()
    assert set(frame["method"]) == {"tail"} and (frame["score"] > 0).all()
    result = cotcredit.compare(traces_file, methods="rredcot,tail", output=tmp_path / "report",
                               model=tiny_model_dir, segment_options=SegmentOptions(segments=3),
                               sets=["tail.scale=3"])
    assert "tail" in result.correlations.methods
    assert (tmp_path / "report" / "tail.parquet").exists()
    assert "| tail |" in (tmp_path / "report" / "report.md").read_text()


def test_a_plugin_whose_options_clash_is_left_out_with_a_warning(plugin, monkeypatch):
    """A method from another package whose option is named like a command parameter
    (`output`) cannot break the other commands."""
    import dataclasses

    import typer

    from cotcredit.cli.commands import add_method_commands
    from cotcredit.options import option

    @dataclasses.dataclass(frozen=True)
    class Clashing:
        output: str = option("x", help="A name the command itself uses.")

    tail = cotcredit.methods.registry()["tail"]
    monkeypatch.setitem(cotcredit.methods.registry(), "tail",
                        dataclasses.replace(tail, options_type=Clashing))
    app = typer.Typer()
    with pytest.warns(UserWarning, match="command tail left out"):
        add_method_commands(app)
    names = {c.name for c in app.registered_commands}
    assert "tail" not in names and {"redistribute", "mc-baseline", "attribute"} <= names
