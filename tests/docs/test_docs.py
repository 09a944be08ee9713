"""The documentation: the site builds with `mkdocs build --strict`, every command page lists
every flag of `cotcredit CMD --help`, and the code examples of the pages and the README run as
written, on the tiny model.

Code blocks: a ```python block runs, and so do the statements of a ```pycon block (their output
is a real run's, not compared); a block with a `title="..."` is shown, not run. The blocks of a
page run in order, in one namespace holding `model` and `tokenizer` (the tiny policy), in a
copy of a folder where the quickstart session has run, with the embedded default model replaced
by the tiny one (and Monte Carlo cut to 2 rollouts of 16 tokens: the commands are the page's, the
sizes are the test's). A page whose examples need more (a trainer's batch, a TRL config) says which
test runs them: `<!-- python blocks run by tests/NAME.py -->`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT

DOCS = ROOT / "docs"
DEMO_TRACES = ROOT / "examples" / "lookup" / "traces.jsonl"

FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<body>.*?)^```\s*$", re.S | re.M)
RUN_BY = re.compile(r"<!-- python blocks run by (tests/[\w./-]+\.py) -->")


def docs_hook():
    """The site's MkDocs hook module (docs/_hooks/cotcredit_docs.py)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cotcredit_docs",
                                                  DOCS / "_hooks" / "cotcredit_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def page_source(relative: str) -> str:
    """The Markdown of a page as the hook hands it on: a method command's page is made from the
    registry, and the registry's markers are expanded."""
    hook = docs_hook()
    path = DOCS / relative
    name = relative.removeprefix("commands/").removesuffix(".md")
    if not path.exists() and relative.startswith("commands/") and name in hook.method_commands():
        return hook.method_command_page(name)
    return hook._registry_markers(path.read_text(encoding="utf-8"))


# ---- the site -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built with --strict (a warning fails the build) into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        # not -q: a quiet build stops counting warnings, and --strict then passes anything
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.mark.subprocess
def test_the_site_builds_strictly_with_every_page_in_the_nav(site):
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")
             if "_hooks" not in p.parts}
    for page in pages:
        built = site / (page.removesuffix("index") if page.endswith("index") else page + "/")
        assert (built / "index.html").is_file(), f"docs/{page}.md was not built"
    # Nothing is fetched when a page is read: no web fonts, no remote stylesheets.
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "fonts.googleapis" not in html and "fonts.gstatic" not in html


def help_flags(command: str) -> set[str]:
    """The flags `cotcredit COMMAND --help` lists in its options (not those its prose names)."""
    from typer.testing import CliRunner

    from cotcredit.cli import app

    app = getattr(app, "app", app)  # a module `cli.app` holding the Typer app
    result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    flags: set[str] = set()
    for line in result.output.splitlines():
        m = re.match(r"^\s+(-.*?)(?:\s{2,}|$)", line)
        if m:
            flags |= set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", m[1]))
    flags.discard("--help")
    return flags


def cli_commands() -> list[str]:
    import typer

    from cotcredit.cli import app

    return sorted(typer.main.get_command(getattr(app, "app", app)).commands)


@pytest.mark.subprocess
@pytest.mark.parametrize("command", cli_commands())
def test_each_command_page_lists_every_flag_of_its_help(command, site):
    source = page_source(f"commands/{command}.md")
    assert f"<!-- cli-options {command} -->" in source
    html = (site / "commands" / command / "index.html").read_text(encoding="utf-8")
    flags = help_flags(command)
    missing = [f for f in sorted(flags)
               if not re.search(r"(?<![\w-])" + re.escape(f) + r"(?![\w-])", html)]
    assert not missing, f"commands/{command}.md does not list {missing}"
    assert command == "version" or len(flags) >= 3


def public_modules() -> set[str]:
    """Every module of the package whose dotted name has no part starting with `_`, but the
    command line (its pages are the command pages)."""
    src = ROOT / "src"
    names = {".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
             for p in (src / "cotcredit").rglob("*.py")}
    return {n for n in names if not any(part.startswith("_") for part in n.split("."))
            and n != "cotcredit.cli" and not n.startswith("cotcredit.cli.")}


@pytest.mark.subprocess
def test_the_api_reference_documents_every_public_module(site):
    documented = set()
    for page in (DOCS / "reference").glob("*.md"):
        source = page_source(page.relative_to(DOCS).as_posix())
        documented |= set(re.findall(r"^::: ([\w.]+)", source, re.M))
    missing = sorted(public_modules() - documented)
    assert not missing, f"modules missing from docs/reference/: {missing}"
    assert not documented - public_modules(), "docs/reference/ names modules that do not exist"
    html = (site / "reference" / "methods" / "index.html").read_text(encoding="utf-8")
    assert 'id="cotcredit.methods.rredcot"' in html and "::: " not in html  # rendered


@pytest.mark.subprocess
def test_a_broken_link_fails_the_strict_build(tmp_path):
    """The strict build is a real check: a page linking a missing page or repository file fails."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "_hooks", docs / "_hooks")
    (docs / "index.md").write_text("# x\n\n[gone](gone.md) and [a study](../studies/none/)\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: t\nhooks: [docs/_hooks/cotcredit_docs.py]\nexclude_docs: |\n  _hooks/\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode != 0
    assert "gone.md" in proc.stderr and "studies/none" in proc.stderr


# ---- code examples ------------------------------------------------------------------------
def code_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block at the start of a line."""
    return [(m["info"].strip(), m["body"]) for m in FENCE.finditer(text)]


