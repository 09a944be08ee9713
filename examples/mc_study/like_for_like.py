"""A supplementary analysis of the Monte Carlo study, added after its results were seen.

    python examples/mc_study/like_for_like.py        # prints like_for_like.md's table

RREDCoT's rewards are a redistribution of the outcome: by default the first segment also gets
g_0 (the value of the prompt alone) and the last also gets ζ − g_K, so the rewards sum to ζ.
Monte Carlo's credits are the differences V_k − V_(k−1) of its values alone. On the first and
last segments of a trace the two columns therefore measure different things. This script puts
RREDCoT's value differences g_k − g_(k−1) (columns g_after − g_before of the same table, no new
model run) next to Monte Carlo's, with the same statistics `compare` computes, so the study can
tell the estimates apart from the bookkeeping.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cotcredit.report.stats import correlate

HERE = Path(__file__).resolve().parent


def main() -> None:
    rredcot = pd.read_parquet(HERE / "rredcot.parquet")
    mc = pd.read_parquet(HERE / "mc.parquet")
    delta = rredcot.assign(method="rredcot-delta",
                           score=rredcot["g_after"] - rredcot["g_before"])
    keep = ["trace_id", "segment", "char_start", "char_end", "text", "method", "score"]
    scores = pd.concat([rredcot[keep], delta[keep], mc[keep]], ignore_index=True)
    agg = correlate(scores, n_boot=2000, seed=0).aggregates()

    def cell(a: str, statistic: str) -> str:
        hit = agg.loc[(agg["method_a"].isin([a, "mc"])) & (agg["method_b"].isin([a, "mc"]))
                      & (agg["method_a"] != agg["method_b"]) & (agg["statistic"] == statistic)]
        if hit.empty:
            return "–"
        r = hit.iloc[0]
        if pd.isna(r["ci_low"]):
            return f"{r['value']:.3f}"
        return f"{r['value']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"

    lines = [
        "| compared with mc | Spearman [95% CI] | Pearson [95% CI] | top-1 [95% CI] | "
        "early Spearman | late Spearman |",
        "|---|---|---|---|---|---|",
    ]
    for method, label in (("rredcot", "rredcot (rewards, the default)"),
                          ("rredcot-delta", "rredcot value differences g_k − g_(k−1)")):
        lines.append(
            f"| {label} | {cell(method, 'mean_spearman')} | {cell(method, 'mean_pearson')} | "
            f"{cell(method, 'top1_agreement')} | {cell(method, 'early_spearman')} | "
            f"{cell(method, 'late_spearman')} |"
        )
    text = "\n".join(lines) + "\n"
    (HERE / "like_for_like.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
