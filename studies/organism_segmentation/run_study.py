"""Does the segmentation matter? The organism's methods on the tool's own segmentation against
one segment per step.

    python -m studies.organism_segmentation.run_study       # or: make organism-segmentation
    python -m studies.organism_segmentation.run_study --out DIR --study DIR  # elsewhere

It reads the traces of the organism study (studies/organism_study/<regime>/traces.jsonl, made
by `make organism-study`; same 500 held-out problems, one on-policy trace each, with the
checker's `error_char`) and its step segmentation results. The protocol is fixed here, before
any result was seen:

- Segmentations: ``steps`` (the organism study's: candidate cuts at line breaks and
  `segment -k L` for a trace of L reasoning lines, which keeps every line and merges none: the
  hybrid segmentation with -k matched to each trace's step count *is* the step segmentation
  there, by construction) against the hybrid keyword–entropy segmentation as a user without
  step boundaries runs it, one -k for every trace: ``k8`` (the tool's default, -k 8: more
  segments than lines, so it adds the highest-entropy token cuts inside lines) and ``k4`` (-k 4,
  the median step count of the traces, fixed in advance: merges lines of longer traces, cuts
  inside lines of shorter ones).
- Methods on each: rredcot-rhat (R̂ alone, the default), rredcot (R̂ + v̂ over the remaining
  reference steps) and loo. Shapley and integrated gradients are left out for CPU time (on the step
  segmentation they localize no better than LOO). Monte Carlo is not rerun: its boundaries differ
  per segmentation, and MC agreement is the organism study's.
- Metric: top-1 localization of the first wrong step (traces with a wrong step and a wrong
  answer: the lowest-credit segment holds `error_char`; a tied minimum counts 1/m), against the
  text-free baselines of the organism study (a random segment: 1/K; the most frequent
  first-error segment of the other traces).
- Primary comparison: per method, the paired per-trace difference of top-1 between a hybrid
  segmentation and the steps (same traces), bootstrap 95% CI (2000 resamples). Coarser or finer
  segments change chance (1/K), so each row also gives its best baseline and the method's
  difference from it.
- Both organism checkpoints (full, early). Resumable: every step is a `cotcredit` command that
  resumes its output.

Amendment 1 (2026-12-02, written before any Monte Carlo ran on these segmentations; the
localization results above were known): MC agreement by segmentation. Monte Carlo is rerun on
each hybrid segmentation after all, so that the study says what each segmentation costs or
gains in agreement with MC, not only in localization.

- Monte Carlo: the organism study's command and settings (`organism_study.mc_command`: T = 1,
  at most 48 new tokens, seed 0, rollouts saved) with its number of rollouts per boundary
  (read from its mc.parquet: 128), on the first `--mc-traces` traces of each checkpoint (200,
  for cost: the study's MC took about 3 s a trace over 5-6 boundaries and `k8` has up to 9, so
  200 traces x 2 segmentations x 2 checkpoints is about an hour on 2 cores, all 500 about
  2.5 hours). Rollouts are keyed per trace and reasoning-token boundary, so at a boundary a
  hybrid segmentation shares with the steps its rollouts are the study's: every shared
  boundary's success count is compared and the number that differ is reported (0 expected on
  one machine).
- Metric: per trace, the Spearman correlation of a method's credits with MC's credits on the
  same segmentation (value differences, as `cotcredit compare`; traces with at least 3
  segments), for rredcot-rhat, rredcot, loo and the position baseline (the mean MC credit at
  the same relative position among the other traces of the same outcome, on that
  segmentation). Every segmentation on the same traces (the first N that all of them scored;
  the steps' statistics recomputed on those).
- Comparisons (primary for this amendment): per method, mean per-trace Spearman on a hybrid
  segmentation minus on the steps, paired per trace, and each row minus its own
  segmentation's position baseline, paired per trace; 95% bootstrap CIs (2000 resamples).
  `mc_agreement.md`; the full `cotcredit compare` report of each hybrid segmentation in its
  `report/`.
- Caveat fixed in advance: the reference moves with the segmentation (MC at other
  boundaries), so a gain means a method tracks *that segmentation's* MC better; and Spearman
  over 8 segments and over 3-4 differ in granularity, so the difference from each
  segmentation's own position baseline is the comparable figure.

Tracked in each `<regime>/` folder (the rest is regenerated): localization.md/.csv,
mc_agreement.md/.csv, and per hybrid segmentation `k8/`, `k4/`: steps.json and comparison.md
(the text of its `cotcredit compare` report).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.report.bootstrap import mean_interval
from studies import organism
from studies.organism_study import run_study as _organism_study
from studies.summaries import write_comparison

HERE = Path(__file__).resolve().parent
REGIMES = organism.REGIMES
SEGMENTATIONS = {"k8": 8, "k4": 4}
METHODS = ("rredcot-rhat", "rredcot", "loo")
TABLES = ("rredcot_rhat.parquet", "rredcot.parquet", "attr.parquet", "mc.parquet")
EXIT = "The answer is "


def organism_study():
    """The organism study's script as a module (its run, labels and localization)."""
    return _organism_study


