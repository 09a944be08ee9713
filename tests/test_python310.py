"""cotcredit declares Python >= 3.10: on a real Python 3.10, `import cotcredit` and
`cotcredit --help` work with the light dependencies alone (no torch: the model stack loads with
the first model).

The 3.10 interpreter is found on PATH or under pyenv; its virtual environment (typer, rich,
pyyaml, tomli from the package index) is made once and kept in the temp folder, so reruns are
cheap. Skipped, with the reason, where there is no Python 3.10 or no package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIGHT = ("typer>=0.12", "rich>=13", "pyyaml>=6", "tomli>=2")


def _python310() -> str | None:
    """A Python 3.10 that runs: pyenv's, else one on PATH (a pyenv shim may name a version
    that is not selected, so each candidate is tried)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [str(v / "bin" / "python3.10")
                  for v in sorted(Path(root, "versions").glob("3.10*"), reverse=True)]
    candidates.append(shutil.which("python3.10") or "python3.10")
    for python in candidates:
        try:
            ok = subprocess.run([python, "-c", "import sys; assert sys.version_info[:2] == "
                                 "(3, 10)"], capture_output=True, timeout=60).returncode == 0
        except OSError:
            ok = False
        if ok:
            return python
    return None


@pytest.fixture(scope="module")
def venv310() -> Path:
    python = _python310()
    if python is None:
        pytest.skip("no Python 3.10 on this machine (PATH or pyenv)")
    venv = Path(tempfile.gettempdir()) / "cotcredit-py310-venv"
    ready = venv / ".light-dependencies"
    # The environment's own packages only: a PYTHONPATH of the caller's would make pip think
    # they are installed (and a kept environment made that way is rebuilt).
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    usable = ready.exists() and subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import typer, rich, yaml, tomli"], env=clean,
        capture_output=True, timeout=120).returncode == 0
    if not usable:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300, env=clean)
        pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                              *LIGHT], capture_output=True, text=True, timeout=900, env=clean)
        if pip.returncode != 0:
            pytest.skip(f"no package index for the Python 3.10 environment: {pip.stderr[-300:]}")
        ready.write_text("\n".join(LIGHT))
    return venv


def _run(venv: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([str(venv / "bin" / "python"), *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)


def test_import_on_python_310(venv310):
    proc = _run(venv310, "-c", "import sys, cotcredit\nprint(sys.version_info[:2], "
                "sorted(n for n in cotcredit.__all__ if n != '__version__')[:3])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("(3, 10)")


def test_help_and_a_config_file_on_python_310(venv310, tmp_path):
    """`cotcredit --help` and a TOML config (read by tomli there, tomllib on 3.11+)."""
    proc = _run(venv310, "-m", "cotcredit", "--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("segment", "redistribute", "mc-baseline", "attribute", "compare", "train"):
        assert command in proc.stdout
    config = tmp_path / "methods.toml"
    config.write_text("[mc]\nrollouts = 4\n")
    proc = _run(venv310, "-c", "from pathlib import Path\nfrom cotcredit.options import "
                f"read_config\nprint(read_config(Path({str(config)!r})))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "{'mc': {'rollouts': 4}}"


def test_tomli_is_declared_for_python_310():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10"' in text
    assert "\"tomli>=2; python_version<'3.11'\"" in text
    assert sys.version_info >= (3, 10)
