"""Amendment 5's check that a new machine continues the recorded runs: train one recorded run
again and compare its row with the one recorded. `<phase>_reproduce.json` keeps every
machine's check, oldest first (amendment 7: the first, amendment 5's, names no machine).

    python -m studies.training_regime.run_study reproduce main --arm grpo --seed 100
"""

from __future__ import annotations

import json
from pathlib import Path


def reproduce(out: Path, phase: str, arm: str, seed: int, steps: int) -> dict:
    """Train the recorded run (`arm`, `seed`) of `phase` again in `<out>/runs/reproduce/` and
    compare its row with the recorded one (appended to `<phase>_reproduce.json`)."""
    from studies.training.summarize import run_row
    from studies.training_regime import run_study  # its run_one trains the run, as it did
    from studies.training_regime.machines import this_machine
    from studies.training_regime.setups import SETUPS, run_dir
    from studies.training_regime.summarize import recorded_runs

    if phase not in ("main", "confirm"):
        raise SystemExit(f"reproduce: a run of the main study or the confirmatory one, not {phase}")
    plan = json.loads((out / "main_plan.json").read_text()) if phase == "main" else {}
    name = plan.get("setup", run_study.CONFIRM_SETUP)
    recorded = recorded_runs(out, phase, steps)
    row = recorded[(recorded.regime == name) & (recorded.arm == arm) & (recorded.seed == seed)]
    if row.empty:
        raise SystemExit(f"{out / f'{phase}_runs.csv'}: no finished {name} {arm} seed {seed}")
    import torch

    torch.set_num_threads(1)
    again = out / "runs" / "reproduce"  # ignored, as runs/ is
    if (out / "data").is_dir() and not (again / "data").exists():  # the study's problem files
        again.mkdir(parents=True, exist_ok=True)
        (again / "data").symlink_to(out / "data")
    run_study.run_one(again, phase, SETUPS[name], arm, seed, steps, "test",
                      f"[reproduce] {arm} {seed}")
    new = run_row(run_dir(again, phase, name, arm, seed), "test", steps)
    old = row.iloc[0].to_dict()
    keys = ("online", "first_steps", "final")
    result = {"setup": name, "arm": arm, "seed": seed, "recorded": {k: old[k] for k in keys},
              "again": {k: new[k] for k in keys},
              "equal": all(abs(old[k] - new[k]) < 1e-9 for k in keys),
              "step_seconds": {"recorded": old["step_seconds"], "again": new["step_seconds"]},
              "machine": this_machine()}
    path = out / f"{phase}_reproduce.json"
    checks = json.loads(path.read_text()) if path.is_file() else []
    checks = [checks] if isinstance(checks, dict) else checks
    path.write_text(json.dumps([*checks, result], indent=1) + "\n")
    print(json.dumps(result), flush=True)
    return result
