"""Adaptive Monte Carlo (`--rollouts auto`) against the bench's 64-rollout Monte Carlo.

    python benchmarks/bench_mc_adaptive.py                        # studies/bench/run/unique/test
    python benchmarks/bench_mc_adaptive.py --split DIR --traces 100 --budget 16 --precision 0.2

Protocol (written before the first run).

Data. A `cotcredit bench` split folder (default: the `unique` regime's held-out split of the
full bench, studies/bench/run/unique/test): its labelled traces (`traces.jsonl`), Monte Carlo
table (`mc.parquet`, the reference: 64 rollouts from every boundary) and every rollout of that
Monte Carlo (`rollouts.parquet`: trace, boundary, sample index 0..63, correct, truncated).
Traces: the first `--traces` (default: all) traces of `traces.jsonl` that the Monte Carlo scored.

Replay. Rollout j of a boundary in an adaptive run is drawn from the same random stream as
rollout j of a fixed run with the same seed (tests/methods/test_mc_adaptive.py checks the equality
on a model), so the adaptive run on these traces, with the bench's seed, model and sampling
options, takes exactly rollouts 0..n_k−1 of the saved ones. The script therefore runs the
adaptive schedule (`cotcredit.methods.mc_adaptive.run_rounds`, the code `mc-baseline --rollouts
auto` runs) with a `draw` that reads the saved rollouts instead of generating them: no model
runs, and the result is the adaptive run's. This needs every boundary's cap (4 × budget) to be
at most the 64 saved rollouts. Check first: the 64-rollout credits recomputed from the saved
rollouts equal the scores in `mc.parquet` (printed; the run stops if not).

Arms (per trace, credits V_k − V_(k−1) on the bench's segmentation, truncation policy of the
bench's table):
* `mc64`: all 64 rollouts of every boundary (the reference, = `mc.parquet`);
* `auto`: the adaptive schedule, primary setting = the defaults (budget 16 per boundary on
  average, precision 0.2, rounds of 8);
* `fixed-eq`: the first N rollouts of every boundary, N = the adaptive arm's mean rollouts per
  boundary rounded up (uniform allocation at the same or a higher cost: the control that says
  whether adaptivity, not only fewer rollouts, matters);
* `fixed-8`: the first 8 (the adaptive first round alone).

Measures.
1. Cost: rollouts per trace of each arm (mean), and auto / mc64. Goal: <= 1/3.
2. Localization on the erroneous incorrect traces (the bench's `localization` set: the segment
   holding `error_char`): top-1 of each arm (`cotcredit.report.localization.localize`, ties
   counted 1/m), and the paired per-trace differences auto − mc64 and auto − fixed-eq, with 95%
   percentile bootstrap intervals over traces (2000 resamples, seed 0). "Within its interval":
   the interval of auto − mc64 contains 0.
3. Agreement with mc64: per-trace Spearman correlation of each arm's credits with mc64's (traces
   with >= 3 segments where both are non-constant), mean and bootstrap interval, paired
   difference auto − fixed-eq on the traces where both are defined; and the share of scored
   boundaries whose adaptive 95% Wilson interval contains the 64-rollout value.
   Caveat: every arm's rollouts are a subset of mc64's, so agreement with mc64 is higher than
   with an independent 64-rollout run would be; the comparison between arms (same overlap) is
   the fair one.
Settings other than the primary (`--budget`, `--precision`, `--round`) are exploratory, and
so are further fixed arms (`--fixed 8,21`: the first 21 rollouts of every boundary is 1/3 of
mc64's cost; added after the first run).

Check of the replay against a real run (`--check-run TABLE`, added after the first run): TABLE
is the `--save-rollouts` table of `cotcredit mc-baseline --rollouts auto` on the same traces,
model, segmentation and options (the commands below); every one of its rollouts must equal the
saved rollout of the same (trace, boundary, sample), and its rollouts per boundary the replay's.

    cotcredit mc-baseline studies/bench/run/unique/test/traces.jsonl \
        --model src/cotcredit/bench/checkpoints/unique --segments-file \
        studies/bench/run/unique/test/segments.parquet --rollouts auto --max-new-tokens 64 \
        --max-traces 20 --save-rollouts auto-rollouts.parquet -o auto.parquet
    python benchmarks/bench_mc_adaptive.py --traces 20 --check-run auto-rollouts.parquet

Held-out variant (`--held-out`, added after the first run): every arm draws only from samples
0..31 (so `--budget` <= 8) and the reference is an independent 32-rollout Monte Carlo, samples
32..63 (`held32`); `--fixed 32` is then the full budget at that scale. Agreement with an
independent reference is free of the shared-rollouts caveat above.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cotcredit.bench.metrics import labels_frame, target_offsets  # noqa: E402
from cotcredit.methods.mc_adaptive import AdaptivePlan, run_rounds, wilson  # noqa: E402
from cotcredit.report.bootstrap import Resampler, percentile_interval  # noqa: E402
from cotcredit.report.localization import localize  # noqa: E402

SAVED = 64


def read_split(folder: Path, max_traces: int | None):
    """(labels records, mc rows, rollouts) of the first traces the Monte Carlo scored."""
    records = [json.loads(line) for line in (folder / "traces.jsonl").open(encoding="utf-8")
               if line.strip()]
    mc = pd.read_parquet(folder / "mc.parquet")
    ro = pd.read_parquet(folder / "rollouts.parquet",
                         columns=["trace_id", "boundary", "sample", "correct", "truncated"])
    scored = set(mc["trace_id"]) & set(ro["trace_id"])
    ids = [r["id"] for r in records if r["id"] in scored]
    if max_traces:
        ids = ids[:max_traces]
    keep = set(ids)
    records = [r for r in records if r["id"] in keep]
    mc = mc[mc["trace_id"].isin(keep)].sort_values(["trace_id", "segment"])
    ro = ro[ro["trace_id"].isin(keep)].sort_values(["trace_id", "boundary", "sample"])
    return ids, records, mc, ro


def values(correct: np.ndarray, truncated: np.ndarray, policy: str) -> float:
    """V of one boundary from its rollouts (the fixed mode's estimator)."""
    usable = len(correct) - truncated.sum() if policy == "drop" else len(correct)
    return (correct & ~truncated).sum() / usable if usable else math.nan


def credits(v: list[float]) -> list[float]:
    return [b - a for a, b in zip(v, v[1:], strict=False)]


def per_trace(ro: pd.DataFrame, plan: AdaptivePlan, policy: str, pool: int):
    """Per trace: boundary arrays (correct, truncated, 64 each) and the adaptive tallies."""
    out = {}
    for t, g in ro.groupby("trace_id", sort=False):
        bounds = sorted(g["boundary"].unique())
        arrays = []
        for b in bounds:
            gb = g[g["boundary"] == b]
            if list(gb["sample"]) != list(range(SAVED)):
                raise SystemExit(f"{t} boundary {b}: samples are not 0..{SAVED - 1}")
            arrays.append((gb["correct"].to_numpy(bool), gb["truncated"].to_numpy(bool)))

        def draw(asked, arrays=arrays):
            got = {}
            for i, (first, m) in asked.items():
                if first + m > pool:
                    raise SystemExit("the schedule asked beyond the saved rollouts")
                c, tr = arrays[i]
                got[i] = [(bool(c[j]), bool(tr[j])) for j in range(first, first + m)]
            return got

        tallies = run_rounds(len(bounds), plan, draw, drop_truncated=policy == "drop")
        out[t] = (arrays, tallies)
    return out


def check_run(table: Path, split: Path, traces: dict, ro: pd.DataFrame) -> None:
    """A real adaptive run's rollouts against the saved ones and the replay's counts."""
    real = pd.read_parquet(table)
    saved = pd.read_parquet(split / "rollouts.parquet")
    key = ["trace_id", "boundary", "sample"]
    both = real.merge(saved, on=key, how="left", suffixes=("", "_saved"))
    cols = ["token", "text", "n_tokens", "answer", "correct", "truncated"]
    same = both[[f"{c}_saved" for c in cols]].notna().all(axis=1)
    for c in cols:
        same &= both[c] == both[f"{c}_saved"]
    counts = real.groupby(["trace_id", "boundary"]).size()
    bounds = ro.groupby("trace_id")["boundary"].unique()
    replay = {(t, int(b)): tl.n for t, (_, tallies) in traces.items()
              for b, tl in zip(sorted(bounds[t]), tallies, strict=True)}
    counted = {k: int(v) for k, v in counts.items()}
    print(f"check-run: {len(real)} rollouts of {real['trace_id'].nunique()} traces; equal to "
          f"the saved ones: {int(same.sum())}/{len(real)}; rollouts per boundary equal to the "
          f"replay's: {counted == replay} ({len(counted)} boundaries)")
    if not (same.all() and counted == replay):
        raise SystemExit("the replay is not the adaptive run")


def bootstrap(columns: dict[str, np.ndarray], n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean and 95% percentile interval of each column (one set of resamples over rows; rows with
    NaN in a column are left out of that column's mean)."""
    names = list(columns)
    matrix = np.column_stack([columns[n] for n in names])
    low, high = percentile_interval(Resampler(len(matrix), n_boot, seed).means(matrix))
    return {n: (float(np.nanmean(columns[n])), float(lo), float(hi),
                int(np.isfinite(columns[n]).sum()))
            for n, lo, hi in zip(names, low, high, strict=True)}


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return math.nan
    ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def main(argv: list[str] | None = None) -> dict:
    global SAVED
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", type=Path, default=ROOT / "studies/bench/run/unique/test")
    ap.add_argument("--traces", type=int, default=None, help="first N traces [default: all]")
    ap.add_argument("--budget", type=int, default=16)
    ap.add_argument("--precision", type=float, default=0.2)
    ap.add_argument("--round", type=int, default=8)
    ap.add_argument("--fixed", default="8", help="fixed arms: first N rollouts (comma list)")
    ap.add_argument("--check-run", type=Path, default=None,
                    help="rollouts table of a real --rollouts auto run to check the replay with")
    ap.add_argument("--held-out", action="store_true",
                    help="arms use samples 0..31, the reference is samples 32..63")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    ap.add_argument("--saved", type=int, default=SAVED,
                    help="rollouts per boundary the split's Monte Carlo saved (the bench's "
                    "`long`: 32)")
    args = ap.parse_args(argv)
    SAVED = args.saved  # the split's own count (the reference and every check use it)
    t0 = time.perf_counter()
    plan = AdaptivePlan(args.budget, args.precision, args.round)
    pool = SAVED // 2 if args.held_out else SAVED
    ref = "held32" if args.held_out else "mc64"
    if plan.cap > pool:
        raise SystemExit(f"--budget {args.budget}: a boundary may take {plan.cap} rollouts, more "
                         f"than the {pool} available")
    ids, records, mc, ro = read_split(args.split, args.traces)
    policy = str(mc["truncated_policy"].iloc[0])
    traces = per_trace(ro, plan, policy, pool)

    if args.check_run:
        check_run(args.check_run, args.split, traces, ro)

    # The reference recomputed from the saved rollouts must be the bench's table.
    ref_credit, auto_credit, rows_auto, cover, all64 = {}, {}, [], [], {}
    n_auto = {}
    for t, (arrays, tallies) in traces.items():
        all64[t] = credits([values(c, tr, policy) for c, tr in arrays])
        v64 = [values(c[SAVED - pool if args.held_out else 0:],
                      tr[SAVED - pool if args.held_out else 0:], policy) for c, tr in arrays]
        ref_credit[t] = credits(v64)
        va = [tl.value for tl in tallies]
        auto_credit[t] = credits(va)
        n_auto[t] = sum(tl.n for tl in tallies)
        for tl, v in zip(tallies, v64, strict=True):
            low, high = wilson(tl.correct, tl.usable)  # (0, 1) with none usable
            cover.append(low <= v <= high)
        rows_auto.append([tl.n for tl in tallies])
    table = mc.groupby("trace_id", sort=False)["score"].apply(list)
    worst = max(float(np.nanmax(np.abs(np.array(table[t]) - np.array(all64[t]))))
                for t in traces)
    print(f"check: 64-rollout credits recomputed from the saved rollouts vs mc.parquet: "
          f"max |difference| = {worst:.2e}")
    if worst > 1e-9:
        raise SystemExit("the saved rollouts do not reproduce mc.parquet")

    boundaries = {t: len(arrays) for t, (arrays, _) in traces.items()}
    per_boundary = sum(n_auto.values()) / sum(boundaries.values())
    n_eq = math.ceil(per_boundary)
    fixed = {}
    sizes = [int(x) for x in args.fixed.split(",") if x.strip()]
    for name, n in (("fixed-eq", n_eq), *((f"fixed-{n}", n) for n in sizes)):
        fixed[name] = {t: credits([values(c[:n], tr[:n], policy) for c, tr in arrays])
                       for t, (arrays, _) in traces.items()}
    arms = {ref: ref_credit, "auto": auto_credit, **fixed}
    cost = {ref: pool, "auto": None, "fixed-eq": n_eq, **{f"fixed-{n}": n for n in sizes}}
    mean_b = float(np.mean(list(boundaries.values())))
    print(f"\n{len(traces)} traces, {mean_b:.2f} boundaries per trace, truncation policy "
          f"{policy}; plan: budget {plan.budget}/boundary (cap {plan.cap}), precision "
          f"{plan.precision}, rounds of {plan.round_rollouts}")
    print(f"\n| arm | rollouts per trace (mean) | per boundary | vs {pool} per boundary |")
    print("|---|---|---|---|")
    full_per_trace = pool * mean_b
    per_trace_cost = {}
    for name in arms:
        per = (float(np.mean(list(n_auto.values()))) if name == "auto"
               else cost[name] * mean_b)
        per_trace_cost[name] = per
        print(f"| {name} | {per:.1f} | {per / mean_b:.2f} | {per / full_per_trace:.3f} |")
    stops = np.bincount(np.concatenate(rows_auto))
    print("auto: boundaries by rollouts taken: "
          + ", ".join(f"{n}: {c}" for n, c in enumerate(stops) if c))

    # Localization (the bench's set and statistic).
    labels = labels_frame(records)
    offsets = target_offsets(labels)["localization"]
    seg = mc[["trace_id", "segment", "char_start", "char_end"]].reset_index(drop=True)
    parts = []
    for name, cr in arms.items():
        s = seg.copy()
        s["method"] = name
        s["score"] = np.concatenate([cr[t] for t in seg["trace_id"].drop_duplicates()])
        parts.append(s)
    scores = pd.concat(parts, ignore_index=True)
    loc = localize(scores, offsets, list(arms), baselines=list(arms), n_boot=2000, seed=0)
    lt = loc.table.set_index(["method", "statistic"])
    print(f"\nlocalization ({loc.counts.get('erroneous', 0)} erroneous traces): top-1 [95% CI]")
    for name in arms:
        v = lt.loc[(name, "top1")]
        print(f"  {name:9s} {v['value']:.3f} [{v['ci_low']:.3f}, {v['ci_high']:.3f}]")
    pairs = [("auto", ref), ("auto", "fixed-eq"), ("fixed-eq", ref),
             *((f"fixed-{n}", ref) for n in sizes)]
    for a, b in pairs:
        v = lt.loc[(a, f"top1_minus_{b}")]
        print(f"  {a} - {b}: {v['value']:+.3f} [{v['ci_low']:+.3f}, {v['ci_high']:+.3f}]")

    # Agreement with the reference.
    order = list(traces)
    rho = {name: np.array([spearman(np.array(arms[name][t]), np.array(ref_credit[t]))
                           for t in order]) for name in arms if name != ref}
    both = np.isfinite(rho["auto"]) & np.isfinite(rho["fixed-eq"])
    cols = {**rho, "auto - fixed-eq": np.where(both, rho["auto"] - rho["fixed-eq"], np.nan)}
    finite = np.isfinite(np.column_stack(list(cols.values()))).all(axis=1)
    agree = bootstrap({k: v[finite] for k, v in cols.items()})
    print(f"\nagreement with {ref}: mean per-trace Spearman of credits [95% CI] "
          f"({int(finite.sum())} traces where every arm's is defined)")
    for k, (m, lo, hi, n) in agree.items():
        print(f"  {k:15s} {m:+.3f} [{lo:+.3f}, {hi:+.3f}]  n={n}")
    pooled = {name: spearman(np.concatenate([arms[name][t] for t in order]),
                             np.concatenate([ref_credit[t] for t in order]))
              for name in arms if name != ref}
    print("  pooled over all segments: " + ", ".join(f"{k} {v:.3f}" for k, v in pooled.items()))
    print(f"  auto's 95% Wilson interval contains the {ref} value at "
          f"{np.mean(cover):.3f} of {len(cover)} boundaries")
    print(f"\n{time.perf_counter() - t0:.1f} s")

    result = {
        "split": str(args.split), "traces": len(traces), "boundaries_per_trace": mean_b,
        "plan": {"budget": plan.budget, "precision": plan.precision, "round": plan.round_rollouts},
        "rollouts_per_trace": per_trace_cost, "reference": ref,
        "auto_over_full": per_trace_cost["auto"] / full_per_trace,
        "fixed_eq_n": n_eq,
        "localization": loc.table.to_dict(orient="records"),
        "agreement": {k: list(v) for k, v in agree.items()}, "pooled_spearman": pooled,
        "wilson_coverage": float(np.mean(cover)),
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=float))
    return result


if __name__ == "__main__":
    main()
