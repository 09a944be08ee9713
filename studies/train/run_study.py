"""Does GRPO with RREDCoT advantages train better than plain GRPO? Several seeds, side by side.

    python -m studies.train.run_study         # or: make train-study-lookup (48 min on 2 cores)
    python -m studies.train.run_study --steps 200 --prompts-per-step 2 --eval-every 50 \
        --seeds 0 1 2 3 4 --out runs/train-study-full          # the full setting (a GPU)

Every run is `cotcredit train` as a user types it, on examples/train/config_grpo.yaml and
config_rredcot.yaml with only the output folder, the seed and the step count changed, so the two
modes differ in the advantage alone. The default is sized for a 2-core CPU (a step of 4
completions of a 330-token few-shot prompt takes about 25 s there): 3 seeds × 16 steps of one
prompt each, evaluated before and after; the full setting above is the same study at a size
where learning can show. Runs go seed by seed (grpo, then rredcot), so an interrupted
study is balanced; rerunning the script resumes: a finished run is skipped, a started one
continues from its last checkpoint. The protocol is fixed here, before any result was seen:

- Task: examples/lookup/train_problems.jsonl (200 problems: read two prices from a three-row
  table, add them); held-out examples/lookup/eval_problems.jsonl (50 problems, none in the
  training file), answered greedily before training, every `--eval-every` steps and after.
  Nothing is tuned on the evaluation split: the settings are the example configs'.
- Seeds: the same seeds for both modes (a seed fixes sampling, data order and initialisation of
  everything TRL draws).
- Results (in --out): runs/<mode>-seed<N>/ (metrics.jsonl, eval.json, eval_curve.jsonl,
  checkpoints), curves.png/.pdf (train reward, mean and min–max band over seeds; held-out
  accuracy likewise), summary.csv and summary.md (per mode: eval accuracy before/after with a
  95% t-interval over seeds, the paired rredcot − grpo difference, steps to reach a stated train
  reward, seconds per step and the RREDCoT scoring share).

Tracked here (the rest is regenerated): summary.md/.csv, curves.png and runs.csv (one row per
run and per mode: per-seed accuracies, RREDCoT's scoring seconds; `run_facts.py`). The runs,
their configs and curves.pdf are written by `make train-study-lookup`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from studies.seed_runs import (
    plot_seed_curves,
    run_finished,
    seed_run_summary,
    seed_summary_markdown,
)
from studies.train import run_facts

HERE = Path(__file__).resolve().parent
CONFIGS = HERE.parents[1] / "examples" / "train"  # config_grpo.yaml, config_rredcot.yaml
MODES = ("grpo", "rredcot")


def run_config(mode: str, seed: int, out: Path) -> Path:
    """The example config of `mode` with its paths made valid from `out` and its own output."""
    source = CONFIGS / f"config_{mode}.yaml"
    cfg = yaml.safe_load(source.read_text())
    folder = out / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("train_file", "eval_file"):
        cfg[key] = os.path.relpath((source.parent / cfg[key]).resolve(), folder)
    cfg["output_dir"] = os.path.relpath(out / "runs" / f"{mode}-seed{seed}", folder)
    cfg["seed"] = seed
    path = folder / f"{mode}-seed{seed}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return path



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="study folder (default: this one)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=16, help="optimizer steps per run")
    ap.add_argument("--prompts-per-step", type=int, default=1,
                    help="prompts per step (each with the config's num_generations completions)")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="also evaluate every N steps (0: before and after training only)")
    ap.add_argument("--target", type=float, default=0.5,
                    help="train reward (moving average) whose first step is reported")
    args = ap.parse_args()
    out = args.out.resolve()
    t_start = time.perf_counter()
    runs: dict[str, list[Path]] = {m: [] for m in MODES}
    plan = [(seed, mode) for seed in args.seeds for mode in MODES]
    for i, (seed, mode) in enumerate(plan, 1):
        run = out / "runs" / f"{mode}-seed{seed}"
        runs[mode].append(run)
        if run_finished(run, args.steps):
            print(f"[{i}/{len(plan)}] {mode} seed {seed}: done", flush=True)
            continue
        config = run_config(mode, seed, out)
        cfg = yaml.safe_load(config.read_text())
        every = args.eval_every if 0 < args.eval_every < args.steps else None
        cfg["eval"] = {**cfg.get("eval", {}), "every": every}
        group = cfg["grpo"]["num_generations"]
        # Checkpoints only to resume an interrupted study, the last one kept (not checked in).
        cfg["grpo"] = {**cfg["grpo"], "per_device_train_batch_size": group * args.prompts_per_step,
                       "save_steps": max(1, min(every or 8, args.steps)), "save_total_limit": 1}
        config.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
        resume = any(run.glob("checkpoint-*"))
        argv = ["train", str(config.relative_to(out)), "--max-steps", str(args.steps),
                "--resume" if resume else "--overwrite"]
        print(f"[{i}/{len(plan)}] {mode} seed {seed}: cotcredit {' '.join(argv)}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "cotcredit", *argv], cwd=out)
        if proc.returncode != 0:
            sys.exit(f"run {mode} seed {seed} failed (exit {proc.returncode}); rerun to resume")
    window = max(2, min(10, args.steps // 4))  # steps of the moving average of the train reward
    summary = seed_run_summary(runs, target=args.target, window=window)
    summary.to_csv(out / "summary.csv", index=False)
    text = seed_summary_markdown(summary, target=args.target, steps=args.steps, window=window)
    (out / "summary.md").write_text(text)
    print(text)
    print(plot_seed_curves(runs, out / "curves.png", window=window,
                           title=f"GRPO vs RREDCoT on the lookup task, {len(args.seeds)} seeds"))
    run_facts.main(["--out", str(out)])
    print(f"study finished in {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
