"""Which machine each main-study run trained on (amendment 7), and the primary comparisons
split by it, outside the plan.

Each start or resume of a run appends the machine to `<run>/machine.json`; `summary` writes
every run's machines to the tracked `<phase>_machines.csv` (a run whose folder is gone keeps
the label that file recorded; a run recorded before amendment 7 has none and gets `BEFORE`:
the machines of amendments 4-5, whose check reproduced the recorded run to the last digit).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

BEFORE = "A (before amendment 7)"


def this_machine() -> dict:
    """The CPU model, torch's CPU kernels (`get_cpu_capability`: AVX2, AVX512, ...) and torch
    version: what decides the last rounding bit of a seeded single-thread run."""
    import torch

    cpu = platform.processor() or platform.machine()
    info = Path("/proc/cpuinfo")
    if info.is_file():
        names = [line.split(":", 1)[1].strip() for line in info.read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cpu": cpu, "capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__}


def note_machine(run: Path, resume: bool) -> None:
    """Append this machine to `run`'s machine.json (a list: one entry per start or resume)."""
    path = run / "machine.json"
    entries = json.loads(path.read_text()) if path.is_file() else []
    entries.append({**this_machine(), "resume": resume})
    run.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1) + "\n")


def label(entries: list[dict]) -> str:
    """One run's machines as a label: 'AMD EPYC (AVX2)', joined by ' + ' when it resumed on
    another machine."""
    names = dict.fromkeys(f"{e['cpu']} ({e['capability']})" for e in entries)
    return " + ".join(names)


def machines_table(out: Path, phase: str, table):
    """Each run of `table` (regime, arm, seed) with its `machine` label, from its folder's
    machine.json, else from the tracked `<phase>_machines.csv`, else `BEFORE`."""
    import pandas as pd

    from studies.training_regime.setups import run_dir

    path = out / f"{phase}_machines.csv"
    known = {}
    if path.is_file():
        old = pd.read_csv(path)
        known = {(r.regime, r.arm, int(r.seed)): r.machine for r in old.itertuples()}
    rows = []
    for r in table[["regime", "arm", "seed"]].itertuples(index=False):
        note = run_dir(out, phase, r.regime, r.arm, r.seed) / "machine.json"
        machine = (label(json.loads(note.read_text())) if note.is_file()
                   else known.get((r.regime, r.arm, int(r.seed)), BEFORE))
        rows.append({"regime": r.regime, "arm": r.arm, "seed": int(r.seed), "machine": machine})
    return pd.DataFrame(rows, columns=["regime", "arm", "seed", "machine"])


def machine_split(table, machines, plan: dict, n: int) -> str:
    """Amendment 7's description (not a decision): each primary comparison over the plan's
    first n seeds, split into the seeds whose two arms both trained before amendment 7 and the
    others: the number of seeds, mean and SD of arm − grpo in `online`, and the gap between the
    two means with its Welch 95% interval (the parts' SDs differ, so no pooled variance)."""
    import numpy as np
    from scipy import stats

    from studies.training_regime.main_plan import LAST, SOURCES
    from studies.training_regime.summarize import differences

    roles, seeds = plan["roles"], plan["seeds"][:n]
    before = {(r.arm, r.seed) for r in machines.itertuples() if r.machine == BEFORE}
    lines = [f"Each primary comparison over seeds {seeds[0]}-{seeds[-1]} by machine "
             "(amendment 7): seeds whose two arms both trained before it, and the others:\n",
             "| comparison | before: seeds | before: mean | before: SD | others: seeds "
             "| others: mean | others: SD | before − others [Welch 95%] |",
             "|---" * 8 + "|"]
    for role in ("oracle", *SOURCES, *LAST):
        arm = roles[role]
        d = differences(table, plan["setup"], arm, roles["grpo"], seeds)
        if d.empty:
            continue
        old = np.array([(arm, s) in before and (roles["grpo"], s) in before for s in d.index])
        parts, cells = (d[old], d[~old]), []
        for part in parts:
            cells += [str(len(part)), f"{part.mean():+.3f}" if len(part) else "–",
                      f"{part.std():.3f}" if len(part) > 1 else "–"]
        gap = "–"
        if min(len(part) for part in parts) > 1:
            low, high = stats.ttest_ind(*parts, equal_var=False).confidence_interval(0.95)
            gap = f"{parts[0].mean() - parts[1].mean():+.3f} [{low:+.3f}, {high:+.3f}]"
        cells.append(gap)
        lines.append(f"| {arm} − {roles['grpo']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
