"""Re-checking RREDCoT's `--value` default on the organism's development split.

    python -m studies.vhat_selection.organism.run_check          # both regimes, resumable
    python -m studies.vhat_selection.organism.run_check --traces 4 --rollouts 2 --out DIR

Protocol, written before this check was run:

- Why. The default (`--value rhat`, R̂ alone) was chosen on the development half of the lookup
  Monte Carlo study (`studies/vhat_selection/`): the best v̂ form there, R̂ + v̂ over the
  remaining reference steps (`--value both --solution-part remaining`), gained +0.046
  [−0.070, +0.175] in agreement with MC, not separated from 0, so R̂ alone stayed. Not blind:
  the organism study's held-out results were seen before this check was written (on its test
  traces R̂ + v̂ localizes the first wrong step 0.77 against R̂'s 0.26 on `full`). Those test
  traces are not used to decide; this check uses the organism's development split, which no
  method choice has used (the training only used its first 100 problems as a stopping rule).
- Data: the 300 problems of studies/organism/problems/dev.jsonl; for each checkpoint
  (`full`, `early`) one on-policy trace each at temperature 1, seed 0, at most 64 new tokens;
  labels from the organism checker; one segment per reasoning line; exit string
  "The answer is " (as in the organism study).
- Arms: `rhat` (R̂ alone, the default); the candidate `both` (R̂ + v̂, remaining steps, raw);
  `both --length-norm` reported alongside, not a candidate (it did worse than R̂ alone on the
  lookup development traces: −0.134 [−0.316, +0.031]). Monte Carlo with 32 rollouts per
  boundary at temperature 1 (48 new tokens) as the agreement reference: fewer than the
  study's 128, which attenuates every arm's agreement alike and keeps the check short.
- Measures, each a paired difference candidate − R̂ alone over traces, 95% percentile
  bootstrap (2000 resamples, seed 0): (1) top-1 localization of the first wrong step on the
  traces with a wrong step and a wrong answer (the organism study's rule, ties count 1/m);
  (2) mean per-trace Spearman of value differences with MC (`cotcredit compare`'s paired
  table).
- Decision rule: the candidate becomes the default if, in both regimes, both paired
  differences have a lower 95% bound above 0 (and it did not hurt on the lookup development
  traces: its interval there reaches above 0, already true). Otherwise R̂ alone stays.
  `decision.json` records the figures and the outcome.

Tracked (the rest is regenerated): decision.json and, per checkpoint, traces_summary.json,
steps.json and comparison.md (the text of its `cotcredit compare` report).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from studies.organism.problems import problem_file
from studies.organism_study import run_study as org
from studies.summaries import write_comparison

HERE = Path(__file__).resolve().parent
ARMS = {"rredcot-rhat": "R̂ alone (the default)", "rredcot": "R̂ + v̂, remaining (candidate)",
        "rredcot-norm": "R̂ + v̂, remaining, per-token (reported only)"}
CANDIDATE, REFERENCE = "rredcot", "rredcot-rhat"


def run_regime(out: Path, model: str, args) -> dict:
    """Traces, segments, the three arms and MC for one checkpoint; the paired figures."""
    out.mkdir(parents=True, exist_ok=True)
    log = org.read_log(out)
    lines = problem_file("dev").read_text().splitlines(keepends=True)[: args.traces]
    (out / "problems.jsonl").write_text("".join(lines))
    org.run(out, "traces", ["generate", "problems.jsonl", "-o", "raw_traces.jsonl", "--samples",
                            "1", "--temperature", "1", "--max-new-tokens", "64", "--seed", "0",
                            "--model", model, "-q"], log)
    labels = org.label_traces(out / "raw_traces.jsonl", out / "traces.jsonl")
    org.segment_by_lines(out, labels, model, log)
    org.write_traces_summary(out, labels)
    common = ["--model", model, "--segments-file", "segments.parquet", "--on-error", "skip",
              "-q"]
    forcing = ["--exit-string", org.EXIT]
    vhat = ["--value", "both", "--solution-part", "remaining"]
    org.run(out, "rhat", ["redistribute", "traces.jsonl", "-o", "rredcot_rhat.parquet",
                          "--value", "rhat", "--label", "rredcot-rhat", *common, *forcing],
            log)
    org.run(out, "both", ["redistribute", "traces.jsonl", "-o", "rredcot.parquet", *vhat,
                          *common, *forcing], log)
    org.run(out, "both, per-token", ["redistribute", "traces.jsonl", "-o",
                                     "rredcot_norm.parquet", *vhat, "--length-norm", "--label",
                                     "rredcot-norm", *common, *forcing], log)
    org.run(out, "mc", ["mc-baseline", "traces.jsonl", "-o", "mc.parquet", "--rollouts",
                        str(args.rollouts), "--temperature", "1", "--max-new-tokens", "48",
                        "--batch-size", "128", *common], log)
    org.run(out, "compare", ["compare", "--scores", "rredcot_rhat.parquet", "rredcot.parquet",
                             "rredcot_norm.parquet", "mc.parquet", "-o", "report",
                             "--bootstrap", str(args.bootstrap), "--overwrite", "-q"], log,
            always=True)
    write_comparison(out, ["rredcot_rhat.parquet", "rredcot.parquet", "rredcot_norm.parquet",
                           "mc.parquet"])
    return figures(out, labels, args.bootstrap)


def figures(out: Path, labels: pd.DataFrame, boot: int) -> dict:
    """Localization and MC agreement per arm, and each arm's paired difference from R̂ alone."""
    ids, hits, _ = org.localization_hits(out, labels)
    rng = np.random.default_rng(0)
    paired = pd.read_parquet(out / "report" / "paired.parquet")
    corr = pd.read_parquet(out / "report" / "correlations.parquet")
    result: dict = {"localization_traces": len(ids)}
    for arm in ARMS:
        d = hits[arm] - hits[REFERENCE]
        idx = rng.integers(0, len(d), size=(boot, len(d)))
        means = d[idx].mean(axis=1)
        row = paired[(paired.method == arm) & (paired.versus == REFERENCE)
                     & (paired.statistic == "mean_spearman") & (paired.reference == "mc")]
        mine = corr[(corr.trace_id == "all") & (corr.statistic == "mean_spearman")
                    & (((corr.method_a == arm) & (corr.method_b == "mc"))
                       | ((corr.method_a == "mc") & (corr.method_b == arm)))]
        result[arm] = {
            "top1": round(float(hits[arm].mean()), 3),
            "top1_minus_rhat": [round(float(d.mean()), 3),
                                round(float(np.quantile(means, 0.025)), 3),
                                round(float(np.quantile(means, 0.975)), 3)],
            "mc_spearman": round(float(mine.value.iloc[0]), 3) if len(mine) else None,
            "mc_spearman_minus_rhat": ([round(float(row.difference.iloc[0]), 3),
                                        round(float(row.ci_low.iloc[0]), 3),
                                        round(float(row.ci_high.iloc[0]), 3)]
                                       if len(row) else [0.0, 0.0, 0.0]),
        }
    return result


def decide(by_regime: dict[str, dict]) -> dict:
    """The protocol's rule: the candidate wins only if every lower bound is above 0."""
    bounds = {r: (f[CANDIDATE]["top1_minus_rhat"][1], f[CANDIDATE]["mc_spearman_minus_rhat"][1])
              for r, f in by_regime.items()}
    wins = all(lo > 0 for pair in bounds.values() for lo in pair)
    return {"candidate": "--value both --solution-part remaining", "lower_bounds": bounds,
            "default": "--value both" if wins else "--value rhat (unchanged)"}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--traces", type=int, default=300)
    ap.add_argument("--rollouts", type=int, default=32)
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--models", type=Path, default=None,
                    help="folder holding model-full/ and model-early/ (default: the shipped "
                         "checkpoints, studies.organism.model)")
    args = ap.parse_args(argv)
    by_regime = {}
    for regime in org.REGIMES:
        out = args.out.resolve() / regime
        by_regime[regime] = run_regime(out, org.model_path(args, regime, out), args)
    decision = {"figures": by_regime, **decide(by_regime)}
    (args.out / "decision.json").write_text(json.dumps(decision, indent=1) + "\n")
    print(json.dumps(decision, indent=1))


if __name__ == "__main__":
    main()
