"""The model organism as the organism studies ran it: its two checkpoints and problem files.

`model-early/` (the checkpoint that also learnt to state an answer mid-chain) lives here;
`model-full` is the benchmark's `unique` checkpoint, shipped with the package. `problems/`
holds the held-out splits the studies sampled from (dev.jsonl, test.jsonl); the 20,000-problem
train.jsonl is written from its seed by `python -m studies.organism.problems`.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "problems"
REGIMES = ("full", "early")


def model(regime: str) -> Path:
    """The folder of a checkpoint: `full` (full chains only) or `early` (also answers early)."""
    if regime == "early":
        return HERE / "model-early"
    if regime == "full":
        from cotcredit.bench import checkpoint

        return Path(checkpoint("unique"))
    raise ValueError(f"unknown organism checkpoint {regime!r}: full or early")
