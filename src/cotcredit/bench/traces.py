"""A regime's labelled on-policy traces: sampled with `cotcredit.generate` (the generation path
of every cotcredit command: seeded per problem and sample, batched, resumable) from the regime's
model, labelled by the regime's checker, cached and resumable.

    from cotcredit.bench.traces import regime_traces
    path = regime_traces("multipath", "dev", n_problems=300, samples_per_problem=4,
                         folder="~/.cache/cotcredit/bench")

writes (or extends) `<folder>/<regime>/<split>/`:

- `problems.jsonl`: the split's first `n_problems` problems (`Problem.to_json`);
- `raw.jsonl`: what `cotcredit generate` wrote (one line per sampled response, appended per
  problem: an interrupted run keeps what it finished and a rerun resumes; sample j of a problem
  is the same whenever it is drawn, so more problems or samples extend the set and the same
  seed gives the same traces);
- `traces.jsonl`: one line per response, with the checker's labels: id, problem_id, sample,
  prompt, response, answer, solution, solutions (every reference offered), correct (the
  checker's grade), outcome (1.0/0.0), error_char, first_error_step, error_kind, n_steps,
  departure_char, valid_departure, split, regime, finish_reason, n_tokens, model, seed. Every
  cotcredit command reads it (`error_char` is the localization field);
- `summary.json`: the counts by label kind and by first-error position (`summarize`).

Sampling follows the regime (`Regime.sampling`: temperature 1 for the organism regimes, as in
their evaluation). `reuse`: a `raw.jsonl`-style file of an earlier `cotcredit generate` run with
the same settings whose lines are taken instead of sampling them again (the `hops` test set
reuses the lookup study's 240 traces this way).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

from cotcredit.bench.regimes import get_regime
from cotcredit.bench.regimes.base import Problem, Regime, write_problems
from cotcredit.bench.regimes.hops import EMBEDDED
from cotcredit.errors import UserError
from cotcredit.store import io

# The trace sets of the full benchmark: (problems, samples per problem) of each regime's dev
# and test splits, sized for at least 150 traces with a wrong step and a wrong answer per split
# (and 60 validly departing correct traces on `multipath`, 60 wrong-step-right-answer traces
# on `forecast`, about one in twenty of its samples). hops: one sample per problem, as in the
# lookup study (its test set reuses that study's 240 traces, `reuse`).
TRACE_SETS: dict[str, dict[str, tuple[int, int]]] = {
    "unique": {"dev": (150, 4), "test": (150, 4)},
    "multipath": {"dev": (150, 4), "test": (150, 4)},
    "forecast": {"dev": (400, 4), "test": (400, 4)},
    "long": {"dev": (100, 4), "test": (100, 4)},
    "groups": {"dev": (30, 8), "test": (60, 8)},
    "hops": {"dev": (200, 1), "test": (240, 1)},
}
# Small labelled sets shipped in the package for quick runs where sampling is slow.
SHIPPED = {("hops", "test"): "hops-test-quick.jsonl", ("hops", "dev"): "hops-dev-quick.jsonl"}


def shipped_traces(regime: str, split: str) -> Path | None:
    """The labelled traces shipped for quick runs of a regime's split (the first 48 of the
    full `hops` test set, the first 16 of its dev set), or None."""
    name = SHIPPED.get((regime, split))
    return None if name is None else Path(str(resources.files("cotcredit.bench") / "data" / name))


def default_folder() -> Path:
    """Where the benchmark's traces are cached: `$COTCREDIT_CACHE/bench` (~/.cache/cotcredit)."""
    return Path(os.environ.get("COTCREDIT_CACHE", Path.home() / ".cache" / "cotcredit")) / "bench"


def cached_lines(regime: Regime, split: str, size, folder: Path
                 ) -> tuple[list[str], list[tuple[str, int]]]:
    """The cached trace lines a split of ``size`` (a ``BenchSize``: ``problems_for``,
    ``samples``) needs, in problem and sample order, and the (problem id, sample) of those
    the cache in ``folder`` lacks."""
    path = Path(folder) / regime.name / split / "traces.jsonl"
    found = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                found[(str(r.get("problem_id")), int(r.get("sample", 0)))] = line
    wanted = [(p.id, j) for p in regime.problems(split, size.problems_for(split))
              for j in range(size.samples)]
    return [found[k] for k in wanted if k in found], [k for k in wanted if k not in found]


