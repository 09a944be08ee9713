"""Which credit methods find the first wrong step, and which track Monte Carlo, on the organism.

    python -m studies.organism_study.run_study            # or: make organism-study (~1.5 h)
    python -m studies.organism_study.run_study --out DIR --traces 4 --rollouts 4   # a quick look
    python -m studies.organism_study.run_study --reproduce 40   # rerun 40 traces, compare

Every model step is a `cotcredit` command as a user types it, run in the study folder; each
resumes what it finished, so rerunning the script continues an interrupted study. The protocol
is fixed here, before any result was seen:

- Models: both organism checkpoints, model-full (trained on full chains only; the benchmark's
  `unique` checkpoint) and model-early (its data also states the final answer after a random
  number of steps; studies/organism/).
  Everything below runs for each, in its own folder (`<out>/<regime>/`).
- Traces: the first `--traces` held-out problems (studies/organism/problems/test.jsonl), one
  on-policy trace each at temperature 1, seed 0, at most 64 new tokens (`cotcredit generate`).
  The checker (`cotcredit.bench.organism.checker`) adds to each trace `error_char` (character offset
  of the first wrong step, -1 when every step is right), `first_error_step` and `error_kind`.
- Segmentation: one segment per reasoning line (= per step). Candidate cuts are the line
  breaks, so `cotcredit segment -k L` on traces with L reasoning lines keeps every line and
  merges none; traces are segmented in groups of equal L and the groups' tables joined into
  one segmentation (segments.parquet) that every method reuses (--segments-file).
- Answer forcing: the task's own answer line, exit string "The answer is " (the organism's
  numbers are single tokens, so p(Y*) needs no terminator).
- Methods: RREDCoT with R̂ alone (rredcot-rhat, the default since 0.3), R̂ + v̂ in probability
  space over the remaining reference steps (rredcot; `--value both --solution-part remaining`,
  what `--value both` means since 0.3), and the same with per-token-normalised v̂
  (rredcot-norm); leave-one-out; Shapley (exact up to 6 segments);
  integrated gradients (`--ig-steps`); Monte Carlo with `--rollouts` rollouts per boundary at
  temperature 1, at most 48 new tokens, cut-off rollouts wrong, every rollout saved
  (rollouts.parquet); on the first `--mc-traces` traces when given (a run that must fit a
  time budget says so in its report), else on all.
- Primary comparisons: (1) localization: on traces with a wrong step and a wrong answer, how
  often a method's lowest-credit segment holds `error_char`, against text-free baselines (a
  uniformly random segment; the segment at the most frequent first-error position of the
  other traces, leave-one-out), with each method's paired difference from the best baseline
  and its bootstrap CI; (2) MC tracking: `cotcredit compare` with MC as the reference.
- Costs: wall seconds of every step (steps.json).

Tracked in each `<regime>/` folder (the rest is regenerated): localization.md/.csv,
traces_summary.json, steps.json, pairs.md (rredcot − mc, added after the results) and
comparison.md (the text of `cotcredit compare`'s report with the rollout equivalence and the
median cost per trace).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.data import reasoning_end
from cotcredit.report.bootstrap import mean_interval
from studies import organism
from studies.organism.problems import problem_file
from studies.summaries import write_comparison

HERE = Path(__file__).resolve().parent
REGIMES = organism.REGIMES
EXIT = "The answer is "
METHODS = ("rredcot-rhat", "rredcot", "rredcot-norm", "loo", "shapley", "gradient-ig", "mc")


def run(out: Path, name: str, argv: list[str], log: dict, always: bool = False) -> None:
    """One `cotcredit` command in the study folder (it resumes itself); its wall time logged.

    A step logged as finished with the same command is skipped, so a rerun keeps the recorded
    cost of finished work (`always` reruns it: the report, redrawn from whatever tables
    exist). A step interrupted earlier is marked `"resumed": true`: its seconds then count only
    the run that finished it."""
    command = "cotcredit " + shlex.join(argv)
    entry = log.get(name, {})
    if entry.get("command") == command and "seconds" in entry and not always:
        print(f"== {name}: done ({entry['seconds']} s)", flush=True)
        return
    print(f"== {name}: {command}", flush=True)
    resumed = entry.get("command") == command and "seconds" not in entry  # never finished
    log[name] = {"command": command, "started": True}
    _write_log(out, log)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cotcredit", *argv], cwd=out)
    if proc.returncode != 0:
        sys.exit(f"study stopped at step '{name}' (exit {proc.returncode}); rerun to resume")
    log[name] = {"command": command, "seconds": round(time.perf_counter() - t0, 1),
                 **({"resumed": True} if resumed else {})}
    _write_log(out, log)


def read_log(out: Path) -> dict:
    """The steps a study folder has run (steps.json), {} before the first."""
    path = out / "steps.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _write_log(out: Path, log: dict) -> None:
    (out / "steps.json").write_text(json.dumps(log, indent=1) + "\n")


def organism_check(trace: dict):
    """The organism checker's verdict on one trace."""
    from cotcredit.bench.organism.checker import check_response
    from cotcredit.bench.organism.task import parse_prompt

    return check_response(parse_prompt(trace["prompt"]), trace["response"])