def run_segmentation(org, study: Path, out: Path, k: int, model: str, mc_traces: int = 0,
                     boot: int = 2000) -> None:
    """One hybrid segmentation with -k `k` and the methods on it, in `out`; with `mc_traces`,
    Monte Carlo as the study ran it on that many traces, and `cotcredit compare` (Amendment 1)."""
    out.mkdir(parents=True, exist_ok=True)
    log = _organism_study.read_log(out)
    traces = os.path.relpath(study / "traces.jsonl", out)
    org.run(out, f"segmentation -k {k}", ["segment", traces, "-o", "segments.parquet", "-k",
                                           str(k), "--model", model, "--on-error", "skip",
                                           "-q"], log)
    common = ["--model", model, "--segments-file", "segments.parquet", "--on-error", "skip",
              "--timings", "-q"]
    forcing = ["--exit-string", EXIT]
    org.run(out, "RREDCoT, R̂ alone", ["redistribute", traces, "-o", "rredcot_rhat.parquet",
                                      "--value", "rhat", "--label", "rredcot-rhat", *common,
                                      *forcing], log)
    org.run(out, "RREDCoT", ["redistribute", traces, "-o", "rredcot.parquet", "--value", "both",
                             "--solution-part", "remaining", *common, *forcing], log)
    org.run(out, "LOO", ["attribute", traces, "-o", "attr.parquet", "--method", "loo",
                         *common, *forcing], log)
    if not mc_traces:
        return
    rollouts = int(pd.read_parquet(study / "mc.parquet", columns=["n_rollouts"]).n_rollouts.max())
    org.run(out, "Monte Carlo", org.mc_command(traces, rollouts, "--max-traces", str(mc_traces),
                                               *common), log)
    org.run(out, "report", ["compare", "--scores", *TABLES, "-o", "report", "--bootstrap",
                            str(boot), "--overwrite", "-q"], log, always=True)
    write_comparison(out, list(TABLES))


def paired(a: np.ndarray, b: np.ndarray, seed: int, boot: int) -> tuple:
    """Mean of a − b over traces and its 95% percentile-bootstrap interval (its own resamples
    from `seed`, whatever rows were computed before)."""
    return mean_interval(np.asarray(a, float) - np.asarray(b, float), boot, seed)


