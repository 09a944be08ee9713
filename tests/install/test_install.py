"""cotcredit installs where pyproject.toml says it does.

On the oldest Python that ``requires-python`` admits, a fresh virtual environment gets torch
the way the Makefile installs it (the CPU wheels on a machine without an NVIDIA GPU), then
``pip install -e .``: the package itself with its declared core dependencies, nothing picked by
hand. There ``cotcredit --help`` and ``cotcredit segment`` on a tiny model work (and segment
exactly as this checkout does), the extras are absent, and a command that needs one says in one
line which ``pip install`` to run. A second environment gets ``pip install -e .[train]``.

Each environment is kept in the temp folder, keyed by the Python version, the core's and its
extra's dependency lists in pyproject.toml and the Makefile's torch lines: a rerun reinstalls
the package itself (``pip install -e .`` with every dependency already there: seconds), a change
of one of those lists builds a new environment (minutes). Skipped, with the reason, where the
Python or the package index is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLE_TRACES

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
OPTIONAL = ("captum", "shap", "trl", "peft", "accelerate", "datasets", "gguf", "verl")

pytestmark = pytest.mark.subprocess


def oldest_python() -> tuple[int, int]:
    """The oldest Python version `requires-python` admits (its `>=3.N` bound)."""
    match = re.fullmatch(r">=\s*3\.(\d+)", PYPROJECT["requires-python"].strip())
    assert match, f"requires-python is not a plain lower bound: {PYPROJECT['requires-python']}"
    return 3, int(match.group(1))


def find_python(version: tuple[int, int]) -> str | None:
    """An interpreter of `version` that runs: pyenv's, else one on PATH (a pyenv shim may name a
    version that is not selected, so each candidate is tried)."""
    name = f"python{version[0]}.{version[1]}"
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [str(v / "bin" / name) for v in sorted(
        Path(root, "versions").glob(f"{version[0]}.{version[1]}.*"), reverse=True)]
    candidates.append(shutil.which(name) or name)
    for python in candidates:
        try:
            ok = subprocess.run([python, "-c", f"import sys; assert sys.version_info[:2] == "
                                 f"{version}"], capture_output=True, timeout=60).returncode == 0
        except OSError:
            ok = False
        if ok:
            return python
    return None


def extra_requirements(extra: str) -> list[str]:
    """The requirements `pip install .[extra]` adds to the core's, with the package's own extras
    (`cotcredit[a,b]`) expanded: an extra's environment depends on these lists only."""
    found = []
    for requirement in PYPROJECT["optional-dependencies"].get(extra, []):
        nested = re.fullmatch(r"cotcredit\[(.+)\]", requirement.replace(" ", ""))
        found += ([r for e in nested.group(1).split(",") for r in extra_requirements(e)]
                  if nested else [requirement])
    return found


def environment_key(python_version: tuple[int, int], extra: str) -> str:
    """What decides an environment's contents: the Python, the core's and the extra's
    dependency lists (not the other extras': a new test tool rebuilds nothing), torch."""
    torch_lines = [line for line in (ROOT / "Makefile").read_text().splitlines()
                   if line.startswith(("TORCH", "$(VENV)/.torch"))]
    text = json.dumps([python_version, extra, PYPROJECT["dependencies"],
                       extra_requirements(extra), torch_lines], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# The environment's own packages only: a PYTHONPATH of the caller's would make pip think they
# are installed and put this checkout's source in front of the installed package.
CLEAN = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@contextlib.contextmanager
def installed(extra: str) -> Iterator[Path]:
    """A virtual environment with torch (as `make` installs it) and `pip install -e .[extra]`
    of this checkout (extra "": the core), locked while in use (other checkouts share it)."""
    version = oldest_python()
    python = find_python(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} on this machine (PATH or pyenv)")
    venv = Path(tempfile.gettempdir()) / f"cotcredit-install-{extra or 'core'}"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        key = environment_key(version, extra)
        stamp = venv / ".cotcredit-key"
        if not (stamp.exists() and stamp.read_text() == key):
            shutil.rmtree(venv, ignore_errors=True)
            make = subprocess.run(["make", "-s", "-C", str(ROOT), f"{venv}/.torch",
                                   f"VENV={venv}", f"PYTHON={python}"],
                                  capture_output=True, text=True, timeout=1800, env=CLEAN)
            if make.returncode != 0:
                pytest.skip(f"torch did not install (no package index?): {make.stderr[-400:]}")
        target = f"{ROOT}[{extra}]" if extra else str(ROOT)
        pip = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-c",
             str(venv / "torch-constraint.txt"), "-e", target],
            capture_output=True, text=True, timeout=1800, env=CLEAN)
        assert pip.returncode == 0, pip.stderr[-3000:]
        stamp.write_text(key)
        yield venv


@pytest.fixture(scope="module")
def core() -> Iterator[Path]:
    with installed("") as venv:
        yield venv