def check_cached(regime: Regime, split: str, size, folder: Path) -> None:
    """A one-line error unless the cache in ``folder`` holds every trace the split needs."""
    lines, missing = cached_lines(regime, split, size, folder)
    if missing:
        path = Path(folder) / regime.name / split / "traces.jsonl"
        raise UserError(f"{path}: {len(missing)} of the {len(lines) + len(missing)} traces of "
                        f"the {regime.name} {split} split are not cached; run without "
                        f"--no-generate (or `python -m cotcredit.bench.traces {regime.name}`) "
                        "to sample them")


def model_argument(regime: Regime) -> str | None:
    """What a regime's model is for cotcredit's API (`model=`): its checkpoint folder, or None
    for the embedded default model."""
    model = regime.model()
    return None if model == EMBEDDED else model


def regime_traces(regime: Regime | str, split: str, n_problems: int, samples_per_problem: int,
                  folder: str | Path, seed: int = 0, *, model=None, reuse: str | Path | None = None,
                  progress: bool = False) -> Path:
    """Sample, label and cache a regime's traces (module docstring); returns the path of
    `traces.jsonl`. `model`: a loaded scorer (or model name) to use instead of loading the
    regime's own model."""
    from cotcredit.pipeline.generate import GenerateOptions, generate_traces

    regime = get_regime(regime) if isinstance(regime, str) else regime
    problems = regime.problems(split, n_problems)
    out = Path(folder).expanduser() / regime.name / split
    out.mkdir(parents=True, exist_ok=True)
    write_problems(problems, out / "problems.jsonl")
    raw = out / "raw.jsonl"
    if reuse is not None and not raw.exists():
        _take_lines(Path(reuse), raw, {p.id for p in problems})
    options = GenerateOptions(
        samples=samples_per_problem, temperature=regime.sampling["temperature"],
        top_p=regime.sampling["top_p"], max_new_tokens=regime.sampling["max_new_tokens"],
        seed=seed,
    )
    generate_traces(out / "problems.jsonl", raw,
                    model=model if model is not None else model_argument(regime),
                    options=options, progress=progress)
    path = out / "traces.jsonl"
    lines = label_lines(regime, problems, raw, split, samples_per_problem)
    io.write_atomic(path, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
    io.write_atomic(out / "summary.json", json.dumps(summarize(lines), indent=1) + "\n")
    return path


def label_lines(regime: Regime, problems: list[Problem], raw: Path, split: str,
                samples: int) -> list[dict]:
    """The labelled trace lines of `problems` (their first `samples` samples, in problem and
    sample order) from a raw `cotcredit generate` file."""
    found: dict[tuple[str, int], dict] = {}
    with open(raw, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                found[(str(obj["problem_id"]), int(obj["sample"]))] = obj
    out = []
    for p in problems:
        for j in range(samples):
            g = found[(p.id, j)]
            label = regime.check(p, g["response"])
            out.append({
                "id": g["id"], "problem_id": p.id, "sample": j, "prompt": p.prompt,
                "response": g["response"], "answer": p.answer, "solution": p.solution,
                "solutions": list(p.solutions), "correct": label.correct,
                "outcome": float(label.correct), "error_char": label.error_char,
                "first_error_step": label.first_error_step, "error_kind": label.error_kind,
                "n_steps": label.n_steps, "departure_char": label.departure_char,
                "valid_departure": label.valid_departure, "split": split,
                "regime": regime.name, "finish_reason": g.get("finish_reason"),
                "n_tokens": g.get("n_tokens"), "model": g.get("model"), "seed": g.get("seed"),
            })
    return out


def summarize(lines: list[dict]) -> dict:
    """Counts of a trace set by label kind and by first-error position.

    - `wrong_step_wrong_answer`: a wrong step and a wrong answer (where localization is
      measured), with their first-error positions (`first_error_step`) and kinds;
    - `wrong_step_right_answer`: a wrong step that did not change the answer;
    - `right_steps_wrong_answer`: every step right, the answer mis-stated or missing;
    - `correct_valid_departure`: right answer, every step right, not the reference's path;
    - `correct_reference_path`: right answer, the reference's path throughout;
    - `departure_at_first_error`: among `wrong_step_wrong_answer`, the share whose departure
      from the reference is their first wrong step (where `refdiff`, the first line that
      differs from the reference, localizes it);
    - `correct_departing_validly`: among correct traces, the share that depart from the
      reference with every step right (where `refdiff` blames a valid step)."""
    wrong_step = [x for x in lines if x["error_char"] >= 0]
    wswa = [x for x in wrong_step if not x["correct"]]
    correct = [x for x in lines if x["correct"]]
    return {
        "traces": len(lines),
        "problems": len({x["problem_id"] for x in lines}),
        "correct": sum(x["correct"] for x in lines),
        "wrong_step_wrong_answer": len(wswa),
        "wrong_step_right_answer": sum(x["correct"] for x in wrong_step),
        "right_steps_wrong_answer": sum(x["error_char"] < 0 and not x["correct"] for x in lines),
        "correct_valid_departure": sum(x["correct"] and x["valid_departure"] for x in lines),
        "correct_reference_path": sum(
            x["correct"] and x["error_char"] < 0 and x["departure_char"] < 0 for x in lines),
        "truncated": sum(x.get("finish_reason") == "length" for x in lines),
        "first_error_step": dict(sorted(Counter(x["first_error_step"] for x in wswa).items())),
        "error_kind": dict(Counter(x["error_kind"] for x in wrong_step).most_common()),
        "departure_at_first_error": _share(x["departure_char"] == x["error_char"] for x in wswa),
        "correct_departing_validly": _share(x["valid_departure"] for x in correct),
    }


def collect_summaries(folder: Path, path: Path) -> dict:
    """Every `summary.json` under `folder` (regime -> split -> counts, with the set's size and
    seed) written to `path`: the small table the documentation shows."""
    out: dict = {}
    for name, sets in TRACE_SETS.items():
        for split, (n, k) in sets.items():
            found = Path(folder) / name / split / "summary.json"
            if found.exists():
                out.setdefault(name, {})[split] = {
                    "problems_asked": n, "samples_per_problem": k,
                    **json.loads(found.read_text())}
    io.write_atomic(Path(path), json.dumps(out, indent=1) + "\n")
    return out


def _share(flags) -> float | None:
    flags = list(flags)
    return round(sum(flags) / len(flags), 4) if flags else None


def _take_lines(src: Path, dest: Path, ids: set[str]) -> None:
    """Copy the lines of `src` whose problem is among `ids` into `dest`."""
    with open(src, encoding="utf-8") as f:
        keep = [ln for ln in f if ln.strip() and str(json.loads(ln).get("problem_id")) in ids]
    io.write_atomic(dest, "".join(keep))


def main(argv=None) -> int:
    """Build the full benchmark's trace sets (`TRACE_SETS`): resumable, the same seed gives the
    same traces."""
    ap = argparse.ArgumentParser(description="Sample and label the benchmark's trace sets.")
    ap.add_argument("regimes", nargs="*", default=list(TRACE_SETS), help="[default: all]")
    ap.add_argument("--split", action="append", choices=("dev", "test"))
    ap.add_argument("--folder", type=Path, default=None, help="[default: %(default)s]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reuse", type=Path, help="hops test: the lookup study's raw_traces.jsonl")
    ap.add_argument("--summary", type=Path,
                    help="only collect the summaries of every trace set in the folder into "
                    "this JSON file (regime -> split -> counts)")
    args = ap.parse_args(argv)
    folder = args.folder or default_folder()
    if args.summary:
        collect_summaries(folder, args.summary)
        return 0
    for name in args.regimes:
        for split in args.split or ("dev", "test"):
            n, k = TRACE_SETS[name][split]
            reuse = args.reuse if (name, split) == ("hops", "test") else None
            path = regime_traces(name, split, n, k, folder, args.seed, reuse=reuse)
            summary = json.loads((path.parent / "summary.json").read_text())
            print(f"{path}: {json.dumps(summary)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
