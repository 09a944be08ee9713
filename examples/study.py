"""A small study as it would go into a paper: does RREDCoT agree with Monte Carlo values, and how
does it differ from leave-one-out attribution? Runs on the embedded model and the curated traces.

    python examples/study.py                  # writes examples/study/ (tables, report, figures)
    python examples/study.py --rollouts 16    # tighter Monte Carlo values, slower

Everything goes through the public API; the results are then read back with pandas exactly as a
user would for a paper.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import cotcredit
from cotcredit.compare import compare_scores, method_options, run_methods
from cotcredit.lm import load_scorer
from cotcredit.segmentation import SegmentOptions

HERE = Path(__file__).parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=Path, default=HERE / "curated_traces.jsonl")
    ap.add_argument("--out", type=Path, default=HERE / "study")
    ap.add_argument("--segments", type=int, default=5)
    ap.add_argument("--rollouts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()

    scorer = load_scorer()  # the embedded SmolLM2-135M-Instruct
    opts = method_options("rredcot,mc,loo", sets=[f"mc.rollouts={args.rollouts}",
                                                   f"mc.max_new_tokens={args.max_new_tokens}",
                                                   "mc.temperature=0.7"])
    summary, files = run_methods(args.traces, scorer, opts, args.out,
                                 segment_options=SegmentOptions(segments=args.segments), progress=True)
    result = compare_scores(files, args.out, reference="mc", n_boot=2000)
    print(f"cotcredit {cotcredit.__version__}: {len(summary.scored)} traces scored, "
          f"{len(summary.resumed)} resumed; report in {result.files.html}")

    # What a user does next: plain pandas on the Parquet files.
    scores = pd.concat([pd.read_parquet(f) for f in files])
    wide = scores.pivot_table(index=["trace_id", "segment"], columns="method", values="score")
    print("\nPer-segment credit (first trace):")
    print(wide.loc[wide.index.get_level_values(0)[0]].round(3).to_string())
    corr = pd.read_parquet(args.out / "correlations.parquet")
    agg = corr[(corr.trace_id == "all") & corr.statistic.isin(["mean_spearman", "top1_agreement"])]
    print("\nAgreement across traces:")
    print(agg[["method_a", "method_b", "statistic", "value", "ci_low", "ci_high", "n"]].round(3).to_string(index=False))
    rr = scores[scores.method == "rredcot"]
    print("\nRREDCoT return equivalence (sum of segment rewards = outcome):")
    print(rr.groupby("trace_id").agg(sum_of_rewards=("score", "sum"), outcome=("outcome", "first")).round(6).to_string())


if __name__ == "__main__":
    main()
