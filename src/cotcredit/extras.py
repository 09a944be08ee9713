"""Which extra brings which import, and the one line a user gets when one is missing.
The core runs every analysis command but these:

    attribution  captum, shap           attribute --method shapley, gradient
    train        trl, peft, accelerate  cotcredit train; analyses launched on several processes
    verl         verl's dependencies    cotcredit.training.verl (verl itself: --no-deps)
    data         datasets               a datasets folder or hub dataset id as input
    gguf         gguf                   a .gguf --model and the embedded default model
    bench        attribution + gguf     bench --size full (every method; the hops regime)
    vllm         vllm                   --backend vllm, grpo.use_vllm

`require` runs before the import it guards, and while options are checked where an option
decides it, so a missing extra costs no model load.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

from cotcredit.errors import UserError

# The top-level imports each extra provides: what `require` looks for by default.
EXTRAS: dict[str, tuple[str, ...]] = {
    "attribution": ("captum", "shap"),
    "train": ("trl", "peft", "accelerate", "datasets"),
    "verl": ("verl", "omegaconf", "hydra", "ray", "tensordict"),
    "data": ("datasets",),
    "gguf": ("gguf", "accelerate"),
    "vllm": ("vllm",),
}
# verl's release pins a transformers older than cotcredit's: it is installed on its own,
# without its dependencies (the verl extra holds those; see pyproject.toml).
_THEN = {"verl": " && pip install --no-deps verl==0.9.1"}


class MissingExtra(UserError, ImportError):
    """An optional dependency is not installed; the message names the pip install to run.

    A `UserError` (the command line prints its one line and exits with status 2) and an
    `ImportError` (code that tries an optional import still catches it)."""


def install_command(extra: str) -> str:
    """The command that installs `extra`, e.g. ``pip install 'cotcredit[attribution]'``."""
    return f"pip install 'cotcredit[{extra}]'" + _THEN.get(extra, "")


def missing(modules: Sequence[str]) -> list[str]:
    """The top-level modules among `modules` that cannot be imported (looked up, not imported;
    one set to None in `sys.modules` counts as missing, as `import` treats it)."""
    return [m for m in modules if not _installed(m)]


def _installed(module: str) -> bool:
    if module in sys.modules:  # imported already, or blocked with None
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def require(feature: str, extra: str, modules: Sequence[str] | None = None) -> None:
    """Raise `MissingExtra` ("FEATURE needs the EXTRA extra: pip install ...") unless every
    module of `modules` (default: all of the extra's) is installed."""
    if missing(modules if modules is not None else EXTRAS[extra]):
        raise MissingExtra(f"{feature} needs the {extra} extra: {install_command(extra)}")
