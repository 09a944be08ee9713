"""Does credit assignment help GRPO here at all? Positive and negative controls, two advantage
forms, enough seeds.

    python -m studies.training.run_study pilot                 # the positive-control pilot
    python -m studies.training.run_study main                  # the main runs (after the pilot)
    python -m studies.training.run_study main --worker 1/2     # one of two parallel workers
    python -m studies.training.run_study summary pilot|main    # tables and curves only

Every run is `cotcredit.train` (the Python API of `cotcredit train`) on a bench regime's
checkpoint (`cotcredit.bench`), the arms differing only in `advantage` (the credit source) and
`credit.form`. Runs are resumable: a finished run is skipped, a started one continues from its
last checkpoint (saved at every evaluation). Runs go seed by seed, all arms of a seed before the
next, so an interrupted study stays balanced. Workers split the plan (run i goes to worker
i mod n); launch them with `nice -n 10` and `OMP_NUM_THREADS=1` (one thread: a 0.8M-parameter
model gains nothing from more, and on a shared 2-core machine threads cost 20x).

PROTOCOL (written before any run; amendments are dated and say what had been seen)

Shared settings (fixed before any run, not tuned): 2 prompts x 8 completions per step
(temperature 1), 150 steps, learning rate 1e-4 (the organism study's, chosen there on dev data),
beta 0, Adam (TRL defaults); segments = one per reasoning line (`credit.segments: lines`: the
organism writes one step per line; v̂ and Monte Carlo localise only on step segments, see the
organism segmentation study); reweight's strength 3, floor 0 (the defaults); RREDCoT with
R̂ + v̂ (`value: both`, exit string "The answer is "); Monte Carlo with 4 rollouts per boundary
(the boundaries inside the reasoning; the last state's value is the completion's own outcome);
the oracle is the regime's checker (`oracle.regime`). Training problems: the regime's train
split (5,000; a run sees 300 of them, each once, in an order fixed by the seed: every arm of a
seed trains on the same problems in the same order).

Metrics, per run:
- `online` (primary): the mean training reward over steps 76-150 — the sampled accuracy of
  the current policy on problems it has never trained on (each training problem is seen once),
  16 completions per step, 1,200 per run; the same problems for every arm of a seed. Free (the
  training generates them) and the least noisy learning-speed measure this budget allows.
- `final` (held-out): accuracy of the final checkpoint on 200 problems x 4 samples
  (temperature 1, sampling seed = the run's seed) of the regime's dev split in the pilot and of
  its test split in the main runs (the test split is not looked at before the main runs).
Every comparison is a paired difference by seed with its 95% t-interval over seeds.

1. Pilot (positive control): arms `grpo`, `oracle` (reweight) and `oracle-sr`
   (segment-rewards) on `unique` (the organism), and on `long` and `multipath` when their
   checkpoints exist; seeds 0-3 (0-7: amendment 2). Question: does the oracle beat grpo, and by how much? A regime
   where no oracle form beats grpo cannot show any credit benefit: the report says so, and the
   main runs move to a regime where it does. The pilot's runs are also the main runs' first
   four seeds of those arms (same settings; their test-split evaluation is added then).
2. Power (written into this docstring before the main runs): from the pilot's paired `online`
   differences on the chosen regime, the number of seeds n that detects half of the oracle's
   mean gain (its better form) with 80% power in a two-sided paired t-test at 0.05
   (`summarize.seeds_for_power`, noncentral t, with the pilot's SD of the differences).
3. Main runs (held-out): grpo; oracle and oracle-sr; mc and mc-sr; rredcot and rredcot-sr;
   shuffled and shuffled-sr (the oracle's rewards permuted within each completion, seeded:
   the spread of perfect credit without its placement). Seeds 0..n-1. Reported: curves, per-arm
   means, paired differences against grpo and against the oracle (same form), the share of the
   oracle's gain each source recovers, and seconds per step against grpo.
4. `train`'s default credit and form: among the sources a user has without a checker
   (rredcot, mc), the cheapest whose `online` beats grpo (interval above 0) and beats shuffled
   in the same form, in that form; if none does, the default becomes grpo (today it is
   rredcot, reweight) and the README says that credit did not help here. (Wording fixed
   2026-12-03 before any main result: it said "grpo stays the default", but the default was
   rredcot; the oracle needs a task checker and cannot be a default.)

Amendment 1 (before any result; only timings seen): the first plan evaluated 200 x 4 held-out
samples every 25 of 200 steps. On this machine's load (10-20 jobs on 2 cores) a step took
8 s and one evaluation 72 s, which would have made the pilot alone take ~4 hours. Changed to
150 steps, no periodic evaluation, one held-out evaluation of the final checkpoint, and the
`online` metric above as primary.

Amendment 2 (2026-12-03, after the 12 pilot runs of seeds 0-3 finished; seen: only the dev
accuracies the run log prints, no online metric, no summary): the machine's load dropped and a
run now takes about a minute instead of 15. The pilot is extended to seeds 0-7 before its
summary is computed, because an SD of paired differences from 4 seeds is too uncertain to size
the main runs on (its 95% interval spans a factor of ~4 in variance).

Step 2, the power analysis (2026-12-03, written after the pilot summary, before any main run;
pilot_summary.md, pilot_power.csv): on `unique` (dev split, 8 seeds) the oracle beats grpo:
online +0.012 [+0.005, +0.019] in reweight (SD of the paired differences 0.0082),
+0.012 [−0.001, +0.025] in segment-rewards (SD 0.0153); held-out dev accuracy +0.009
[−0.006, +0.024] and +0.011 [−0.000, +0.022]. So `unique` is a regime where perfect credit
helps, a little: the main runs stay on it (`multipath` and `long` have no checkpoint yet).
The oracle's better form by effect size is reweight; detecting half its gain (+0.006 online)
with 80% power takes 17 seeds (`seeds_for_power(0.006, 0.0082)`): the main runs use seeds
0-16 for every arm (the pilot's seeds 0-7 of grpo, oracle and oracle-sr are reused; their
test-split accuracy is added). With 17 seeds the held-out accuracy (SD 0.018) has 80% power
only for differences of about ±0.013: it is reported, but the conclusions rest on `online`.
Cost: runs go seed by seed through every arm, so a study stopped early stays balanced; the
report then uses the seeds every arm has (and says so). Monte Carlo keeps 4 rollouts per
boundary at this size (a run takes ~3x grpo's).

Amendment 3 (2026-12-03, 22:30, after the main runs were interrupted at 22:25; seen: the
partial summary main_summary.md of 22:06, online and held-out, from seeds 0-7 of grpo, oracle
and oracle-sr and seeds 0-3 of the other arms; not seen: any result of seeds 4 and above of mc,
mc-sr, rredcot, rredcot-sr, shuffled and shuffled-sr, or the test-split accuracy of seeds 5-7
of grpo, oracle and oracle-sr): the CPU left on the shared machine cannot finish 17 seeds
before the study's deadline. The seed count is reduced to 8 (seeds 0-7, the pilot's count) for
every arm; the runs continue seed by seed toward 17 (one process, lowest priority) and stop at
a time fixed now (23:55), whatever the results. A run interrupted mid-way resumes from its last
checkpoint (same problems in the same order); a run unfinished at the stop is left out. The
summary pairs each arm with grpo and the oracle over the seeds both have, and says how many.
Power at 8 seeds (paired t, two-sided 0.05, the pilot's SDs of the paired differences):
`online`, reweight (SD 0.0082): 0.43 for half the oracle's gain (+0.006), 0.94 for all of it
(+0.012); 80% power only for differences of at least 0.0095. `online`, segment-rewards
(SD 0.0153): 0.16 and 0.48; 80% power from 0.018. Held-out accuracy (SD 0.013-0.018): 0.13-0.20
and 0.37-0.61; 80% power from 0.015-0.021. So 8 seeds can confirm the reweight oracle's gain
over grpo, but cannot tell whether RREDCoT or MC recovers half of it: a source whose interval
includes 0 is "not shown to help", not "shown not to help".
Stopped at 23:55 as fixed: every arm has seeds 0-7 except mc and mc-sr (seeds 0-6; mc's
seed 7 was unfinished and is left out).

Amendment 4 (2026-12-04, 00:06, decided AFTER seeing the 7-seed summary of mc and mc-sr): seed 7
of mc (resumed from its step-100 checkpoint) and of mc-sr was run to complete the 8 seeds of
amendment 3, and the summary files now include it. This departs from the 23:55 stop rule and
was decided with mc's 7-seed result (online − grpo +0.014 [−0.000, +0.029]) in view, so the
8-seed mc numbers are post hoc, not confirmatory: the confirmatory mc result is the 7-seed one.

Amendment 5 (2026-12-04, 02:30, after every main result on `unique` had been seen; written as
the first `multipath` training run started, before any of its results): step 1's pilot on
`multipath` (its checkpoint shipped after the pilot had chosen `unique`), seeds 0-7, arms grpo,
oracle, oracle-sr, shared settings unchanged. It answers step 1's question there (does perfect
credit beat grpo when several paths are valid?) and changes nothing already concluded: the
main runs stay on `unique`. The `long` pilot is not run in this version: a `long` run samples
up to 320 tokens a completion, about five times `unique`'s, so 24 pilot runs do not fit the CPU
left; the report says so.

Amendment 6 (2026-12-04, 03:24, after every 8-seed main result and the `multipath` pilot had
been seen): seeds 8-16 of grpo, oracle, rredcot and shuffled (reweight), the 17 seeds the power
analysis asked for, for the arms of the default's rule (rredcot, the cheapest source without a
checker, against grpo and shuffled) and the positive control. They run seed by seed through the
four arms and stop at 04:14 whatever the results; the summary then reports these arms at the
seeds all four have, beside the 8-seed table, and says which seeds were seen when this was
decided. Monte Carlo and the segment-rewards arms stay at 8 seeds (their runs cost more). The
default's rule is applied to the 8-seed result (the study's stop); the 17-seed numbers are
reported as the planned sample, not used to change the default after the fact.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PHASES = ("pilot", "main")

# Arm -> (advantage, credit options). Fixed before any run.
ARMS: dict[str, tuple[str, dict]] = {
    "grpo": ("grpo", {}),
    "oracle": ("oracle", {"form": "reweight"}),
    "oracle-sr": ("oracle", {"form": "segment-rewards"}),
    "mc": ("mc", {"form": "reweight"}),
    "mc-sr": ("mc", {"form": "segment-rewards"}),
    "rredcot": ("rredcot", {"form": "reweight"}),
    "rredcot-sr": ("rredcot", {"form": "segment-rewards"}),
    "shuffled": ("shuffled", {"form": "reweight", "shuffled": "oracle"}),
    "shuffled-sr": ("shuffled", {"form": "segment-rewards", "shuffled": "oracle"}),
}
PILOT_ARMS = ("grpo", "oracle", "oracle-sr")
# Completion lengths: the regimes' own sampling settings.
MAX_TOKENS = {"unique": 64, "multipath": 64, "forecast": 96, "long": 320}
TRAIN_PROBLEMS, EVAL_PROBLEMS = 5000, 200


def base_config() -> dict:
    """The settings every run shares (the protocol's "shared settings")."""
    return {
        "seed": 0,
        "chat_template": True,
        "advantage": "grpo",
        "credit": {"segments": "lines", "strength": 3.0, "floor": 0.0},
        "rredcot": {"value": "both", "exit_string": "The answer is "},
        "mc": {"rollouts": 4},
        "grpo": {
            "num_generations": 8, "per_device_train_batch_size": 16,
            "gradient_accumulation_steps": 1, "temperature": 1.0, "learning_rate": 1.0e-4,
            "beta": 0.0, "logging_steps": 1, "gradient_checkpointing": False,
            "report_to": "none", "save_total_limit": 1,
            "extra": {"disable_tqdm": True, "dataloader_pin_memory": False},
        },
    }


def problem_files(regime: str, data: Path) -> dict[str, Path]:
    """The regime's train, dev and test problems as JSONL files (written once)."""
    from cotcredit.bench.regimes import get_regime
    from cotcredit.bench.regimes.base import write_problems

    files = {}
    for split, n in (("train", TRAIN_PROBLEMS), ("dev", EVAL_PROBLEMS), ("test", EVAL_PROBLEMS)):
        path = data / regime / f"{split}.jsonl"
        if not path.is_file():
            write_problems(get_regime(regime).problems(split, n), path)
        files[split] = path
    return files


def run_dir(out: Path, phase: str, regime: str, arm: str, seed: int) -> Path:
    return out / "runs" / phase / regime / f"{arm}-seed{seed}"


def run_config(out: Path, phase: str, regime: str, arm: str, seed: int, steps: int,
               save_every: int = 50) -> Path:
    """The run's config file (paths relative to it, as `cotcredit train` reads them)."""
    from cotcredit.bench.regimes import checkpoint

    files = problem_files(regime, out / "data")
    folder = out / "configs" / phase / regime
    folder.mkdir(parents=True, exist_ok=True)
    rel = lambda p: os.path.relpath(Path(p).resolve(), folder)  # noqa: E731
    advantage, credit = ARMS[arm]
    cfg = base_config()
    tokens = MAX_TOKENS[regime]
    cfg.update({
        "model": rel(checkpoint(regime)),
        "train_file": rel(files["train"]),
        "output_dir": rel(run_dir(out, phase, regime, arm, seed)),
        "seed": seed,
        "advantage": advantage,
        "oracle": {"regime": regime},
    })
    cfg["credit"] = {**cfg["credit"], **credit}
    cfg["grpo"] = {**cfg["grpo"], "max_completion_length": tokens, "max_steps": steps,
                   "save_steps": save_every}
    path = folder / f"{arm}-seed{seed}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return path


def plan(phase: str, regimes, arms, seeds) -> list[tuple[str, int, str]]:
    """(regime, seed, arm) in run order: regime by regime, seed by seed, every arm of a seed."""
    return [(r, s, a) for r in regimes for s in seeds for a in arms]


def finished(run: Path, steps: int) -> bool:
    """Whether `run` trained `steps` steps (its last checkpoint is at that step)."""
    state = run / f"checkpoint-{steps}" / "trainer_state.json"
    return state.is_file()


def heldout(run: Path, regime: str, split: str, seed: int, out: Path, *,
            problems_file: Path | None = None, max_new_tokens: int | None = None) -> dict:
    """Accuracy of the run's final checkpoint on the split's evaluation problems (200 x 4
    samples at temperature 1, sampling seed = the run's seed), cached in heldout_<split>.json.
    `problems_file` and `max_new_tokens` default to the regime's file and `MAX_TOKENS`."""
    path = run / f"heldout_{split}.json"
    if path.is_file():
        return json.loads(path.read_text())
    checkpoint = max(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    result = {"split": split, "checkpoint": checkpoint.name, **sampled_accuracy(
        checkpoint, problems_file or problem_files(regime, out / "data")[split], seed,
        max_new_tokens or MAX_TOKENS[regime])}
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def sampled_accuracy(model_dir: Path, problems_file: Path, seed: int, max_new_tokens: int,
                     samples: int = 4, by_problem: bool = False) -> dict:
    """The share of `samples` completions per problem (temperature 1, sampling seed `seed`) of
    the model in `model_dir` that reach each problem's answer; with `by_problem`, also each
    problem's count of correct completions (`per_problem`, in the file's order)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cotcredit.data import load_problems
    from cotcredit.data.grading import grade_completion
    from cotcredit.lm.generation import SamplingOptions
    from cotcredit.lm.sampling import HFGenerator
    from cotcredit.training.run import prompt_field, prompt_ids

    problems = load_problems(problems_file)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = [prompt_ids(tokenizer, prompt_field(p.prompt, True, None, tokenizer))
               for p in problems]
    options = SamplingOptions(n=samples, temperature=1.0, max_new_tokens=max_new_tokens,
                              seed=seed).validate()
    start = time.perf_counter()
    with torch.no_grad():
        outputs = HFGenerator(model, tokenizer).generate(prompts, options)
    per_problem = [sum(bool(grade_completion(c.text, p.answer).correct) for c in cs)
                   for p, cs in zip(problems, outputs, strict=True)]
    right, total = sum(per_problem), sum(len(cs) for cs in outputs)
    return {"accuracy": right / total, "correct": right, "completions": total,
            "problems": len(problems), "seconds": round(time.perf_counter() - start, 1),
            **({"per_problem": per_problem} if by_problem else {})}


def run_all(out: Path, phase: str, todo, steps: int, worker: int, workers: int) -> None:
    """Run this worker's share of `todo`, skipping finished runs, resuming started ones; then
    evaluate each finished run on the phase's held-out split."""
    import torch

    from cotcredit.training.run import train

    torch.set_num_threads(1)
    split = "dev" if phase == "pilot" else "test"
    for i, (regime, seed, arm) in enumerate(todo):
        if i % workers != worker:
            continue
        # The pilot's runs are the main runs' first seeds of its arms (same settings).
        run = run_dir(out, "pilot" if (phase == "main" and
                                       run_dir(out, "pilot", regime, arm, seed).is_dir())
                      else phase, regime, arm, seed)
        tag = f"[{phase} {i + 1}/{len(todo)}] {regime} {arm} seed {seed}"
        if not finished(run, steps):
            config = run_config(out, run.parent.parent.name, regime, arm, seed, steps)
            resume = any(run.glob("checkpoint-*/trainer_state.json"))
            print(f"{tag}: {'resuming' if resume else 'starting'}", flush=True)
            start = time.perf_counter()
            train(config, resume=resume, overwrite=not resume)
            print(f"{tag}: trained in {time.perf_counter() - start:.0f} s", flush=True)
            gc.collect()
        result = heldout(run, regime, split, seed, out)
        print(f"{tag}: {split} accuracy {result['accuracy']:.3f}", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("pilot", "main", "summary"))
    ap.add_argument("phase", nargs="?", choices=PHASES, help="summary: which phase")
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--regimes", nargs="+", default=None)
    ap.add_argument("--arms", nargs="+", default=None, choices=list(ARMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--worker", default="0/1", help="k/n: run every n-th run from the k-th")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    if args.what == "summary":
        from studies.training.summarize import summarize

        summarize(out, args.phase or "main", steps=args.steps)
        return
    phase = args.what
    regimes = args.regimes or (["unique"] if phase == "pilot" else [main_regime(out)])
    arms = args.arms or list(PILOT_ARMS if phase == "pilot" else ARMS)
    seeds = args.seeds if args.seeds is not None else (
        list(range(8)) if phase == "pilot" else list(range(main_seeds(out))))
    k, n = (int(x) for x in args.worker.split("/"))
    todo = plan(phase, regimes, arms, seeds)
    run_all(out, phase, todo, args.steps, k, n)


def main_regime(out: Path) -> str:
    """The regime the pilot chose (power.json), written before the main runs."""
    return json.loads((out / "power.json").read_text())["regime"]


def main_seeds(out: Path) -> int:
    """The seeds the pilot's power analysis asks for (power.json)."""
    return int(json.loads((out / "power.json").read_text())["seeds"])


if __name__ == "__main__":
    main()