def runnable(info: str) -> bool:
    lang = info.split()[0] if info else ""
    return lang in ("python", "pycon") and "title=" not in info


def as_code(info: str, body: str) -> str:
    if info.split()[0] == "pycon":  # the statements of a console session
        lines = [line[4:] for line in body.splitlines() if line.startswith((">>> ", "... "))]
        return "\n".join(lines) + "\n"
    return body


def example_pages() -> list[Path]:
    pages = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
    return [*pages, ROOT / "README.md"]


def pages_run_here() -> list[str]:
    return [p.relative_to(ROOT).as_posix() for p in example_pages()
            if not RUN_BY.search(p.read_text(encoding="utf-8"))
            and any(runnable(info) for info, _ in code_blocks(p.read_text(encoding="utf-8")))]


def test_pages_whose_examples_run_elsewhere_name_a_test_that_runs_them():
    for page in example_pages():
        text = page.read_text(encoding="utf-8")
        for test in RUN_BY.findall(text):
            path = ROOT / test
            assert path.is_file(), f"{page.name}: {test} does not exist"
            assert page.relative_to(ROOT).as_posix() in path.read_text(encoding="utf-8"), (
                f"{test} does not read {page.relative_to(ROOT)}")


@pytest.fixture
def policy(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return (AutoModelForCausalLM.from_pretrained(tiny_model_dir),
            AutoTokenizer.from_pretrained(tiny_model_dir))


def _tiny_default_model(mp: pytest.MonkeyPatch, tiny_model_dir: Path) -> None:
    """Make the embedded default model (no --model) the tiny one, in a fresh model cache."""
    from cotcredit.lm import load_scorer

    loader = sys.modules[load_scorer.__module__]  # where --model is located and models cached
    real = loader.locate_model
    mp.setattr(loader, "locate_model",
               lambda name: (str(tiny_model_dir), "tiny") if name is None else real(name))
    mp.setattr(loader, "_LOADED", {})


def session_commands() -> list[list[str]]:
    """The quickstart's five commands, as typed there."""
    text = (DOCS / "quickstart.md").read_text(encoding="utf-8")
    session = text[text.index("## A session"):]
    block = next(body for info, body in code_blocks(session) if not info)
    return [line.split()[1:] for line in block.splitlines() if line.startswith("cotcredit ")]


# Added to the page's commands: the tiny model's rollouts cost what the real model's do per
# token, and the suite has minutes, not the demo's quarter hour.
TEST_SIZES = {"mc-baseline": ["--rollouts", "2", "--max-new-tokens", "16"]}


@pytest.fixture(scope="module")
def session_folder(tmp_path_factory, tiny_model_dir) -> Path:
    """A folder where the quickstart session has run (on the tiny model)."""
    from cotcredit.cli import main

    folder = tmp_path_factory.mktemp("session")
    shutil.copy(DEMO_TRACES, folder / "trace.jsonl")
    with pytest.MonkeyPatch.context() as mp:
        _tiny_default_model(mp, tiny_model_dir)
        mp.chdir(folder)
        for argv in session_commands():
            try:
                main([*argv, *TEST_SIZES.get(argv[0], []), "--quiet"])
            except SystemExit as e:
                assert not e.code, f"cotcredit {' '.join(argv)} exited {e.code}"
    return folder


def test_the_quickstart_session_writes_its_tables(session_folder):
    import pandas as pd

    assert [argv[0] for argv in session_commands()] == [
        "segment", "redistribute", "mc-baseline", "attribute", "compare"]
    segments = pd.read_parquet(session_folder / "segments.parquet")
    rredcot = pd.read_parquet(session_folder / "rredcot.parquet")
    assert segments.trace_id.nunique() == 6
    # one segmentation for every method, and RREDCoT's rewards sum to each trace's outcome
    assert rredcot[["trace_id", "segment"]].equals(segments[["trace_id", "segment"]])
    sums = rredcot.groupby("trace_id").score.sum()
    outcome = rredcot.groupby("trace_id").outcome.first()
    assert sums.to_numpy() == pytest.approx(outcome.to_numpy(), abs=1e-5)
    assert (session_folder / "report" / "report.html").is_file()


@pytest.mark.parametrize("page", pages_run_here())
def test_the_examples_of_a_page_run(page, session_folder, policy, tiny_model_dir, tmp_path,
                                    monkeypatch):
    model, tokenizer = policy
    folder = tmp_path / "work"
    shutil.copytree(session_folder, folder)
    monkeypatch.chdir(folder)
    _tiny_default_model(monkeypatch, tiny_model_dir)
    namespace = {"model": model, "tokenizer": tokenizer, "__name__": "__docs__"}
    blocks = [(info, body) for info, body in code_blocks((ROOT / page).read_text(encoding="utf-8"))
              if runnable(info)]
    for i, (info, body) in enumerate(blocks):
        exec(compile(as_code(info, body), f"{page} (block {i + 1})", "exec"), namespace)
