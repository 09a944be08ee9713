"""RREDCoT's value estimate when the reference is one path of many: which v̂ follows the state's
value? A small, pre-registered comparison of the v̂ variants on the benchmark's regimes.

    nice -n 10 python -m studies.value.run_study [--regimes unique,multipath] [--run DIR]

Protocol (written before any run; the script only carries it out)
------------------------------------------------------------------

Rows (one segment per reasoning line, the checker's unit; every variant with the regime's exit
string, `value both`, λ = 1, probability space, as the bench runs them):

* ``rredcot``: the default (``references solution``, ``solution-part remaining``,
  ``empty-part keep``, ``combination sum``): today's v̂.
* ``rredcot-rhat``: R̂ alone.
* ``v-drop``: the default with the last boundary fixed (``empty-part drop``).
* ``v-matched``, ``v-suffixes``: alignment by content (``solution-part matched`` / ``suffixes``),
  one reference, empty part dropped.
* ``v-multi-remaining``, ``v-multi-matched``, ``v-multi-suffixes``: every reference the trace
  lists (``references solutions``, ``mixture sum``), each alignment, empty part dropped.
* ``v-siblings-matched``: the listed references and the other right-answer responses to the same
  problem in the split's file (``references siblings``), matched, empty part dropped.
* ``v-multi-matched-nor``: ``v-multi-matched`` with ``combination noisy-or``.
* baselines (``cotcredit.bench.metrics``): ``refdiff``, ``entropy`` (and the bench's others,
  reported, not used to choose).

Metrics (``cotcredit.bench.metrics.regime_metrics``, credits as value differences g_k − g_(k−1),
no terminal correction): ``mc_tracking`` (mean per-trace Spearman with Monte Carlo state-value
differences, traces with ≥ 3 segments), ``blame_departure`` (correct traces that validly depart
from the reference: how often the lowest credit lands on the departing segment; lower is
better), ``blame_wrong_step`` (right answer after a wrong step), ``localization`` (top-1 on
wrong-step wrong-answer traces). Every difference is paired per trace, with a 95% percentile
bootstrap interval over traces (2000 resamples, seed 0).

Data: the benchmark's cached labelled traces (``cotcredit.bench.traces.regime_traces``: first
150 problems × 4 samples per split; ``forecast``: its first 150 problems × 4). Monte Carlo: the
bench's own ``mc.parquet`` and segmentation of the split when ``studies/bench/run`` holds them
(64 rollouts per boundary, first 100 dev / 200 test traces); otherwise computed here with 32
rollouts per boundary on the first 60 dev / 100 test traces (the regime's sampling settings,
seed 0).

Primary regime P: ``multipath`` (many valid paths) when its traces are complete by 23:40;
otherwise ``forecast`` (repaired wrong steps), and the report says so; ``unique`` is the
no-loss check.

Choice, on the development split only:
1. Eligible: a variant whose paired difference with ``rredcot`` on ``unique`` dev has a 95%
   interval lower bound above −0.05 in both localization top-1 and MC Spearman (it does not
   lose on the one-path regime).
2. On P dev, the primary metric is ``blame_departure`` top-1 (lower is better) when P has at
   least 20 such traces, else MC Spearman (higher is better). The eligible variant best on it is
   chosen; within 0.01 of the best, the higher MC Spearman, then the fewer probes
   (remaining/matched before suffixes, one reference before several).

Held-out report: the chosen variant, ``rredcot``, ``rredcot-rhat``, ``refdiff`` and ``entropy``
on the test split of every regime run, every metric, paired differences with 95% intervals
(``summary.md``, ``summary.csv``). Other variants may be scored on a test split too
(``--test-rows all``, where time allows); they are shown, never used to choose. The default
changes only if on P test the chosen variant beats ``rredcot`` on the primary metric with an
interval that excludes 0 AND on ``unique`` test its localization and MC Spearman differences
with ``rredcot`` have lower bounds above −0.05. Otherwise the default stays and the summary says
which variants lost.

Outputs: ``<run>/<regime>/<split>/<row>.parquet`` (resumable per trace), ``metrics.csv`` per
split, ``choice.json``, ``summary.md`` and ``summary.csv`` next to this script.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BENCH_RUN = ROOT / "studies" / "bench" / "run"
SPLITS = ("dev", "test")
DEFAULT = "rredcot"
RHAT = "rredcot-rhat"
#: The estimator that was the default when the protocol was written; every row names its value
#: options in full, so that the rows keep their meaning whatever the defaults are.
EARLIER = {"references": "solution", "solution_part": "remaining", "empty_part": "keep"}
DROP = {**EARLIER, "empty_part": "drop"}
VARIANTS: dict[str, dict] = {
    DEFAULT: {**EARLIER},
    RHAT: {**EARLIER, "value": "rhat"},
    "v-drop": {**DROP},
    "v-matched": {**DROP, "solution_part": "matched"},
    "v-suffixes": {**DROP, "solution_part": "suffixes"},
    "v-multi-remaining": {**DROP, "references": "solutions"},
    "v-multi-matched": {**DROP, "references": "solutions", "solution_part": "matched"},
    "v-multi-suffixes": {**DROP, "references": "solutions", "solution_part": "suffixes"},
    "v-siblings-matched": {**DROP, "references": "siblings", "solution_part": "matched"},
    "v-multi-matched-nor": {**DROP, "references": "solutions", "solution_part": "matched",
                            "combination": "noisy-or"},
}
#: Tie-break order (fewer probes first).
COST_ORDER = list(VARIANTS)
CANDIDATES = [v for v in VARIANTS if v not in (DEFAULT, RHAT)]
SIZES = {"dev": 150, "test": 150}  # problems per split (× 4 samples)
OWN_MC = {"rollouts": 32, "dev": 60, "test": 100}
MARGIN = 0.05
MIN_DEPARTURES = 20
REPORTED = (DEFAULT, RHAT, "refdiff", "entropy")


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def split_traces(regime, split: str, where: Path) -> Path:
    """The split's labelled traces (first problems × 4 samples of the cache) in `where`."""
    from cotcredit.bench.sizes import BenchSize
    from cotcredit.bench.traces import cached_lines, default_folder

    size = BenchSize(problems=SIZES[split], samples=4, rollouts=0)
    lines, missing = cached_lines(regime, split, size, default_folder())
    if missing:
        raise SystemExit(f"{regime.name} {split}: {len(missing)} traces not cached yet")
    path = where / "traces.jsonl"
    text = "".join(ln + "\n" for ln in lines)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def bench_tables(regime: str, split: str, traces: Path) -> tuple[Path, Path, Path] | None:
    """The bench's (segments, mc, rollouts) of the split when they cover these traces."""
    import pandas as pd

    where = BENCH_RUN / regime / split
    files = [where / n for n in ("segments.parquet", "mc.parquet", "rollouts.parquet")]
    if not all(f.exists() for f in files):
        return None
    ids = {json.loads(ln)["id"] for ln in traces.read_text().splitlines() if ln.strip()}
    seg = set(pd.read_parquet(files[0], columns=["trace_id"])["trace_id"].astype(str))
    return tuple(files) if ids <= seg else None


