"""Amendment 2's per-problem outcomes: each evaluated run's held-out evaluation redone with
its count per problem, for the paired bootstrap over problems.

    python -m studies.training_regime.run_study outcomes pilot
"""

from __future__ import annotations

import json
from pathlib import Path

from studies.training_regime.setups import SETUPS, problem_files


def problem_outcomes(out: Path, phase: str) -> None:
    """Each evaluated run's held-out correct count per problem, in heldout_<split>_problems.json:
    the evaluation of heldout_<split>.json redone (same checkpoint, problems, seed), its total
    checked against the stored one (amendment 2: the paired bootstrap over problems)."""
    import torch

    from studies.training.run_study import sampled_accuracy

    torch.set_num_threads(1)
    split = "dev" if phase == "pilot" else "test"
    for held in sorted((out / "runs" / phase).glob(f"*/*-seed*/heldout_{split}.json")):
        run, stored = held.parent, json.loads(held.read_text())
        path = run / f"heldout_{split}_problems.json"
        if path.is_file():
            continue
        setup, seed = SETUPS[run.parent.name], int(run.name.rsplit("-seed", 1)[1])
        result = sampled_accuracy(run / stored["checkpoint"],
                                  problem_files(setup, out / "data")[split], seed,
                                  setup.max_tokens, by_problem=True)
        result.update(checkpoint=stored["checkpoint"],
                      reproduces=result["correct"] == stored["correct"])
        path.write_text(json.dumps(result) + "\n")
        print(f"{run.parent.name} {run.name}: {result['correct']} correct, stored "
              f"{stored['correct']}", flush=True)
