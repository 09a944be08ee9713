"""Every v̂ variant of the value-estimate study on every regime's held-out split, for the
leaderboard.

    nice -n 10 python -m studies.bench.value_variants [--regimes multipath,unique,forecast,long,hops]
    python -m studies.bench.from_tables unique multipath forecast long   # the leaderboard

Protocol (written before these runs). The default v̂ was chosen on the development splits of
`unique` and `multipath` (studies/value/run_study.py) and paired with the earlier default on
every regime's held-out split (value_default.py). This script adds the study's other variants
(`value_variants.yaml`: the last boundary fixed, alignment by content, several references, the
noisy-or combination) to the leaderboard so that each is seen on every regime. They are shown,
never used to choose: nothing is decided from these rows.

Data: each organism regime's test split in the bench folder (its traces.jsonl and
segments.parquet, the regime's checkpoint and exit string, as `cotcredit bench` scores them);
`hops`: the lookup study's 240 traces and segmentation with the embedded model, the tables into
`studies/bench/hops_value/` (tracked; `hops_from_study.py` reads them), the default v̂
(`rredcot-siblings`) among them. Development splits are not scored (nothing is chosen).

Identical computations are scored once. Where every trace lists one reference (`unique`,
`forecast`, `long`, `hops`), "several references" (`references: solutions`) is the one
reference, so `rredcot-multi`, `-multi-matched` and `-multi-suffixes` are the same probes as
`rredcot-drop`, `-matched` and `-suffixes`; where no problem has a second response (`hops`),
`siblings` is the listed reference too, so `rredcot-matched` is `rredcot-siblings`. These rows
are shown under both labels (`alias_rows`), and the leaderboard's notes say so.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CONFIG = HERE / "value_variants.yaml"
HOPS_OUT = HERE / "hops_value"
HOPS_STUDY = ROOT / "studies" / "lookup_study"
ORGANISMS = ("multipath", "unique", "forecast", "long")
#: label -> the label whose probes it repeats when every trace lists one reference.
ONE_REFERENCE_SAME = {"rredcot-multi": "rredcot-drop", "rredcot-multi-matched": "rredcot-matched",
                      "rredcot-multi-suffixes": "rredcot-suffixes"}
#: ... and when, moreover, no problem has a second response (siblings = the listed reference).
NO_SIBLINGS_SAME = {"rredcot-matched": "rredcot-siblings"}


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def variants() -> dict[str, dict]:
    """The study's variants as bench rows (label -> options of `rredcot`), the default's too."""
    from cotcredit.bench.variants import read_variants

    found = read_variants(CONFIG)
    return {k: {o: v for o, v in found[k].items() if o != "method"}
            for k in ("rredcot-siblings", *_config_labels())}


def _config_labels() -> list[str]:
    from cotcredit.options import read_config

    return [str(k) for k in read_config(CONFIG)]


def same_as(records: list[dict]) -> dict[str, str]:
    """label -> the label it computes exactly, for these traces (see the module docstring)."""
    one = all(len({t.strip() for t in [r.get("solution"), *(r.get("solutions") or [])] if t})
              <= 1 for r in records)
    if not one:
        return {}
    problems = Counter(r.get("problem_id", r["id"]) for r in records)
    return {**ONE_REFERENCE_SAME,
            **(NO_SIBLINGS_SAME if max(problems.values()) == 1 else {})}


def alias_rows(scores: pd.DataFrame, records: list[dict]) -> pd.DataFrame:
    """`scores` plus the rows of each label that repeats another's computation (`same_as`),
    copied under its own label, where only the other was scored."""
    same = same_as(records)
    while True:  # an alias of an alias (multi-matched = matched = siblings) resolves too
        have = set(scores["method"].unique())
        extra = [scores[scores["method"] == src].assign(method=label)
                 for label, src in same.items() if src in have and label not in have]
        if not extra:
            return scores
        scores = pd.concat([scores, *extra], ignore_index=True)


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def score_split(traces: Path, segments: Path, out: Path, model, exit_string: str,
                labels: list[str]) -> None:
    """Each variant of `labels` not repeated by another on `traces`, into `out/<label>.parquet`
    (resumable per trace)."""
    from cotcredit.methods import get_method
    from cotcredit.options import build_options
    from cotcredit.pipeline.api import score

    records = _read(traces)
    skip = same_as(records)
    spec = get_method("rredcot")
    found = variants()
    for label in labels:
        if label in skip:
            say(f"  {label}: the same computation as {skip[label]} here (shown under both)")
            continue
        opts = build_options(spec.options_type, {**found[label], "exit_string": exit_string},
                             label)
        t0 = time.perf_counter()
        score(traces, out / f"{label}.parquet", methods={"rredcot": opts},
              segments_file=segments, model=model, label=label, timings=True)
        say(f"  {label}: {time.perf_counter() - t0:.0f} s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", default=",".join((*ORGANISMS, "hops")))
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--labels", default=None,
                    help="comma-separated variants [default: all]; one process per label set "
                    "(never two on one label)")
    args = ap.parse_args(argv)

    import torch

    from cotcredit.bench import get_regime
    from cotcredit.bench.traces import model_argument
    from cotcredit.lm import ModelOptions, load_scorer

    torch.set_num_threads(args.threads)
    wanted = args.labels.split(",") if args.labels else None
    for name in args.regimes.split(","):
        regime = get_regime(name)
        location = model_argument(regime)
        scorer = load_scorer(ModelOptions(model=location))
        if name == "hops":
            say("hops: the lookup study's traces, the embedded model")
            HOPS_OUT.mkdir(exist_ok=True)
            score_split(HOPS_STUDY / "traces.jsonl", HOPS_STUDY / "segments.parquet", HOPS_OUT,
                        scorer, regime.exit_string, wanted or list(variants()))
        else:
            where = args.run / name / "test"
            say(f"{name} test")
            score_split(where / "traces.jsonl", where / "segments.parquet", where, scorer,
                        regime.exit_string, wanted or _config_labels())


if __name__ == "__main__":
    main()
