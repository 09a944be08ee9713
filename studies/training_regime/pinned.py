"""The training code the main study runs with: amendment 4 fixed it to its own commit's, and a
change to it during the study would be an amendment. `run_study main` checks the checkout it
imports `cotcredit` from before training anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

TRAINING_CODE = "422bfdf"  # amendment 4's commit


def package_source() -> Path:
    """The `src` folder `cotcredit` is imported from."""
    import cotcredit

    return Path(cotcredit.__file__).resolve().parents[1]


def differs(src: Path, commit: str | None = None) -> str:
    """Why the package source in `src` is not `commit`'s (default `TRAINING_CODE`; "" when it
    is): a git checkout whose `src` has no change from `commit` in a tracked or untracked file."""
    commit = commit or TRAINING_CODE

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True)

    if git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}").returncode:
        return f"{src} is not in a git checkout that has commit {commit}"
    changed = git("diff", "--name-only", commit, "--", ".").stdout.split()
    changed += git("ls-files", "--others", "--exclude-standard", "--full-name", "--",
                   ".").stdout.split()
    if changed:
        return (f"{src} differs from {commit} in {len(changed)} file(s), e.g. {changed[0]}: run "
                f"the main study from a checkout of {commit} with main's study scripts")
    return ""
