"""Does the segmentation matter? The organism's methods on the tool's own segmentation against
one segment per step.

    python examples/organism_segmentation/run_study.py       # or: make organism-segmentation
    python examples/organism_segmentation/run_study.py --out DIR --study DIR  # elsewhere

It reads the traces of the organism study (examples/organism_study/<regime>/traces.jsonl, made
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
  reference steps) and loo. Shapley and integrated gradients are left out for CPU time (on the
  step segmentation they localize no better than LOO). Monte Carlo is not rerun: its boundaries differ per
  segmentation, and MC agreement is the organism study's.
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
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REGIMES = ("full", "early")
SEGMENTATIONS = {"k8": 8, "k4": 4}
METHODS = ("rredcot-rhat", "rredcot", "loo")
EXIT = "The answer is "


def organism_study():
    """The organism study's script as a module (its run, labels and localization)."""
    spec = importlib.util.spec_from_file_location(
        "organism_study", ROOT / "examples" / "organism_study" / "run_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_segmentation(org, study: Path, out: Path, k: int, model: str) -> None:
    """One hybrid segmentation with -k `k` and the methods on it, in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    log: dict = json.loads((out / "steps.json").read_text()) if (out / "steps.json").exists() else {}
    traces = os.path.relpath(study / "traces.jsonl", out)
    org.run(out, f"segmentation -k {k}", ["segment", traces, "-o", "segments.parquet", "-k",
                                           str(k), "--model", model, "--on-error", "skip",
                                           "-q"], log)
    common = ["--model", model, "--segments-file", "segments.parquet", "--on-error", "skip",
              "--timings", "-q", "--exit-string", EXIT]
    org.run(out, "RREDCoT, R̂ alone", ["redistribute", traces, "-o", "rredcot_rhat.parquet",
                                      "--value", "rhat", "--label", "rredcot-rhat", *common], log)
    org.run(out, "RREDCoT", ["redistribute", traces, "-o", "rredcot.parquet", "--value", "both",
                             "--solution-part", "remaining", *common], log)
    org.run(out, "LOO", ["attribute", traces, "-o", "attr.parquet", "--method", "loo",
                         *common], log)


def paired(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, boot: int) -> tuple:
    """Mean of a − b over traces and its 95% percentile-bootstrap interval."""
    d = a - b
    if not len(d):
        return float("nan"), float("nan"), float("nan")
    idx = rng.integers(0, len(d), size=(boot, len(d)))
    means = d[idx].mean(axis=1)
    return float(d.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def compare_segmentations(org, study: Path, out: Path, boot: int, seed: int = 0) -> pd.DataFrame:
    """One row per (segmentation, method): top-1, the best baseline, and paired differences
    from the steps segmentation and from that baseline, on the traces every run scored."""
    labels = org.label_traces(study / "raw_traces.jsonl", study / "traces.jsonl")
    runs = {"steps": org.localization_hits(study, labels)}
    for name in SEGMENTATIONS:
        if (out / name / "attr.parquet").exists():
            runs[name] = org.localization_hits(out / name, labels)
    # The traces every segmentation holds (a trace skipped by one is left out of all).
    common = sorted(set.intersection(*(set(r[0]) for r in runs.values())))
    for name, (ids, hits, scored) in list(runs.items()):
        at = [ids.index(t) for t in common]
        runs[name] = (common, {k: v[at] for k, v in hits.items()},
                      {k: v[at] for k, v in scored.items()})
    rng = np.random.default_rng(seed)
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
            d, lo, hi = paired(h, baselines[best][keep], rng, boot)
            row.update(minus_baseline=round(d, 3), minus_baseline_low=round(lo, 3),
                       minus_baseline_high=round(hi, 3))
            if name != "steps":
                d, lo, hi = paired(h, runs["steps"][1][method][keep], rng, boot)
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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="study folder (default: this one)")
    ap.add_argument("--study", type=Path, default=ROOT / "examples" / "organism_study",
                    help="the organism study's folder (its <regime>/traces.jsonl)")
    ap.add_argument("--regime", action="append", choices=REGIMES, help="default: both")
    ap.add_argument("--models", type=Path, default=ROOT / "examples" / "organism")
    ap.add_argument("--bootstrap", type=int, default=2000)
    args = ap.parse_args(argv)
    org = organism_study()
    for regime in args.regime or REGIMES:
        study = args.study.resolve() / regime
        if not (study / "traces.jsonl").is_file():
            sys.exit(f"{study / 'traces.jsonl'}: no traces; run `make organism-study` first")
        out = args.out.resolve() / regime
        for name, k in SEGMENTATIONS.items():
            folder = out / name
            model = os.path.relpath((args.models / f"model-{regime}").resolve(), folder)
            run_segmentation(org, study, folder, k, model)
        table = compare_segmentations(org, study, out, args.bootstrap)
        table.to_csv(out / "localization.csv", index=False)
        text = (f"Top-1 localization by segmentation, `{regime}` checkpoint (traces with a "
                "wrong step and a wrong answer that every segmentation's run scored; paired "
                f"per trace, 95% bootstrap CIs, {args.bootstrap} resamples)\n\n"
                + markdown(table))
        (out / "localization.md").write_text(text)
        print(text, flush=True)


if __name__ == "__main__":
    main()