def score_split(regime, split: str, out: Path, scorer, rows: list[str]) -> dict[str, Path]:
    """Segmentation and Monte Carlo (the bench's, or our own), then the variants `rows`."""
    from cotcredit.bench.variants import MethodRun, regime_options
    from cotcredit.pipeline.run import SEGMENTS, InputOptions, run_analysis
    from cotcredit.segmentation import SegmentOptions

    where = out / regime.name / split
    where.mkdir(parents=True, exist_ok=True)
    traces = split_traces(regime, split, where)
    tables: dict[str, Path] = {}
    found = bench_tables(regime.name, split, traces)
    if found is not None:
        segments, mc, rollouts = found
        say(f"{regime.name} {split}: the bench's segmentation and Monte Carlo")
    else:
        segments, mc, rollouts = (where / "segments.parquet", where / "mc.parquet",
                                  where / "rollouts.parquet")
        say(f"{regime.name} {split}: segmentation")
        run_analysis(traces, scorer, segment_options=SegmentOptions(segments="lines"),
                     outputs={SEGMENTS: segments}, keep_rows=False)
        say(f"{regime.name} {split}: Monte Carlo ({OWN_MC['rollouts']} rollouts, first "
            f"{OWN_MC[split]} traces)")
        options = regime_options(MethodRun("mc", "mc", {}), regime.exit_string, regime.sampling,
                                 OWN_MC["rollouts"], 0, rollouts)
        run_analysis(traces, scorer, methods={"mc": options}, segments_file=segments,
                     inputs=InputOptions(max_traces=OWN_MC[split]), outputs={"mc": mc},
                     keep_rows=False, timings=True)
    tables["mc"] = mc
    for label in rows:
        run = MethodRun(label, "rredcot", VARIANTS[label])
        options = regime_options(run, regime.exit_string, regime.sampling, 0, 0)
        table = where / f"{label}.parquet"
        say(f"{regime.name} {split}: {label}")
        run_analysis(traces, scorer, methods={"rredcot": options}, segments_file=segments,
                     outputs={label: table}, keep_rows=False, timings=True,
                     rename=run.rename() or None)
        tables[label] = table
    tables["_segments"], tables["_rollouts"], tables["_traces"] = segments, rollouts, traces
    return tables


