"""The benchmark's full run (PROTOCOL.md): the trace sets, the bench, the tracked summary.

    python -m studies.bench.full [--regimes unique,hops] [--run studies/bench/run]

1. `cotcredit.bench.run_bench(..., size="full", threads=1)` on the organism regimes into `--run`
   (resumable: rerun to continue; every step writes per trace);
2. `hops`: its held-out metrics from the lookup study's tables on the same 240 traces
   (`hops_from_study.py`; PROTOCOL.md, amendments), merged into the leaderboard; with
   `--hops-bench`, the bench scores `hops` itself at the protocol's size instead (hours);
3. the tracked summary next to this script (`summarize.py`).

Regimes: those named, else every regime whose model is there (a regime without a checkpoint is
left out and named in the leaderboard with the reason; rerun when it ships: the regimes already
done are only re-summarised).
One line per step goes to the terminal with the time of day.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: The lookup study's sampled traces: the `hops` held-out set.
HOPS_TEST = ROOT / "studies" / "lookup_study" / "raw_traces.jsonl"


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def available() -> tuple[list[str], dict[str, str]]:
    """(regimes whose model is there, {regime without one: why})."""
    from cotcredit.bench import REGIMES
    from cotcredit.bench.run import missing_model

    have, missing = [], {}
    for name, regime in REGIMES.items():
        why = missing_model(regime)
        if why is None:
            have.append(name)
        else:
            missing[name] = why
    return have, missing


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def merge_hops(result, run: Path, cache: Path) -> None:
    """Add the `hops` column (from the lookup study's tables) to the bench's leaderboard."""
    import pandas as pd

    from cotcredit.bench.leaderboard import best_baselines, leaderboard, write_leaderboard
    from cotcredit.bench.metrics import BASELINES
    from studies.bench.hops_from_study import hops_metrics

    table, facts = hops_metrics(run, cache)
    facts["best"] = {r.metric: {"baseline": r.baseline, "chosen_on": r.chosen_on,
                                "value": r.value}
                     for r in best_baselines(table, BASELINES).itertuples()}
    results = pd.concat([result.results, table], ignore_index=True)
    board = result.leaderboard
    methods = list(dict.fromkeys(board.loc[board["kind"] == "method", "method"]))
    regimes = {**{k: v for k, v in result.regimes.items() if not v.get("missing")},
               "hops": facts, **{k: v for k, v in result.regimes.items() if v.get("missing")}}
    write_leaderboard(leaderboard(results, methods, BASELINES), results, run, regimes)

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", help="comma-separated [default: every regime with a model]")
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    ap.add_argument("--cache", type=Path, default=None,
                    help="the trace cache [default: $COTCREDIT_CACHE/bench]")
    ap.add_argument("--no-reports", action="store_true",
                    help="skip each regime's compare report and explorer (the slow figures); "
                    "a later run without it writes them")
    ap.add_argument("--hops-bench", action="store_true",
                    help="score hops with the bench at the protocol's size (hours) instead of "
                    "reading the lookup study's tables")
    args = ap.parse_args(argv)

    from cotcredit.bench import run_bench
    from cotcredit.bench.traces import TRACE_SETS, default_folder, regime_traces

    missing: dict[str, str] = {}
    if args.regimes:
        regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    else:
        regimes, missing = available()
        for name, why in missing.items():
            say(f"left out: {name} ({why})")
    cache = args.cache or default_folder()
    from_study = "hops" in regimes and not args.hops_bench
    n, k = TRACE_SETS["hops"]["test"]
    if "hops" in regimes and _lines(cache / "hops" / "test" / "traces.jsonl") < n * k:
        say(f"hops test: the lookup study's {n} traces, relabelled")
        regime_traces("hops", "test", n, k, cache, seed=0, reuse=HOPS_TEST)
    if from_study:
        regimes.remove("hops")
    say(f"bench --size full on {', '.join(regimes)} into {args.run}")
    result = run_bench(",".join(regimes), None, size="full", threads=1, output=args.run,
                       cache=cache, log=say, reports=not args.no_reports)
    for name, why in missing.items():
        result.regimes.setdefault(name, {"missing": why})
    for line in result.failures:
        say(f"failed: {line}")
    say(f"bench done in {result.seconds:.0f} s")
    if from_study:
        say("hops: metrics from the lookup study's tables")
        merge_hops(result, args.run, cache)
    elif missing:
        from cotcredit.bench.leaderboard import write_leaderboard

        write_leaderboard(result.leaderboard, result.results, args.run, result.regimes)
    from studies.bench import summarize

    summarize.main(["--run", str(args.run)])
    return 1 if result.failures else 0


if __name__ == "__main__":
    sys.exit(main())
