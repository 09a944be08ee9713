"""The Monte Carlo study under each credit definition, from the checked-in tables (no model).

    python -m studies.mc_study.like_for_like         # prints like_for_like.md's table

Added after the study's results were seen. RREDCoT's rewards carry bookkeeping that MC's credits
do not: the first segment also gets g_0 and the last ζ − g_K, so that the rewards sum to the
outcome. `compare --credit` declares what is correlated: `differences` (the default: value
differences for both), `return` (both get their start value first and ζ − last value last) and
`score` (the tables as written: RREDCoT's rewards against MC's differences, what the first
report compared). This script runs `compare`'s analysis under each and prints the agreement with
MC and the paired differences that matter, against the position baseline among them.
"""

from __future__ import annotations

from pathlib import Path

from cotcredit.pipeline import load_scores
from cotcredit.report.compare import analyse
from cotcredit.report.format import fmt_ci

HERE = Path(__file__).resolve().parent
TABLES = ["rredcot.parquet", "mc.parquet", "attr.parquet"]


def main() -> None:
    scores = load_scores([HERE / t for t in TABLES], ["rredcot", "mc", "loo", "shapley"])
    lines = [
        "| --credit | rredcot vs mc | position (baseline) vs mc | rredcot − position | "
        "rredcot − loo | rredcot − shapley |",
        "|---|---|---|---|---|---|",
    ]
    for credit in ("differences", "return", "score"):
        corr = analyse(scores, credit=credit, baselines="position", n_boot=2000, seed=0,
                       checked=True, rollouts=HERE / "rollouts.parquet").correlations
        agg = corr.aggregates().set_index(["method_a", "method_b", "statistic"])
        paired = corr.paired.set_index(["method", "versus", "statistic"])

        def mean(a: str, agg=agg) -> str:
            hit = [k for k in ((a, "mc"), ("mc", a)) if (*k, "mean_spearman") in agg.index][0]
            r = agg.loc[(*hit, "mean_spearman")]
            return fmt_ci(r["value"], r["ci_low"], r["ci_high"])

        def diff(a: str, b: str, paired=paired) -> str:
            r = paired.loc[(a, b, "mean_spearman")]
            return fmt_ci(r["difference"], r["ci_low"], r["ci_high"])

        lines.append(f"| {credit} | {mean('rredcot')} | {mean('position')} | "
                     f"{diff('rredcot', 'position')} | {diff('rredcot', 'loo')} | "
                     f"{diff('rredcot', 'shapley')} |")
    text = ("Mean per-trace Spearman with mc and paired differences (95% bootstrap CI over "
            "traces, 2,000 resamples)\n\n" + "\n".join(lines) + "\n")
    (HERE / "like_for_like.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
