"""RREDCoT's default v̂ against the earlier one on the benchmark's held-out traces, paired.

    python -m studies.bench.value_default [--run studies/bench/run]

The leaderboard compares each method with the baselines; this compares the two R̂ + v̂ rows
with each other: `rredcot-siblings` (the method's default since the value-estimate study,
studies/value/: every known path, matched by content, the last boundary counted once) minus
`rredcot` (the earlier default: the one reference's remaining steps by position), per trace on
the same traces, credit = value differences as on the leaderboard, with 95% bootstrap intervals
(2,000 resamples, seed 0). The default was chosen on the `unique` and `multipath` development
splits before `long` had a checkpoint, so `long` and `forecast` are data it was not chosen on.
`hops` (added after the organism rows): the earlier default from the lookup study's table, the
default from `hops_value/` (value_variants.py), on the same 240 traces. MC tracking (mean
per-trace Spearman with Monte Carlo, paired) is read from each split's `metrics.csv`, as the
leaderboard computed it (`from_tables.py` writes them). Writes value_default.md next to this
script.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REGIMES = ("unique", "multipath", "forecast", "long", "hops")
METRICS = ("localization", "blame_departure", "blame_wrong_step")
NEW, OLD = "rredcot-siblings", "rredcot"


def tables(run: Path, regime: str, versus: str = OLD) -> tuple[Path, Path, Path]:
    """(the split folder with traces.jsonl and metrics.csv, the table of `versus`, the
    default's table) of a regime's held-out split."""
    where = run / regime / "test"
    if regime == "hops":
        from studies.bench.hops_from_study import STUDY, VARIANTS

        old = STUDY / f"{OLD}.parquet" if versus == OLD else VARIANTS / f"{versus}.parquet"
        return where, old, VARIANTS / f"{NEW}.parquet"
    return where, where / f"{versus}.parquet", where / f"{NEW}.parquet"


def tracking(where: Path, versus: str = OLD) -> dict | None:
    """The MC-tracking row (Spearman of each and the paired difference) from metrics.csv."""
    path = where / "metrics.csv"
    if not path.exists():
        return None
    m = pd.read_csv(path).query("metric == 'mc_tracking'").set_index(["method", "statistic"])
    if (NEW, f"spearman_minus_{versus}") not in m.index:
        return None
    d = m.loc[(NEW, f"spearman_minus_{versus}")]
    return {"metric": "mc_tracking (Spearman)", "n": int(d["n"]),
            NEW: m.loc[(NEW, "spearman"), "value"], "versus": m.loc[(versus, "spearman"), "value"],
            "difference": d["value"], "low": d["ci_low"], "high": d["ci_high"]}


def paired(where: Path, old: Path, new: Path, versus: str = OLD) -> pd.DataFrame:
    """One row per metric: the default's rate, the earlier one's, and their paired difference."""
    from cotcredit.bench.metrics import labels_frame, target_offsets
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.credit import value_credit
    from cotcredit.report.localization import localize

    records = [json.loads(line) for line in (where / "traces.jsonl").read_text().splitlines()
               if line.strip()]
    scores = value_credit(load_scores([old, new], methods=[versus, NEW]), "differences")
    offsets = target_offsets(labels_frame(records))
    rows = []
    for metric in METRICS:
        if offsets[metric].empty:
            continue
        t = localize(scores, offsets[metric], [NEW, versus], baselines=[versus], n_boot=2000,
                     seed=0).table.set_index(["method", "statistic"])
        if (NEW, f"top1_minus_{versus}") not in t.index:
            continue
        d = t.loc[(NEW, f"top1_minus_{versus}")]
        rows.append({"metric": metric, "n": int(d["n"]), NEW: t.loc[(NEW, "top1"), "value"],
                     "versus": t.loc[(versus, "top1"), "value"], "difference": d["value"],
                     "low": d["ci_low"], "high": d["ci_high"]})
    track = tracking(where, versus)
    return pd.DataFrame([*rows, *([track] if track else [])])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    ap.add_argument("--versus", default=OLD,
                    help="the row to pair the default with [default: the earlier default, "
                    "written to value_default.md; another row is printed only]")
    args = ap.parse_args(argv)
    versus = args.versus
    what = "the earlier default" if versus == OLD else "another v̂ variant"
    lines = [f"# RREDCoT's default v̂ against {what} (held-out, paired)", "",
             f"`{NEW}` (the default) minus `{versus}` ({what}), per trace; top-1 rates "
             "(for false blame lower is better). `python -m studies.bench.value_default"
             f"{'' if versus == OLD else ' --versus ' + versus}`.", "",
             f"| regime | metric | n | {NEW} | {versus} | difference [95% CI] |",
             "|---|---|---|---|---|---|"]
    for regime in REGIMES:
        where, old, new = tables(args.run, regime, versus)
        if not (new.exists() and old.exists() and (where / "traces.jsonl").exists()):
            continue
        for r in paired(where, old, new, versus).to_dict("records"):
            lines.append(f"| {regime} | {r['metric']} | {r['n']} | {r[NEW]:.3f} | {r['versus']:.3f} "
                         f"| {r['difference']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}] |")
    if versus == OLD:
        (HERE / "value_default.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
