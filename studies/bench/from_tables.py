"""Put regimes into the full run's leaderboard from the tables already in the run folder.

    python -m studies.bench.from_tables unique [--run studies/bench/run]

For a regime scored by an earlier version of the run whose tables a resumed bench refuses (the
methods' options gained fields since, so their run key differs although the scores are the
same computation), the metrics are recomputed here by the bench's own code
(`cotcredit.bench.metrics.regime_metrics`) from those tables and labels, written to
`<run>/<regime>/<split>/metrics.csv`, and the leaderboard files are rewritten with them
(the other regimes' rows as the run wrote them). `hops` is recomputed from the lookup study's
tables and the value variants' (`hops_from_study.py`). The value-estimate study's variants
(`value_variants.py`) join the leaderboard where their tables are. Then the tracked summary
(`summarize.py`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
SPLITS = ("dev", "test")
#: The value-estimate study's variants (value_variants.yaml), scored on the test splits.
VARIANTS = ("rredcot-drop", "rredcot-matched", "rredcot-suffixes", "rredcot-multi",
            "rredcot-multi-matched", "rredcot-multi-suffixes", "rredcot-multi-noisyor")
TABLES = ("rredcot", "rredcot-rhat", "rredcot-siblings", *VARIANTS, "loo", "shapley", "gradient",
          "mc")


def split_metrics(where: Path, n_boot: int = 2000, seed: int = 0, splits: int = 20):
    """The bench's metrics of one split from the tables in ``where``."""
    from cotcredit.bench.metrics import labels_frame, regime_metrics
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.baselines import departures_from_traces
    from cotcredit.report.rollouts import counts_from_rollouts, read_rollouts
    from studies.bench.value_variants import alias_rows

    records = [json.loads(line) for line in (where / "traces.jsonl").read_text().splitlines()
               if line.strip()]
    tables = [where / f"{t}.parquet" for t in TABLES if (where / f"{t}.parquet").exists()]
    counts = None
    if (where / "rollouts.parquet").exists():
        counts = counts_from_rollouts(read_rollouts(where / "rollouts.parquet"))
    m = regime_metrics(alias_rows(load_scores(tables), records), labels_frame(records),
                       departures=departures_from_traces(records), counts=counts,
                       segments=pd.read_parquet(where / "segments.parquet"), n_boot=n_boot,
                       seed=seed, splits=splits)
    m.table.to_csv(where / "metrics.csv", index=False)
    return m


def alias_notes(name: str, where: Path) -> list[str]:
    """The leaderboard's note on the variants shown under another's computation, if any."""
    from studies.bench.value_variants import same_as

    records = [json.loads(line) for line in (where / "traces.jsonl").read_text().splitlines()
               if line.strip()]
    same = same_as(records)
    if not same:
        return []
    pairs = ", ".join(f"{a} = {b}" for a, b in same.items())
    return [f"{name}: every trace lists one reference, so these variants compute the same "
            f"probes and are shown with the same scores: {pairs} (studies/bench/"
            "value_variants.py)"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("regimes", nargs="+")
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    args = ap.parse_args(argv)

    from cotcredit.bench import REGIMES, get_regime
    from cotcredit.bench.leaderboard import best_baselines, leaderboard, write_leaderboard
    from cotcredit.bench.metrics import BASELINES

    results = pd.read_csv(args.run / "results.csv")
    info = json.loads((args.run / "leaderboard.json").read_text())["regimes"]
    board = pd.read_csv(args.run / "leaderboard.csv")
    methods = list(dict.fromkeys(board.loc[board["kind"] == "method", "method"]))
    # a table the earlier leaderboard lacked (a variant added since) joins after its method's
    labels = {"gradient": "gradient-ig"}
    for t in TABLES[:-1]:  # not mc: the reference, not a method row
        label = labels.get(t, t)
        if label not in methods and any((args.run / r / s / f"{t}.parquet").exists()
                                        for r in args.regimes for s in SPLITS):
            after = [i for i, m in enumerate(methods) if m.split("-")[0] == t.split("-")[0]]
            methods.insert(after[-1] + 1 if after else len(methods), label)
    for name in args.regimes:
        if name == "hops":  # from the lookup study's tables (hops_from_study.py)
            from studies.bench.hops_from_study import hops_metrics

            own, facts = hops_metrics(args.run)
            facts["best"] = {r.metric: {"baseline": r.baseline, "chosen_on": r.chosen_on,
                                        "value": r.value}
                             for r in best_baselines(own, BASELINES).itertuples()}
            results = pd.concat([results.loc[results["regime"] != name], own],
                                ignore_index=True)
            info[name] = facts
            continue
        regime = get_regime(name)
        parts = []
        for split in SPLITS:
            m = split_metrics(args.run / name / split)
            parts.append(m.table.assign(regime=name, split=split))
            if split == "test":
                facts = {"description": regime.description, "hypothesis": regime.hypothesis,
                         "counts": {k: v.get("erroneous", v.get("traces", 0))
                                    for k, v in m.counts.items()},
                         "left_out": {k: {r: n for r, n in v.items()
                                          if r not in ("erroneous", "traces") and n}
                                      for k, v in m.counts.items()},
                         "notes": [f"{name}: metrics recomputed from the run's tables by "
                                   "this version's code (studies/bench/from_tables.py)",
                                   *alias_notes(name, args.run / name / "test"), *m.notes]}
        own = pd.concat(parts, ignore_index=True)
        facts["best"] = {r.metric: {"baseline": r.baseline, "chosen_on": r.chosen_on,
                                    "value": r.value}
                         for r in best_baselines(own, BASELINES).itertuples()}
        results = pd.concat([results.loc[results["regime"] != name], own], ignore_index=True)
        info[name] = facts
    order = {r: i for i, r in enumerate(REGIMES)}
    results = results.sort_values("regime", key=lambda s: s.map(order), kind="stable")
    info = dict(sorted(info.items(), key=lambda kv: order.get(kv[0], 99)))
    write_leaderboard(leaderboard(results, methods, BASELINES), results, args.run, info)
    from studies.bench import summarize

    summarize.main(["--run", str(args.run)])


if __name__ == "__main__":
    main()