def split_metrics(tables: dict[str, Path], where: Path):
    """`regime_metrics` of the split (every row and the bench's baselines)."""
    import pandas as pd

    from cotcredit.bench.metrics import RegimeMetrics, labels_frame, regime_metrics
    from cotcredit.bench.run import _departures, _records
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.rollouts import counts_from_rollouts, read_rollouts

    done, counted = where / "metrics.csv", where / "counts.json"
    newest = max(f.stat().st_mtime for p in tables.values() for f in
                 ([p] if p.is_file() else p.rglob("*")))
    if done.exists() and counted.exists() and done.stat().st_mtime > newest:
        return RegimeMetrics(pd.read_csv(done), json.loads(counted.read_text()))
    records = _records(tables["_traces"])
    counts = counts_from_rollouts(read_rollouts(tables["_rollouts"]))
    scored = [p for k, p in tables.items() if not k.startswith("_")]
    m = regime_metrics(load_scores(scored), labels_frame(records), departures=_departures(records),
                       counts=counts, segments=pd.read_parquet(tables["_segments"]),
                       n_boot=2000, seed=0)
    m.table.to_csv(where / "metrics.csv", index=False)
    (where / "counts.json").write_text(json.dumps(m.counts, indent=1, default=str) + "\n")
    return m


def read_results(run: Path, split: str) -> dict[str, object]:
    """Regime -> the metrics of `split` written under `run` (every regime scored so far)."""
    import pandas as pd

    from cotcredit.bench.metrics import RegimeMetrics

    found = {}
    for where in sorted(run.glob(f"*/{split}")):
        if (where / "metrics.csv").exists() and (where / "counts.json").exists():
            found[where.parent.name] = RegimeMetrics(
                pd.read_csv(where / "metrics.csv"), json.loads((where / "counts.json").read_text()))
    return found


def stat(m, metric: str, row: str, statistic: str) -> tuple[float, float, float, int]:
    t = m.table
    hit = t.loc[(t.metric == metric) & (t.method == row) & (t.statistic == statistic)]
    if not len(hit):
        return (float("nan"),) * 3 + (0,)
    r = hit.iloc[0]
    return float(r.value), float(r.ci_low), float(r.ci_high), int(r.n)


