"""One row per run of the lookup training study, and one per mode over its runs: runs.csv.

    python -m studies.train.run_facts          # after make train-study-lookup

Per run (seed "all": the mode's runs pooled): held-out accuracy before and after; steps; the
steps RREDCoT scored (a group is scored only when its rewards vary) and its scoring seconds on
them (mean, min, max, mean per completion); its seconds averaged over all steps; the median of
`rredcot_seconds` over all steps (a statistic of a two-valued series: the scored steps and the
near-zero others) and the median step. Read from each run's eval.json and metrics.jsonl.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pandas as pd

from cotcredit.training.metrics import read_metrics

HERE = Path(__file__).resolve().parent
SCORED = 0.1  # seconds: a step whose RREDCoT scoring took longer scored a group


def steps_of(run: Path) -> list[dict]:
    return [m for m in read_metrics(run / "metrics.jsonl") if "step_seconds" in m]


def row(mode: str, seed: str, evals: list[dict], metrics: list[dict], per_step: int) -> dict:
    """The figures of runs of one mode (one run, or several pooled)."""
    scoring = [m.get("rredcot_seconds") or 0.0 for m in metrics]
    scored = [s for s in scoring if s > SCORED]

    def stat(fn, values):
        return round(fn(values), 2) if values else None

    return {
        "mode": mode, "seed": seed,
        "eval_before": stat(statistics.mean, [e["before"]["accuracy"] for e in evals]),
        "eval_after": stat(statistics.mean, [e["after"]["accuracy"] for e in evals]),
        "steps": len(metrics),
        "step_seconds_median": stat(statistics.median, [m["step_seconds"] for m in metrics]),
        "scored_steps": len(scored),
        "scoring_seconds_mean": stat(statistics.mean, scored),
        "scoring_seconds_min": stat(min, scored),
        "scoring_seconds_max": stat(max, scored),
        "scoring_seconds_per_completion": (round(statistics.mean(scored) / per_step, 2)
                                           if scored else None),
        "scoring_seconds_per_step_mean": stat(statistics.mean, scoring),
        "rredcot_seconds_median": stat(statistics.median, scoring),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="study folder (default: this one)")
    ap.add_argument("--completions-per-step", type=int, default=4)
    args = ap.parse_args(argv)
    runs = sorted(p for p in (args.out / "runs").iterdir() if (p / "eval.json").is_file())
    by_mode: dict[str, list[Path]] = {}
    for run in runs:
        by_mode.setdefault(run.name.rsplit("-seed", 1)[0], []).append(run)
    rows = []
    for mode, dirs in by_mode.items():
        evals = [json.loads((d / "eval.json").read_text()) for d in dirs]
        steps = [steps_of(d) for d in dirs]
        rows += [row(mode, d.name.rsplit("-seed", 1)[1], [e], m, args.completions_per_step)
                 for d, e, m in zip(dirs, evals, steps)]
        rows.append(row(mode, "all", evals, sum(steps, []), args.completions_per_step))
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "runs.csv", index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