def compare_segmentations(org, study: Path, out: Path, boot: int, seed: int = 0) -> pd.DataFrame:
    """One row per (segmentation, method): top-1, the best baseline, and paired differences
    from the steps segmentation and from that baseline, on the traces every run scored."""
    labels = org.label_traces(study / "raw_traces.jsonl", study / "traces.jsonl")
    # A segment overlapping the first wrong line counts (the rule of the README's table; the
    # script passed no responses until 2026-12-02, so a rerun drew the first-character rule).
    responses = {t["id"]: t["response"] for t in map(
        json.loads, (study / "traces.jsonl").read_text().splitlines())}
    runs = {"steps": org.localization_hits(study, labels, wrong_line_of=responses)}
    for name in SEGMENTATIONS:
        if (out / name / "attr.parquet").exists():
            runs[name] = org.localization_hits(out / name, labels, wrong_line_of=responses)
    # The traces every segmentation holds (a trace skipped by one is left out of all).
    common = sorted(set.intersection(*(set(r[0]) for r in runs.values())))
    for name, (ids, hits, scored) in list(runs.items()):
        at = [ids.index(t) for t in common]
        runs[name] = (common, {k: v[at] for k, v in hits.items()},
                      {k: v[at] for k, v in scored.items()})
    rows = []
    for name, (_, hits, scored) in runs.items():
        baselines = {k: v for k, v in hits.items() if k.startswith("baseline")}
        best = max(baselines, key=lambda k: baselines[k].mean())
        for method in METHODS:
            if method not in hits:
                continue
            keep = scored[method] & runs["steps"][2].get(method, scored[method])
            h = hits[method][keep]
            if not len(h):
                continue
            row = {"segmentation": name, "method": method, "traces": int(keep.sum()),
                   "top1": round(float(h.mean()), 3),
                   "best_baseline": best.removeprefix("baseline: "),
                   "baseline_top1": round(float(baselines[best][keep].mean()), 3)}
            d, lo, hi = paired(h, baselines[best][keep], seed, boot)
            row.update(minus_baseline=round(d, 3), minus_baseline_low=round(lo, 3),
                       minus_baseline_high=round(hi, 3))
            if name != "steps":
                d, lo, hi = paired(h, runs["steps"][1][method][keep], seed, boot)
                row.update(minus_steps=round(d, 3), minus_steps_low=round(lo, 3),
                           minus_steps_high=round(hi, 3))
            rows.append(row)
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame) -> str:
    def iv(d, lo, hi):
        return "–" if pd.isna(d) else f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"

    lines = ["| segmentation | method | traces | top-1 | best baseline (top-1) | − baseline | "
             "− steps (paired) |", "|---|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        lines.append(
            f"| {r['segmentation']} | {r['method']} | {r['traces']} | {r['top1']:.3f} | "
            f"{r['best_baseline']} ({r['baseline_top1']:.3f}) | "
            f"{iv(r['minus_baseline'], r['minus_baseline_low'], r['minus_baseline_high'])} | "
            f"{iv(r.get('minus_steps'), r.get('minus_steps_low'), r.get('minus_steps_high'))} |")
    return "\n".join(lines) + "\n"


def shared_boundaries(study: Path, folder: Path, traces: list[str]) -> tuple[int, int]:
    """(boundaries a hybrid segmentation shares with the steps, those whose MC success counts
    differ) over `traces`: the same trace and reasoning-token boundary draw the same rollouts."""
    cols = ["trace_id", "token_start", "token_end", "n_correct", "value_before", "n_rollouts"]

    def counts(path: Path) -> pd.DataFrame:
        mc = pd.read_parquet(path, columns=cols)
        mc = mc[mc.trace_id.isin(traces)]
        ends = mc[["trace_id", "token_end", "n_correct"]].rename(columns={"token_end": "token"})
        # The prompt's boundary (token 0) has no row of its own: its value opens segment 1.
        first = mc[mc.token_start == 0]
        start = pd.DataFrame({"trace_id": first.trace_id, "token": 0,
                              "n_correct": (first.value_before * first.n_rollouts).round()})
        return pd.concat([ends, start]).drop_duplicates(["trace_id", "token"])

    both = counts(study / "mc.parquet").merge(counts(folder / "mc.parquet"),
                                               on=["trace_id", "token"])
    return len(both), int((both.n_correct_x != both.n_correct_y).sum())


def per_trace_agreement(folder: Path, traces: list[str], boot: int) -> pd.DataFrame:
    """Per-trace Spearman with MC (value differences) of each method and the position
    baseline, on `folder`'s segmentation and the given traces (`cotcredit compare`'s
    statistics, from the library)."""
    from cotcredit.pipeline import load_scores
    from cotcredit.report.compare import analyse

    scores = load_scores([folder / t for t in TABLES], [*METHODS, "mc"])
    scores = scores[scores.trace_id.isin(traces)]
    corr = analyse(scores, reference="mc", n_boot=boot, baselines="position").correlations
    per = corr.per_trace_agreement.xs("spearman", axis=1, level=1)
    return per[[m for m in (*METHODS, "position") if m in per.columns]]