def primary_metric(m) -> str:
    n = m.counts.get("blame_departure", {}).get("erroneous", 0)
    return "blame_departure" if n >= MIN_DEPARTURES else "mc_tracking"


def choose(dev: dict[str, object], primary: str) -> dict:
    """Steps 1-2 of the protocol on the development metrics."""
    unique = dev.get("unique")
    eligible, why = [], {}
    for v in CANDIDATES:
        if unique is None:
            eligible.append(v)
            continue
        loc = stat(unique, "localization", v, f"top1_minus_{DEFAULT}")
        mc = stat(unique, "mc_tracking", v, f"spearman_minus_{DEFAULT}")
        ok = loc[1] > -MARGIN and mc[1] > -MARGIN
        why[v] = {"unique_localization_minus_default": loc[:3],
                  "unique_spearman_minus_default": mc[:3], "eligible": ok}
        if ok:
            eligible.append(v)
    if primary not in dev:
        return {"primary_regime": primary, "chosen": None, "checks": why,
                "reason": f"no development metrics of {primary} yet"}
    m = dev[primary]
    metric = primary_metric(m)
    key = "top1" if metric != "mc_tracking" else "spearman"
    sign = -1.0 if metric != "mc_tracking" else 1.0
    scores = {v: sign * stat(m, metric, v, key)[0] for v in eligible}
    spear = {v: stat(m, "mc_tracking", v, "spearman")[0] for v in eligible}
    chosen = None
    if scores:
        best = max(scores.values())
        near = [v for v in eligible if scores[v] >= best - 0.01]
        chosen = sorted(near, key=lambda v: (-spear[v], COST_ORDER.index(v)))[0]
    return {"primary_regime": primary, "primary_metric": metric, "statistic": key,
            "eligible": eligible, "checks": why, "dev_scores": scores, "chosen": chosen}


def decide(test: dict[str, object], choice: dict) -> dict:
    """The held-out rule: does the chosen variant replace the default?"""
    v, primary = choice["chosen"], choice["primary_regime"]
    metric = choice.get("primary_metric")
    if v is None or primary not in test:
        return {"change_default": False, "reason": "no chosen variant or no held-out data"}
    key = "top1_minus_" if metric != "mc_tracking" else "spearman_minus_"
    diff = stat(test[primary], metric, v, key + DEFAULT)
    better = diff[2] < 0 if metric != "mc_tracking" else diff[1] > 0
    checks = {"primary_minus_default": diff[:3], "better": better}
    ok = better
    if "unique" in test:
        loc = stat(test["unique"], "localization", v, f"top1_minus_{DEFAULT}")
        mc = stat(test["unique"], "mc_tracking", v, f"spearman_minus_{DEFAULT}")
        checks.update(unique_localization=loc[:3], unique_spearman=mc[:3])
        ok = ok and loc[1] > -MARGIN and mc[1] > -MARGIN
    return {"change_default": bool(ok), **checks}


ROWS_OF_SUMMARY = [("localization", "top1", True), ("mc_tracking", "spearman", False),
                   ("blame_departure", "top1", True), ("blame_wrong_step", "top1", True)]


def fmt(x: tuple) -> str:
    v, lo, hi = x[:3]
    if v != v:
        return "–"
    return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]" if lo == lo else f"{v:.3f}"


