"""RREDCoT's default v̂ against the earlier one on the benchmark's held-out traces, paired.

    python -m studies.bench.value_default [--run studies/bench/run]

The leaderboard compares each method with the baselines; this compares the two R̂ + v̂ rows
with each other: `rredcot-siblings` (the method's default since the value-estimate study,
studies/value/: every known path, matched by content, the last boundary counted once) minus
`rredcot` (the earlier default: the one reference's remaining steps by position), per trace on
the same traces, credit = value differences as on the leaderboard, with 95% bootstrap intervals
(2,000 resamples, seed 0). The default was chosen on the `unique` and `multipath` development
splits before `long` had a checkpoint, so `long` and `forecast` are data it was not chosen on.
Writes value_default.md next to this script.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REGIMES = ("unique", "multipath", "forecast", "long")
METRICS = ("localization", "blame_departure", "blame_wrong_step")
NEW, OLD = "rredcot-siblings", "rredcot"


def paired(where: Path) -> pd.DataFrame:
    """One row per metric: the default's rate, the earlier one's, and their paired difference."""
    from cotcredit.bench.metrics import labels_frame, target_offsets
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.credit import value_credit
    from cotcredit.report.localization import localize

    records = [json.loads(line) for line in (where / "traces.jsonl").read_text().splitlines()
               if line.strip()]
    scores = value_credit(load_scores([where / f"{OLD}.parquet", where / f"{NEW}.parquet"]),
                          "differences")
    offsets = target_offsets(labels_frame(records))
    rows = []
    for metric in METRICS:
        if offsets[metric].empty:
            continue
        t = localize(scores, offsets[metric], [NEW, OLD], baselines=[OLD], n_boot=2000,
                     seed=0).table.set_index(["method", "statistic"])
        if (NEW, f"top1_minus_{OLD}") not in t.index:
            continue
        d = t.loc[(NEW, f"top1_minus_{OLD}")]
        rows.append({"metric": metric, "n": int(d["n"]), NEW: t.loc[(NEW, "top1"), "value"],
                     OLD: t.loc[(OLD, "top1"), "value"], "difference": d["value"],
                     "low": d["ci_low"], "high": d["ci_high"]})
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    args = ap.parse_args(argv)
    lines = ["# RREDCoT's default v̂ against the earlier one (held-out, paired)", "",
             f"`{NEW}` (the default) minus `{OLD}` (the earlier default), per trace; top-1 rates "
             "(for false blame lower is better). `python -m studies.bench.value_default`.", "",
             f"| regime | metric | n | {NEW} | {OLD} | difference [95% CI] |",
             "|---|---|---|---|---|---|"]
    for regime in REGIMES:
        where = args.run / regime / "test"
        if not (where / f"{NEW}.parquet").exists():
            continue
        for r in paired(where).to_dict("records"):
            lines.append(f"| {regime} | {r['metric']} | {r['n']} | {r[NEW]:.3f} | {r[OLD]:.3f} "
                         f"| {r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] |")
    (HERE / "value_default.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