def label_traces(raw: Path, dest: Path, check=organism_check) -> pd.DataFrame:
    """Add a checker's first-error fields (`check(trace)`: error_char, first_error_step,
    error_kind, correct) to every trace; returns them as a frame."""
    rows = []
    with open(raw) as f, open(dest.with_suffix(".tmp"), "w") as g:
        for line in f:
            t = json.loads(line)
            c = check(t)
            t.update(error_char=c.error_char, first_error_step=c.first_error_step,
                     error_kind=c.error_kind, checker_correct=c.correct)
            g.write(json.dumps(t) + "\n")
            rows.append({"trace_id": t["id"], "lines": reasoning_lines(t["response"]),
                         **c.to_dict()})
    dest.with_suffix(".tmp").replace(dest)
    return pd.DataFrame(rows)


def write_traces_summary(out: Path, labels: pd.DataFrame) -> None:
    """traces_summary.json: how many traces are right, where their first errors fall, how many
    reasoning lines they have and, once segments.parquet exists, how many of them got one
    segment per line."""
    hist = labels[labels.first_error_step > 0].first_error_step.value_counts().sort_index()
    summary = {
        "traces": len(labels), "correct": int(labels.correct.sum()),
        "steps_right": int((labels.error_char < 0).sum()),
        "wrong_step_right_answer": int(((labels.error_char >= 0) & labels.correct).sum()),
        "first_error_step_histogram": {int(k): int(v) for k, v in hist.items()},
        "error_kinds": labels[labels.error_kind != ""].error_kind.value_counts().to_dict(),
        "reasoning_lines": {"min": int(labels.lines.min()), "median": float(labels.lines.median()),
                            "max": int(labels.lines.max())},
    }
    if (out / "segments.parquet").exists():
        summary.update(segments_per_line(out, labels))
    (out / "traces_summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def segments_per_line(out: Path, labels: pd.DataFrame) -> dict[str, int]:
    """How many segmented traces got exactly one segment per reasoning line: as many segments
    as lines, every cut right after a line break (a keyword cut can take a break's place)."""
    seg = pd.read_parquet(out / "segments.parquet", columns=["trace_id", "segment", "char_start"])
    responses = {t["id"]: t["response"] for t in map(
        json.loads, (out / "traces.jsonl").read_text().splitlines())}
    lines = labels.set_index("trace_id").lines
    per_line = 0
    for tid, g in seg.groupby("trace_id"):
        cuts = g.sort_values("segment").char_start.iloc[1:]
        per_line += bool(len(g) == lines.get(tid) and all(
            0 < c and responses[tid][c - 1] == "\n" for c in cuts))
    return {"segmented": int(seg.trace_id.nunique()), "one_segment_per_line": per_line}


def reasoning_lines(response: str) -> int:
    """How many pieces `cotcredit segment` may cut the reasoning into: its line breaks (runs of
    them) that are followed by more reasoning, plus one."""
    reasoning = response[: reasoning_end(response)]
    return 1 + sum(m.end() < len(reasoning) for m in re.finditer(r"\n+", reasoning))


def segment_by_lines(out: Path, labels: pd.DataFrame, model: str | None, log: dict) -> None:
    """segments.parquet: one segment per reasoning line, via `segment -k L` per group of L
    (`model` None: the embedded default)."""
    if (out / "segments.parquet").exists():
        return
    traces = {json.loads(x)["id"]: x for x in (out / "traces.jsonl").read_text().splitlines()}
    parts = []
    for n_lines, group in labels.groupby("lines"):
        name = f"lines{n_lines}"
        (out / f"{name}.jsonl").write_text("".join(traces[i] + "\n" for i in group.trace_id))
        run(out, f"segmentation, {n_lines} lines",
            ["segment", f"{name}.jsonl", "-o", f"{name}-segments", "-k", str(n_lines),
             *(["--model", model] if model else []), "--on-error", "skip", "-q"], log)
        parts.append(pd.read_parquet(out / f"{name}-segments"))
    pd.concat(parts, ignore_index=True).to_parquet(out / "segments.parquet")


def localization_hits(out: Path, labels: pd.DataFrame, segments: Path | None = None,
                      wrong_line_of: dict[str, str] | None = None, skip: tuple[str, ...] = (),
                      ) -> tuple[list[str], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per trace with a wrong step and a wrong answer (sorted ids): for every method and
    text-free baseline, 1 if its lowest-scored segment holds `error_char` (the random-segment
    baseline: 1/K), and which of those traces each method scored.

    `wrong_line_of` (trace id -> response) counts a hit for any segment that overlaps the
    first wrong *line* (`error_char` to its line break), for segmentations that cut inside
    lines: the wrong token (a misread operand, a wrong result) sits inside the line, not at its
    first character. With one segment per line both rules are the same. Methods in `skip`
    are left out (a table still being filled)."""
    seg = pd.read_parquet(segments or out / "segments.parquet")
    lab = labels.set_index("trace_id")
    wrong = [t for t in lab.index if lab.loc[t, "error_char"] >= 0 and not lab.loc[t, "correct"]]
    hit_segment: dict[str, int] = {}
    targets: dict[str, set[int]] = {}  # the segments that count as a hit
    n_segments: dict[str, int] = {}
    for tid, g in seg.groupby("trace_id"):
        if tid not in wrong:
            continue
        e = int(lab.loc[tid, "error_char"])
        g = g.sort_values("segment")
        inside = g[(g.char_start <= e) & (e < g.char_end)]
        # An error at the end of the reasoning (a missing step) belongs to the last segment.
        hit_segment[tid] = int(inside.segment.iloc[0]) if len(inside) else int(g.segment.max())
        targets[tid] = {hit_segment[tid]}
        if wrong_line_of is not None and len(inside):
            text = wrong_line_of[tid]
            end = text.find("\n", e)
            end = len(text) if end < 0 else end
            targets[tid] |= set(g[(g.char_start < end) & (g.char_end > e)].segment.astype(int))
        n_segments[tid] = len(g)
    ids = sorted(hit_segment)
    hits: dict[str, np.ndarray] = {}
    scores = _scores(out)
    scored: dict[str, np.ndarray] = {}  # per method: which of `ids` it scored
    for method, table in scores.items():
        if method in skip:
            continue
        table = table[np.isfinite(table.score)]
        low = table.score == table.groupby("trace_id").score.transform("min")
        # A tied minimum counts 1/m when the erroneous segment is among the m tied segments
        # (a random tie-break), as in `cotcredit compare`'s localization.
        lowest = table[low].groupby("trace_id").segment.agg(list)
        hits[method] = np.array([
            len(targets[t] & set(lowest[t])) / len(lowest[t]) if t in lowest.index else 0.0
            for t in ids])
        scored[method] = np.array([t in lowest.index for t in ids])
    hits["baseline: random segment"] = np.array([len(targets[t]) / n_segments[t] for t in ids])
    counts = Counter(hit_segment[t] for t in ids)
    mode_hits = []
    for t in ids:  # the most frequent first-error segment among the *other* traces
        c = counts.copy()
        c[hit_segment[t]] -= 1
        mode_hits.append(float(max(c, key=lambda s: (c[s], -s)) in targets[t]))
    hits["baseline: most frequent position"] = np.array(mode_hits)
    return ids, hits, scored


def localization(out: Path, labels: pd.DataFrame, seed: int = 0, boot: int = 2000,
                 skip: tuple[str, ...] = ()) -> pd.DataFrame:
    """Top-1 localization of the first wrong step per method and text-free baseline, with
    bootstrap CIs and each method's paired difference from the best baseline. Every row's
    interval comes from the same resamples of the traces (`mean_interval`, one seed), so a row's
    CI depends on its own hits alone, not on the rows before it."""
    ids, hits, scored = localization_hits(out, labels, skip=skip)
    best = max((k for k in hits if k.startswith("baseline")), key=lambda k: hits[k].mean())
    rows = []
    for method, h in hits.items():
        # A method that scored only some traces (a run stopped early, MC on a subset) is
        # compared with the baseline on those traces only, paired.
        keep = scored.get(method, np.ones(len(ids), bool))
        mine = np.where(keep, h, np.nan)
        mean, low, high = mean_interval(mine, boot, seed)
        diff, diff_low, diff_high = mean_interval(mine - hits[best], boot, seed)
        rows.append({
            "method": method, "traces": int(keep.sum()), "hit_rate": round(mean, 3),
            "ci_low": round(low, 3), "ci_high": round(high, 3),
            "minus_best_baseline": round(diff, 3),
            "diff_ci_low": round(diff_low, 3), "diff_ci_high": round(diff_high, 3),
        })
    table = pd.DataFrame(rows)
    table.to_csv(out / "localization.csv", index=False)
    (out / "localization.md").write_text(
        f"Top-1 localization of the first wrong step ({len(ids)} traces with a wrong step and "
        f"a wrong answer; best text-free baseline: {best}; 95% bootstrap CIs, {boot} "
        "resamples of traces)\n\n" + _markdown(table)
    )
    return table


def _markdown(table: pd.DataFrame) -> str:
    head = "| " + " | ".join(table.columns) + " |\n|" + "---|" * len(table.columns) + "\n"
    return head + "".join("| " + " | ".join(str(v) for v in row) + " |\n"
                          for row in table.itertuples(index=False))


SCORE_TABLES = ("rredcot.parquet", "rredcot_rhat.parquet", "rredcot_norm.parquet",
                "attr.parquet", "loo.parquet", "mc.parquet")


def _scores(out: Path) -> dict[str, pd.DataFrame]:
    """Every method's scores over the study's tables; a method in several tables (LOO on a
    subset with Shapley and on every trace alone) is their union, one row per segment."""
    parts: dict[str, list[pd.DataFrame]] = {}
    for folder in SCORE_TABLES:
        if (out / folder).exists():
            df = pd.read_parquet(out / folder)
            for method, g in df.groupby("method"):
                parts.setdefault(str(method), []).append(g)
    return {m: pd.concat(p, ignore_index=True).drop_duplicates(["trace_id", "segment"])
            for m, p in parts.items()}


def study(out: Path, model: str, args) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = read_log(out)
    if args.report_only:
        labels = label_traces(out / "raw_traces.jsonl", out / "traces.jsonl")
        report(out, labels, args, log)
        return
    lines = problem_file("test").read_text().splitlines(keepends=True)[: args.traces]
    (out / "problems.jsonl").write_text("".join(lines))
    run(out, "traces", ["generate", "problems.jsonl", "-o", "raw_traces.jsonl", "--samples", "1",
                        "--temperature", "1", "--max-new-tokens", "64", "--seed", "0",
                        "--model", model, "-q"], log)
    labels = label_traces(out / "raw_traces.jsonl", out / "traces.jsonl")
    segment_by_lines(out, labels, model, log)
    write_traces_summary(out, labels)
    common = ["--model", model, "--segments-file", "segments.parquet", "--on-error", "skip",
              "--timings", "-q"]
    forcing = ["--exit-string", EXIT]
    run(out, "RREDCoT, R̂ alone", ["redistribute", "traces.jsonl", "-o", "rredcot_rhat.parquet",
                                  "--value", "rhat", "--label", "rredcot-rhat", *common,
                                  *forcing], log)
    vhat = ["--value", "both", "--solution-part", "remaining"]
    run(out, "RREDCoT", ["redistribute", "traces.jsonl", "-o", "rredcot.parquet", *vhat, *common,
                         *forcing], log)
    run(out, "RREDCoT, normalised v̂", ["redistribute", "traces.jsonl", "-o",
                                        "rredcot_norm.parquet", *vhat, "--length-norm",
                                        "--label", "rredcot-norm", *common, *forcing], log)
    run(out, "LOO, Shapley, IG", ["attribute", "traces.jsonl", "-o", "attr.parquet", "--method",
                                  "loo,shapley,gradient", "--gradient", "ig", "--steps",
                                  str(args.ig_steps), "--exact-max", "6", *common, *forcing], log)
    mc_subset = ["--max-traces", str(args.mc_traces)] if args.mc_traces else []
    run(out, "Monte Carlo", mc_command("traces.jsonl", args.rollouts, *mc_subset, *common), log)
    report(out, labels, args, log)


def mc_command(traces: str, rollouts: int, *extra: str) -> list[str]:
    """The study's Monte Carlo command (the segmentation study reruns it on its boundaries):
    `rollouts` per boundary at T = 1, at most 48 new tokens, rollouts saved beside mc.parquet."""
    return ["mc-baseline", traces, "-o", "mc.parquet", "--rollouts", str(rollouts),
            "--temperature", "1", "--max-new-tokens", "48", "--save-rollouts", "rollouts.parquet",
            "--batch-size", "128", *extra]


# Secondary, added after the results: RREDCoT against Monte Carlo as localizers (pairs.md).
PAIRS = (("rredcot", "mc"),)


def report(out: Path, labels: pd.DataFrame, args, log: dict) -> None:
    """Localization table, `cotcredit compare` over the score tables that exist, and the
    tracked summaries drawn from them (pairs.md, comparison.md)."""
    localization(out, labels, boot=args.bootstrap)
    tables = [t for t in ("rredcot_rhat.parquet", "rredcot.parquet", "rredcot_norm.parquet",
                          "attr.parquet", "mc.parquet") if (out / t).exists()]
    run(out, "report", ["compare", "--scores", *tables, "-o", "report", "--bootstrap",
                        str(args.bootstrap), "--overwrite", "-q"], log, always=True)
    method_pairs(out, labels, PAIRS, args.bootstrap)
    write_comparison(out, tables)


def method_pairs(out: Path, labels: pd.DataFrame, pairs, boot: int,
                 skip: tuple[str, ...] = ()) -> pd.DataFrame:
    """Top-1 localization of one method (or baseline) minus another, paired over the traces
    both scored, with a bootstrap CI (`pairs.md`)."""
    ids, hits, scored = localization_hits(out, labels, skip=skip)
    everywhere = np.ones(len(ids), bool)  # the text-free baselines score every trace
    rows = []
    for a, b in pairs:
        if a not in hits or b not in hits:
            continue
        both = scored.get(a, everywhere) & scored.get(b, everywhere)
        d, low, high = mean_interval(np.where(both, hits[a] - hits[b], np.nan), boot)
        rows.append({"method": a, "minus": b, "traces": int(both.sum()),
                     "difference": round(d, 3), "ci_low": round(low, 3),
                     "ci_high": round(high, 3)})
    table = pd.DataFrame(rows, columns=["method", "minus", "traces", "difference", "ci_low",
                                        "ci_high"])
    (out / "pairs.md").write_text(
        "Top-1 localization, one method minus another, paired over the traces both scored "
        f"(95% bootstrap CIs, {boot} resamples)\n\n" + _markdown(table))
    return table


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="study folder (default: this one)")
    ap.add_argument("--regime", action="append", choices=REGIMES, help="default: both")
    ap.add_argument("--traces", type=int, default=500, help="held-out problems, one trace each")
    ap.add_argument("--rollouts", type=int, default=128, help="Monte Carlo rollouts per boundary")
    ap.add_argument("--mc-traces", type=int, default=None,
                    help="Monte Carlo on the first N traces only (default: all)")
    ap.add_argument("--ig-steps", type=int, default=16, help="integrated-gradients steps")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--report-only", action="store_true",
                    help="only redraw localization and the report from the tables there")
    ap.add_argument("--models", type=Path, default=None,
                    help="folder holding model-full/ and model-early/ (default: the shipped "
                         "checkpoints, studies.organism.model)")
    ap.add_argument("--reproduce", type=int, metavar="N",
                    help="rerun the first N traces of each regime in a temporary folder and "
                         "compare every table with the study's (exit 1 if one differs)")
    args = ap.parse_args(argv)
    if args.reproduce:
        sys.exit(0 if reproduce(args) else 1)
    for regime in args.regime or REGIMES:
        out = args.out.resolve() / regime
        study(out, model_path(args, regime, out), args)


def model_path(args, regime: str, out: Path) -> str:
    """The checkpoint of `regime`, relative to the study folder `out`, so that the tables'
    metadata carry no machine path."""
    folder = args.models / f"model-{regime}" if args.models else organism.model(regime)
    return os.path.relpath(folder.resolve(), out)


def reproduce(args) -> bool:
    """Rerun the first `args.reproduce` traces of each regime and compare with the study's
    tables in `args.out` (studies/reproduce.py); True when every table reproduces."""
    check = load_reproduce()
    small = copy.copy(args)
    small.traces, small.mc_traces, small.bootstrap = args.reproduce, None, 200
    ok = True
    with tempfile.TemporaryDirectory(prefix="organism-study-check-") as tmp:
        for regime in args.regime or REGIMES:
            reference = args.out.resolve() / regime
            if not (reference / "traces.jsonl").is_file():
                sys.exit(f"error: {reference}: no study tables to compare with; run the study "
                         "first (make organism-study): its tables are regenerated, not tracked")
            out = Path(tmp) / regime
            study(out, model_path(args, regime, out), small)
            result = check.compare_runs(reference, out, SCORE_TABLES)
            print(f"[{regime}] " + ("REPRODUCED" if result.ok else "NOT REPRODUCED"))
            print("\n".join("  " + line for line in result.lines()))
            ok &= result.ok
    return ok


def load_reproduce():
    """studies/reproduce.py, the run-against-run comparison every study shares."""
    from studies import reproduce

    return reproduce


if __name__ == "__main__":
    main()
