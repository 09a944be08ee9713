"""The `hops` regime of the full run: the lookup study's tables and the value variants on its 240
held-out traces (PROTOCOL.md).

    python -m studies.bench.hops --out studies/bench/run/hops     # hours of SmolLM2 on a CPU

1. the lookup study (`studies/lookup_study/run_study.py`) in `<out>/lookup`, its traces the
   tracked `raw_traces.jsonl` (so nothing is sampled again): R̂ alone and leave-one-out on all
   240; Shapley, integrated gradients and Monte Carlo (24 rollouts per boundary, at most 96 new
   tokens, cut-off rollouts wrong, every rollout saved) on the first 60; one segment per
   reasoning line;
2. RREDCoT's default, the one-reference estimator and the value variants (`value_variants.py`)
   on the same traces and segmentation, into `<out>/variants` (those that repeat another's
   probes here are shown under both labels);
3. the labels: the bench's `hops` test set (the same 240 traces, relabelled by the regime's
   checker), in `<out>/cache`.

`read` gives the split's `SplitData` for the leaderboard. There is no development split: each
row's baseline is chosen on the held-out split (the leaderboard says "chosen on test"), and the
regime's labels are defined by string comparison (`Hops.string_labels`): it is reported and
left out of every headline claim.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STUDY = ROOT / "studies" / "lookup_study"
#: The lookup study's tables and the row labels each holds for the bench (attr.parquet's
#: leave-one-out covers 60 traces: loo.parquet's 240). Its `rredcot.parquet` is not read: run
#: with today's defaults it is no longer the one-reference estimator, which `variants` scores.
TABLES = {"rredcot_rhat.parquet": ("rredcot-rhat",), "loo.parquet": ("loo",),
          "attr.parquet": ("shapley", "gradient-ig"), "mc.parquet": ("mc",)}
#: The lookup study's rows scored on its first ``FIRST`` traces only.
FIRST, FIRST_ONLY = 60, ("shapley", "gradient-ig", "mc")
NOTE = ("hops: scored as the lookup study scores it (studies/bench/hops.py): Monte Carlo "
        "(24 rollouts per boundary, at most 96 new tokens), Shapley and integrated gradients on "
        "the first 60 of the 240 traces, every other row on all 240; every paired difference is "
        "on the traces both rows scored (n). No development split: each row's baseline is "
        "chosen on the held-out split.")


def score(out: Path) -> None:
    """Steps 1-3 of the module docstring (each resumes what it finished; the variants run
    before the study's own methods, whose Monte Carlo takes hours)."""
    from cotcredit.bench import get_regime
    from cotcredit.bench.traces import TRACE_SETS, regime_traces
    from cotcredit.lm import ModelOptions, load_scorer
    from studies.bench.value_variants import score_split, variants
    from studies.lookup_study import run_study

    lookup = out / "lookup"
    lookup.mkdir(parents=True, exist_ok=True)
    raw = run_study.raw_traces(STUDY)
    if not (lookup / "raw_traces.jsonl").exists():
        shutil.copyfile(raw, lookup / "raw_traces.jsonl")
    run_study.main(["--out", str(lookup), "--traces-only"])  # traces and segments first
    n, k = TRACE_SETS["hops"]["test"]
    regime_traces("hops", "test", n, k, out / "cache", seed=0, reuse=raw)
    scorer = load_scorer(ModelOptions())
    (out / "variants").mkdir(exist_ok=True)
    # the variants before the study's methods: hours of Monte Carlo come last
    score_split(lookup / "traces.jsonl", lookup / "segments.parquet", out / "variants", scorer,
                get_regime("hops").exit_string, list(variants()))
    del scorer
    run_study.main(["--out", str(lookup)])


def read(out: Path, complete: bool = False):
    """The held-out split's ``SplitData`` (``cotcredit.bench.splits``), the labelled records,
    what the split lacks (``full.pending_note``: "" when nothing) and which rows are another's
    under a second label (``value_variants.alias_note``), from the tables ``score`` wrote.
    ``complete``: read only the rows that score every trace they should (all 240; the first
    60 for Monte Carlo, Shapley and gradients), as ``full.py publish`` does."""
    from cotcredit.bench.splits import read_records, read_split
    from studies.bench.full import complete_tables, pending_note
    from studies.bench.value_variants import alias_note, alias_rows, variants

    lookup = out / "lookup"
    records = read_records(out / "cache" / "hops" / "test" / "traces.jsonl")
    tables = [(lookup / name, labels) for name, labels in TABLES.items()
              if (lookup / name).exists()]
    tables += sorted((out / "variants").glob("*.parquet"))
    partial = {}
    if complete:
        ids = [str(r["id"]) for r in read_records(lookup / "traces.jsonl")]
        first = [t for t in tables if isinstance(t, tuple) and t[1][0] in FIRST_ONLY]
        rest = [t for t in tables if t not in first]
        done_first, part_first = complete_tables(first, set(ids[:FIRST]))
        done_rest, partial = complete_tables(rest, set(ids))
        tables, partial = done_first + done_rest, {**part_first, **partial}
    data = read_split(lookup, tables, records, lookup / "rollouts.parquet")
    scored = set(data.row_labels())
    data.credits = alias_rows(data.credits, records)
    data.costs = alias_rows(data.costs, records)
    expected = [*(label for labels in TABLES.values() for label in labels), *variants()]
    return (data, records, pending_note(expected, set(data.row_labels()), partial),
            alias_note(scored, records))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "run" / "hops")
    score(ap.parse_args(argv).out)


if __name__ == "__main__":
    main()