def mc_agreement(study: Path, out: Path, boot: int, seed: int = 0) -> pd.DataFrame:
    """Amendment 1's table: per (segmentation, method), mean per-trace Spearman with that
    segmentation's MC, minus its position baseline and minus the steps (paired per trace)."""
    folders = {"steps": study, **{n: out / n for n in SEGMENTATIONS
                                  if (out / n / "mc.parquet").exists()}}
    done = [set(pd.read_parquet(f / "mc.parquet", columns=["trace_id"]).trace_id)
            for f in folders.values()]
    traces = sorted(set.intersection(*done))
    per = {name: per_trace_agreement(f, traces, boot) for name, f in folders.items()}
    rows = []
    for name, table in per.items():
        shared, differ = shared_boundaries(study, folders[name], traces) if name != "steps" \
            else (np.nan, np.nan)
        for method in table.columns:
            keep = table[method].notna() & table["position"].notna()
            if name != "steps":
                keep &= per["steps"][method].reindex(table.index).notna()
            x = table.loc[keep, method].to_numpy()
            if not len(x):
                continue
            mean = paired(x, np.zeros_like(x), seed, boot)
            row = {"segmentation": name, "method": method, "traces": len(x),
                   "spearman": mean[0], "low": mean[1], "high": mean[2],
                   "shared_boundaries": shared, "differing_counts": differ}
            if method != "position":
                d = paired(x, table.loc[keep, "position"].to_numpy(), seed, boot)
                row.update(minus_baseline=d[0], minus_baseline_low=d[1], minus_baseline_high=d[2])
            if name != "steps":
                d = paired(x, per["steps"][method].reindex(table.index)[keep].to_numpy(), seed,
                           boot)
                row.update(minus_steps=d[0], minus_steps_low=d[1], minus_steps_high=d[2])
            rows.append(row)
    columns = ["segmentation", "method", "traces", "spearman", "low", "high",
               "shared_boundaries", "differing_counts"]
    return pd.DataFrame(rows, columns=columns if not rows else None).round(3)


def agreement_markdown(table: pd.DataFrame) -> str:
    def iv(r, key):
        d = r.get(key)
        return "–" if d is None or pd.isna(d) else \
            f"{d:+.3f} [{r[key + '_low']:+.3f}, {r[key + '_high']:+.3f}]"

    lines = ["| segmentation | method | traces | mean Spearman with MC | − position baseline | "
             "− steps (paired) |", "|---|---|---|---|---|---|"]
    for r in table.to_dict("records"):
        lines.append(f"| {r['segmentation']} | {r['method']} | {r['traces']} | "
                     f"{r['spearman']:.3f} [{r['low']:.3f}, {r['high']:.3f}] | "
                     f"{iv(r, 'minus_baseline')} | {iv(r, 'minus_steps')} |")
    shared = table.dropna(subset=["shared_boundaries"]).drop_duplicates("segmentation")
    notes = [f"- `{r.segmentation}` shares {int(r.shared_boundaries)} boundaries with the steps; "
             f"MC success counts differ at {int(r.differing_counts)} of them."
             for r in shared.itertuples()]
    return "\n".join(lines + [""] + notes) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="study folder (default: this one)")
    ap.add_argument("--study", type=Path, default=HERE.parent / "organism_study",
                    help="the organism study's folder (its <regime>/traces.jsonl)")
    ap.add_argument("--regime", action="append", choices=REGIMES, help="default: both")
    ap.add_argument("--models", type=Path, default=None,
                    help="folder holding model-full/ and model-early/ (default: the shipped "
                         "checkpoints, studies.organism.model)")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--mc-traces", type=int, default=200,
                    help="Monte Carlo on the first N traces of each segmentation (0: none)")
    args = ap.parse_args(argv)
    org = organism_study()
    for regime in args.regime or REGIMES:
        study = args.study.resolve() / regime
        if not (study / "traces.jsonl").is_file():
            sys.exit(f"{study / 'traces.jsonl'}: no traces; run `make organism-study` first")
        out = args.out.resolve() / regime
        for name, k in SEGMENTATIONS.items():
            folder = out / name
            model = org.model_path(args, regime, folder)
            run_segmentation(org, study, folder, k, model, args.mc_traces, args.bootstrap)
        table = compare_segmentations(org, study, out, args.bootstrap)
        table.to_csv(out / "localization.csv", index=False)
        text = (f"Top-1 localization by segmentation, `{regime}` checkpoint (traces with a "
                "wrong step and a wrong answer that every segmentation's run scored; paired "
                f"per trace, 95% bootstrap CIs, {args.bootstrap} resamples)\n\n"
                + markdown(table))
        (out / "localization.md").write_text(text)
        print(text, flush=True)
        if args.mc_traces:
            agreement = mc_agreement(study, out, args.bootstrap)
            agreement.to_csv(out / "mc_agreement.csv", index=False)
            text = (f"Agreement with Monte Carlo by segmentation, `{regime}` checkpoint (each "
                    "segmentation against its own MC; the traces every segmentation's MC "
                    f"scored; paired per trace, 95% bootstrap CIs, {args.bootstrap} "
                    "resamples)\n\n" + agreement_markdown(agreement))
            (out / "mc_agreement.md").write_text(text)
            print(text, flush=True)


if __name__ == "__main__":
    main()
