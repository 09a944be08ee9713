"""The study's training setups (a bench regime, its problems, the shape of a GRPO step) and
arms (a credit source and form), and the `cotcredit train` config of one run.

A setup differs from another only in what the protocol calls the regime: the task and its
checkpoint, which of its problems are drawn (`min_steps`), and how a step's 16 completions are
grouped (`prompts` x `group`). Everything else is the earlier training study's shared settings
(`studies.training.run_study.base_config`), so the two studies' `unique` runs are the same
runs at the same seed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

TRAIN_PROBLEMS, EVAL_PROBLEMS = 5000, 200


@dataclass(frozen=True)
class Setup:
    """A training regime: `regime`'s problems (those of at least `min_steps` steps) and its
    checkpoint, `prompts` x `group` completions per step, completions of at most `max_tokens`
    tokens (the regime's own sampling length)."""

    name: str
    regime: str
    prompts: int = 2
    group: int = 8
    min_steps: int | None = None
    max_tokens: int = 64

    @property
    def data_name(self) -> str:
        """The folder of its problem files (setups with the same problems share them)."""
        return self.regime + (f"-min{self.min_steps}" if self.min_steps else "")


SETUPS: dict[str, Setup] = {s.name: s for s in (
    Setup("long", "long", max_tokens=384),
    Setup("long-g4", "long", prompts=4, group=4, max_tokens=384),
    Setup("long-hard", "long", min_steps=32, max_tokens=384),
    Setup("unique-g4", "unique", prompts=4, group=4),
    Setup("unique", "unique"),
)}


@dataclass(frozen=True)
class Arm:
    """A credit source in one advantage form, as config keys (`advantage`, `credit`, and the
    source's own section)."""

    advantage: str
    form: str = "reweight"
    options: dict = field(default_factory=dict)  # e.g. {"mc": {"rollouts": 1}}

    def config(self) -> dict:
        credit = {"form": self.form, **({"shuffled": "oracle"}
                                        if self.advantage == "shuffled" else {})}
        return {"advantage": self.advantage, "credit": credit, **self.options}


def _both_forms(name: str, advantage: str, options: dict | None = None) -> dict[str, Arm]:
    return {name: Arm(advantage, "reweight", options or {}),
            f"{name}-sr": Arm(advantage, "segment-rewards", options or {})}


# Monte Carlo: provisional until the power amendment fixes it from timings (4 rollouts per
# boundary as in the earlier study; on `long` at most 8 boundaries rolled out, V interpolated
# between them, `mc.max_boundaries`). `cheap`: the value source the cost study recommends,
# else Monte Carlo with one rollout per boundary (the protocol).
MC_OPTIONS = {"mc": {"rollouts": 4, "max_boundaries": 8}}
CHEAP_FALLBACK = {"mc": {"rollouts": 1, "max_boundaries": 8}}
FIRST_ERROR = {"oracle": {"span": "first"}}

ARMS: dict[str, Arm] = {
    "grpo": Arm("grpo"),
    **_both_forms("oracle", "oracle"),
    **_both_forms("shuffled", "shuffled"),
    # The first-error oracle (amendment 3): −1 on a wrong completion's first wrong line only;
    # `shuffled-first` permutes its rewards, the control the main study pairs with it.
    **_both_forms("oracle-first", "oracle", FIRST_ERROR),
    **_both_forms("shuffled-first", "shuffled", FIRST_ERROR),
    **_both_forms("rredcot", "rredcot"),
    **_both_forms("mc", "mc", MC_OPTIONS),
    **_both_forms("cheap", "mc", CHEAP_FALLBACK),
    # The estimator the earlier study's `rredcot` arm ran (seeds 0-7 for certain) before v̂'s
    # default became every known path matched by content: the confirmatory run's.
    "rredcot-earlier": Arm("rredcot", "reweight", {"rredcot": {
        "references": "solution", "solution_part": "remaining", "empty_part": "keep"}}),
}


def problem_files(setup: Setup, data: Path) -> dict[str, Path]:
    """The setup's train, dev and test problems as JSONL files (written once): the first
    `TRAIN_PROBLEMS` / `EVAL_PROBLEMS` of the regime's splits with at least `min_steps` steps."""
    from cotcredit.bench.regimes import get_regime
    from cotcredit.bench.regimes.base import write_problems

    regime = get_regime(setup.regime)
    files = {}
    for split, n in (("train", TRAIN_PROBLEMS), ("dev", EVAL_PROBLEMS), ("test", EVAL_PROBLEMS)):
        path = data / setup.data_name / f"{split}.jsonl"
        if not path.is_file():
            write_problems(_first(regime, split, n, setup.min_steps), path)
        files[split] = path
    return files


def _first(regime, split: str, n: int, min_steps: int | None) -> list:
    """The first `n` problems of `split` with at least `min_steps` steps (all: None)."""
    if not min_steps:
        return regime.problems(split, n)
    size = regime.pools.get(split, 3 * n)
    while True:
        keep = [p for p in regime.problems(split, size) if len(p.meta["steps"]) >= min_steps]
        if len(keep) >= n or split in regime.pools:
            if len(keep) < n:
                raise ValueError(f"{regime.name} {split}: {len(keep)} problems with at least "
                                 f"{min_steps} steps, {n} wanted")
            return keep[:n]
        size *= 2


def run_dir(out: Path, phase: str, setup: str, arm: str, seed: int) -> Path:
    return out / "runs" / phase / setup / f"{arm}-seed{seed}"


def evaluated(run: Path, split: str) -> bool:
    """Whether `run`'s held-out accuracy on `split` is written (the last thing a run does)."""
    return (run / f"heldout_{split}.json").is_file()


def run_config(out: Path, phase: str, setup: Setup, arm: str, seed: int, steps: int,
               save_every: int = 50) -> Path:
    """The run's config file (paths relative to it, as `cotcredit train` reads them)."""
    from cotcredit.bench.regimes import checkpoint
    from studies.training.run_study import base_config

    files = problem_files(setup, out / "data")
    folder = out / "configs" / phase / setup.name
    folder.mkdir(parents=True, exist_ok=True)
    rel = lambda p: os.path.relpath(Path(p).resolve(), folder)  # noqa: E731
    cfg = base_config()
    cfg.update({
        "model": rel(checkpoint(setup.regime)),
        "train_file": rel(files["train"]),
        "output_dir": rel(run_dir(out, phase, setup.name, arm, seed)),
        "seed": seed,
        "oracle": {"regime": setup.regime},
    })
    for key, value in ARMS[arm].config().items():
        cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and key in cfg else value
    cfg["grpo"] = {**cfg["grpo"], "num_generations": setup.group,
                   "per_device_train_batch_size": setup.prompts * setup.group,
                   "max_completion_length": setup.max_tokens, "max_steps": steps,
                   "save_steps": save_every}
    path = folder / f"{arm}-seed{seed}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return path