def summarize(results: dict, choice: dict, decision: dict, path_md: Path, path_csv: Path
              ) -> None:
    """summary.md / summary.csv: every row's statistics and its paired differences with the
    default, R̂ alone, refdiff and entropy, per regime and split."""
    import pandas as pd

    lines, rows = [], []
    for (regime, split), m in results.items():
        lines.append(f"\n### {regime} {split}\n")
        counts = {k: v.get("erroneous", v.get("traces", 0)) for k, v in m.counts.items()}
        lines.append(f"traces per set: {json.dumps(counts)}\n")
        for metric, key, _ in ROWS_OF_SUMMARY:
            head = ["row", key, *[f"− {r}" for r in REPORTED]]
            lines.append(f"\n{metric} ({'lower' if metric.startswith('blame') else 'higher'}"
                         " is better)\n")
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "---|" * len(head))
            for row in [*VARIANTS, "refdiff", "entropy"]:
                own = stat(m, metric, row, key)
                if own[0] != own[0]:
                    continue
                diffs = [stat(m, metric, row, f"{key}_minus_{r}") if r != row
                         else (float("nan"),) * 3 for r in REPORTED]
                lines.append("| " + " | ".join([row, f"{own[0]:.3f} [{own[1]:.3f}, "
                                                f"{own[2]:.3f}] (n={own[3]})",
                                                *[fmt(d) for d in diffs]]) + " |")
                rows.append({"regime": regime, "split": split, "metric": metric, "row": row,
                             "value": own[0], "ci_low": own[1], "ci_high": own[2], "n": own[3],
                             **{f"minus_{r}": d[0] for r, d in zip(REPORTED, diffs)},
                             **{f"minus_{r}_low": d[1] for r, d in zip(REPORTED, diffs)},
                             **{f"minus_{r}_high": d[2] for r, d in zip(REPORTED, diffs)}})
    head = ["# v̂ variants: dev choice and held-out report (generated by run_study.py)\n",
            f"choice (dev): {json.dumps({k: v for k, v in choice.items() if k != 'checks'})}\n",
            f"held-out decision: {json.dumps(decision)}\n"]
    path_md.write_text("\n".join(head + lines) + "\n", encoding="utf-8")
    pd.DataFrame(rows).to_csv(path_csv, index=False)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regimes", default="unique,multipath", help="comma-separated")
    ap.add_argument("--run", type=Path, default=HERE / "run")
    ap.add_argument("--splits", default="dev,test", help="which splits to score")
    ap.add_argument("--primary", default="multipath", help="the primary regime P")
    ap.add_argument("--test-rows", choices=("chosen", "all"), default="chosen",
                    help="rows scored on a test split: the protocol's, or every variant")
    args = ap.parse_args(argv)

    import torch

    from cotcredit.bench.regimes import get_regime
    from cotcredit.lm.loading import ModelOptions
    from cotcredit.pipeline.api import scorer_for

    torch.set_num_threads(1)
    names = [r.strip() for r in args.regimes.split(",") if r.strip()]
    splits = [r.strip() for r in args.splits.split(",") if r.strip()]
    scorers = {}

    def run_split(name: str, split: str, rows: list[str]) -> None:
        regime = get_regime(name)
        if name not in scorers:
            say(f"{name}: loading model")
            scorers[name] = scorer_for(ModelOptions(model=str(regime.model())))
        tables = score_split(regime, split, args.run, scorers[name], rows)
        say(f"{name} {split}: metrics")
        split_metrics(tables, args.run / name / split)

    if "dev" in splits:  # development: every variant
        for name in names:
            run_split(name, "dev", list(VARIANTS))
    choice = choose(read_results(args.run, "dev"), args.primary)
    say(f"dev choice: {choice['chosen']}")
    if "test" in splits:  # held out: the chosen variant beside the default and R̂ alone
        rows = (list(VARIANTS) if args.test_rows == "all"
                else [DEFAULT, RHAT] + ([choice["chosen"]] if choice["chosen"] else []))
        for name in names:
            run_split(name, "test", rows)
    test = read_results(args.run, "test")
    decision = decide(test, choice) if test else {"change_default": False,
                                                  "reason": "no held-out split run"}
    (HERE / "choice.json").write_text(json.dumps({"choice": choice, "decision": decision},
                                                 indent=1, default=str) + "\n")
    results = {(r, s): m for s in SPLITS for r, m in read_results(args.run, s).items()}
    summarize(results, choice, decision, HERE / "summary.md", HERE / "summary.csv")
    say(f"chosen: {choice.get('chosen')}; change default: {decision['change_default']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
