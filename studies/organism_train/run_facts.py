"""Figures of the organism training study that no summary table holds: run_facts.json.

    python -m studies.organism_train.run_facts        # after make train-study

- Where the heaviest penalty lands, per arm, at the final checkpoint (weights.csv) and at the
  starting model (weights_start.csv): hits, wrong completions, the mean chance and the
  one-sided binomial p of that many hits or more at that chance.
- Training seconds per run (the sum of `step_seconds` in metrics.jsonl; evaluations and
  process starts not included) and their total.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
from scipy.stats import binomtest

from studies.organism_train.run_study import HERE, heaviest_penalty_hits, read_metrics


def penalty_hits(weights: Path) -> dict[str, dict]:
    """Per arm: wrong completions whose heaviest penalty touches the first wrong step."""
    frame = pd.read_csv(weights)
    out = {}
    for arm, rows in frame.groupby("arm"):
        hits = heaviest_penalty_hits(rows)
        if not hits:
            continue
        k, n = sum(h for h, _ in hits.values()), len(hits)
        chance = sum(c for _, c in hits.values()) / n
        p = binomtest(k, n, chance, alternative="greater").pvalue
        out[str(arm)] = {"hits": int(k), "completions": n, "chance": round(chance, 3),
                         "binomial_p_one_sided": float(f"{p:.2g}")}
    return out


def run_seconds(runs: Path) -> dict[str, float]:
    """Training seconds of each run folder under `runs`."""
    out = {}
    for run in sorted(p for p in runs.iterdir() if (p / "metrics.jsonl").is_file()):
        out[run.name] = round(sum(r.get("step_seconds") or 0.0
                                  for r in read_metrics(run / "metrics.jsonl")), 1)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="study folder (default: this one)")
    args = ap.parse_args(argv)
    facts: dict = {}
    for name, key in (("weights.csv", "final_checkpoint_seed0"),
                      ("weights_start.csv", "starting_model")):
        if (args.out / name).is_file():
            facts[f"heaviest_penalty_{key}"] = penalty_hits(args.out / name)
    if (args.out / "runs").is_dir():
        seconds = run_seconds(args.out / "runs")
        facts["train_seconds_per_run"] = seconds
        facts["train_seconds_total"] = round(sum(seconds.values()), 1)
    (args.out / "run_facts.json").write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