def run_cotcredit(venv: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    """The installed `cotcredit` command, run in `cwd` with a model cache of its own."""
    env = {**CLEAN, "HF_HUB_OFFLINE": "1", "COTCREDIT_CACHE": str(cwd / "cache"),
           "COLUMNS": "200"}
    return subprocess.run([str(venv / "bin" / "cotcredit"), *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_core_is_the_package_itself_without_the_extras(core):
    probe = ("import importlib.util, json, sys, cotcredit; print(json.dumps({"
             "'python': sys.version_info[:2], 'file': cotcredit.__file__, 'absent': "
             f"[m for m in {OPTIONAL!r} if importlib.util.find_spec(m) is None]}}))")
    proc = subprocess.run([str(core / "bin" / "python"), "-c", probe], capture_output=True,
                          text=True, env=CLEAN, timeout=300, cwd=core)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert tuple(facts["python"]) == oldest_python()
    assert Path(facts["file"]).resolve() == (ROOT / "src" / "cotcredit" / "__init__.py")
    assert facts["absent"] == list(OPTIONAL)
    check = subprocess.run([str(core / "bin" / "python"), "-m", "pip", "check"],
                           capture_output=True, text=True, env=CLEAN, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_help_and_segment_on_a_tiny_model(core, tiny_model_dir, traces_file, tmp_path):
    """`cotcredit segment` from the installed core writes the segments this checkout writes."""
    import pandas as pd

    import cotcredit
    from cotcredit.lm import ModelOptions
    from cotcredit.segmentation import SegmentOptions

    proc = run_cotcredit(core, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for command in ("segment", "redistribute", "mc-baseline", "attribute", "compare", "export",
                    "merge", "train", "bench"):
        assert command in proc.stdout
    proc = run_cotcredit(core, "segment", traces_file, "--model", tiny_model_dir, "-k", "3",
                         "-o", tmp_path / "installed.parquet", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cotcredit.segment(traces_file, tmp_path / "here.parquet", options=SegmentOptions(segments=3),
                      model=ModelOptions(model=str(tiny_model_dir), device="cpu"))
    installed_rows = pd.read_parquet(tmp_path / "installed.parquet")
    assert len(installed_rows) == 3 * len(SAMPLE_TRACES)
    pd.testing.assert_frame_equal(installed_rows, pd.read_parquet(tmp_path / "here.parquet"))


@pytest.mark.parametrize(("args", "extra", "feature"), [
    (["attribute", "{traces}", "--method", "shapley"], "attribution", "shapley"),
    (["attribute", "{traces}", "--method", "gradient"], "attribution", "gradient"),
    (["segment", "{traces}", "--model", "{tmp}/model.gguf"], "gguf", "--model"),
    (["segment", "a-dataset-id"], "data", "a-dataset-id: no such file or folder"),
    (["train", "{tmp}/config.yaml"], "train", "cotcredit train"),
])
def test_a_missing_extra_is_one_line_naming_the_install(core, traces_file, tmp_path, args,
                                                        extra, feature):
    """Before any model loads: with --model naming nothing, the extra is still what is said."""
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    (tmp_path / "config.yaml").write_text("model: nowhere\ntrain_file: nowhere.jsonl\n")
    argv = [a.format(traces=traces_file, tmp=tmp_path) for a in args]
    if "--model" not in argv and argv[0] != "train":
        argv += ["--model", str(tmp_path / "no-such-model")]
    proc = run_cotcredit(core, *argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"error: {feature}")
    assert lines[0].endswith(f"needs the {extra} extra: pip install 'cotcredit[{extra}]'")


def test_the_train_extra_installs(tiny_model_dir, tmp_path):
    """`pip install -e .[train]`: TRL's trainer imports and `cotcredit train` reads a config."""
    with installed("train") as venv:
        probe = ("import trl, peft, accelerate, datasets\n"
                 "from cotcredit.training.trainer import RredcotGRPOTrainer\n"
                 "print(trl.__version__)")
        proc = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True,
                              text=True, env=CLEAN, timeout=600, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().startswith("1.16.")
        (tmp_path / "config.yaml").write_text(
            f"model: {tiny_model_dir}\ntrain_file: missing.jsonl\noutput_dir: out\n")
        proc = run_cotcredit(venv, "train", tmp_path / "config.yaml", cwd=tmp_path)
        assert proc.returncode == 2 and "missing.jsonl" in proc.stderr, proc.stderr
        assert "needs the" not in proc.stderr  # no extra is missing


def test_an_environment_is_keyed_by_its_own_dependency_lists_only(monkeypatch):
    """A new dev tool rebuilds neither environment; a new train or core dependency rebuilds the
    ones that install it; the package's own extras are expanded."""
    project = json.loads(json.dumps(PYPROJECT))
    monkeypatch.setitem(globals(), "PYPROJECT", project)
    assert extra_requirements("bench") == (project["optional-dependencies"]["attribution"]
                                           + project["optional-dependencies"]["gguf"])
    assert extra_requirements("") == []
    before = {extra: environment_key((3, 11), extra) for extra in ("", "train")}
    project["optional-dependencies"]["dev"].append("some-test-tool")
    assert {extra: environment_key((3, 11), extra) for extra in ("", "train")} == before
    project["optional-dependencies"]["train"].append("some-trainer")
    assert environment_key((3, 11), "") == before[""]
    assert environment_key((3, 11), "train") != before["train"]
    project["dependencies"].append("some-core-library")
    assert environment_key((3, 11), "") != before[""]
