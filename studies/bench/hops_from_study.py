"""The `hops` column of the full run from the lookup study's tables (PROTOCOL.md, amendments).

    python -m studies.bench.hops_from_study [--run studies/bench/run]

The lookup study (studies/lookup_study/) scored the same 240 held-out `hops` traces that the
bench's `hops` test split holds (its sampled responses, relabelled by the regime's checker),
on the same segmentation (one segment per reasoning line) and with the same methods: R̂ + v̂,
R̂ and leave-one-out on all 240; Shapley, integrated gradients and Monte Carlo (24 rollouts per
boundary, at most 96 new tokens, cut-off rollouts wrong, every rollout saved) on the first 60.
Scoring them again with SmolLM2 on this machine takes hours, so the bench's metrics
(`cotcredit.bench.metrics.regime_metrics`) are computed here from those tables, with the labels
of the bench's `hops` test set. There is no development split: the best baseline of each metric
is chosen on the held-out split (the leaderboard says "chosen on test"), so for `hops` only the
paired differences with `refdiff` and `entropy`, fixed in advance, are confirmatory.

The value-estimate study's variants, the default v̂ among them, were scored on the same traces
and segmentation with the embedded model (`value_variants.py`, tables in `hops_value/`); they
join the rows when their tables are there.

Writes `<run>/hops/test/metrics.csv` and returns the stacked metrics and the regime's facts for
the leaderboard (`studies/bench/full.py` merges them with the other regimes').
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STUDY = ROOT / "studies" / "lookup_study"
#: The value-estimate variants scored on the same traces (studies/bench/value_variants.py).
VARIANTS = HERE / "hops_value"
#: The study's tables and the methods each holds (attr.parquet also holds leave-one-out on its
#: first 60 traces: the 240-trace table is the one used).
TABLES = {"rredcot.parquet": ("rredcot",), "rredcot_rhat.parquet": ("rredcot-rhat",),
          "loo.parquet": ("loo",), "attr.parquet": ("shapley", "gradient-ig"),
          "mc.parquet": ("mc",)}
N_BOOT, SEED, SPLITS = 2000, 0, 20
NOTES = [
    "hops: the methods scored from the lookup study's tables on the same 240 held-out traces "
    "and segmentation (not recomputed: hours of SmolLM2 on this machine); Monte Carlo 24 rollouts "
    "per boundary (at most 96 new tokens) and Shapley / integrated gradients (16 steps) on the "
    "first 60 traces; no development split, so the best baseline is chosen on the held-out "
    "split and only the differences with refdiff and entropy are confirmatory.",
]


def hops_metrics(run: Path, cache: Path | None = None) -> tuple[pd.DataFrame, dict]:
    """The `hops` test metrics (stacked like ``BenchResult.results``) and its facts."""
    from cotcredit.bench.metrics import labels_frame, regime_metrics
    from cotcredit.bench.regimes import get_regime
    from cotcredit.bench.traces import default_folder
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.baselines import departures_from_traces
    from cotcredit.report.rollouts import counts_from_rollouts, read_rollouts
    from studies.bench.value_variants import alias_rows, same_as

    traces = (cache or default_folder()) / "hops" / "test" / "traces.jsonl"
    records = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]
    where = run / "hops" / "test"
    where.mkdir(parents=True, exist_ok=True)
    (where / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    scores = pd.concat([load_scores([STUDY / name], methods=list(methods))
                        for name, methods in TABLES.items()], ignore_index=True)
    variants = sorted(VARIANTS.glob("*.parquet"))  # value_variants.py: the same traces
    if variants:
        scores = alias_rows(pd.concat([scores, load_scores(variants)], ignore_index=True),
                            records)
    counts = counts_from_rollouts(read_rollouts(STUDY / "rollouts.parquet"))
    m = regime_metrics(scores, labels_frame(records), departures=departures_from_traces(records),
                       counts=counts, segments=pd.read_parquet(STUDY / "segments.parquet"),
                       n_boot=N_BOOT, seed=SEED, splits=SPLITS)
    m.table.to_csv(where / "metrics.csv", index=False)
    regime = get_regime("hops")
    facts = {"description": regime.description, "hypothesis": regime.hypothesis,
             "size": {"problems": len(records), "samples": 1, "rollouts": 24,
                      "source": "studies/lookup_study"},
             "counts": {k: v.get("erroneous", v.get("traces", 0)) for k, v in m.counts.items()},
             "left_out": {k: {r: n for r, n in v.items() if r not in ("erroneous", "traces")
                              and n} for k, v in m.counts.items()},
             "notes": [*NOTES, *m.notes]}
    same = same_as(records) if variants else {}
    if same:
        facts["notes"].insert(1, "hops: the value-estimate variants scored on the same traces "
                              "(studies/bench/hops_value/); every trace lists one reference and "
                              "no problem has a second response, so these compute the same "
                              "probes and are shown with the same scores: "
                              + ", ".join(f"{a} = {b}" for a, b in same.items()))
    return m.table.assign(regime="hops", split="test"), facts


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    args = ap.parse_args(argv)
    table, facts = hops_metrics(args.run)
    print(table.loc[(table["metric"] == "localization") & (table["statistic"] == "top1"),
                    ["method", "value", "ci_low", "ci_high", "n"]].to_string(index=False))
    print(json.dumps(facts["counts"]))


if __name__ == "__main__":
    main()
