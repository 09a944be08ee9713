"""Step time of GRPO with RREDCoT token advantages vs plain GRPO: same config, same seed.

    python benchmarks/bench_train.py                         # examples/train config, 8 steps
    python benchmarks/bench_train.py --steps 20 --model Qwen/Qwen3-0.6B --config my.yaml

Runs `cotcredit.training.run.train` twice from one config — `advantage: grpo`, then `rredcot` —
for --steps optimizer steps each (no evaluation; checkpoints only at the end, which step times
exclude), and reads their metrics.jsonl: mean seconds per step (the first --warmup steps are
left out), the part of a rredcot step spent computing segment rewards (one forward pass per
scored completion + packed probes on its KV cache), and the ratio rredcot / grpo (the paper
reports 1.5-2x; the goal here is <= 1.3x). Generation dominates a step and its cost follows the
completion lengths, which drift apart once the two policies differ, so the table also shows the
mean completion length and the rredcot step time without scoring (≈ grpo's when the machine is
quiet), and a second ratio measured inside the rredcot run alone, step / (step − scoring), which
load changes on a shared machine between the two runs cannot bias. Only completions with a
non-zero advantage are scored (`scored` column: the fraction of completions scored).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def mean_after(rows: list[dict], key: str, warmup: int) -> float | None:
    values = [r[key] for r in rows[warmup:] if r.get(key) is not None]
    return statistics.fmean(values) if values else None


def run_mode(config, mode: str, steps: int, out: Path) -> list[dict]:
    from cotcredit.training.metrics import read_metrics
    from cotcredit.training.run import train

    cfg = config.model_copy(
        update={
            "advantage": mode,
            "output_dir": out / mode,
            "eval_file": None,
            "grpo": config.grpo.model_copy(
                update={
                    "max_steps": steps,
                    "save_steps": 10**6,
                    "logging_steps": 1,
                    "report_to": "none",
                    "extra": {**config.grpo.extra, "disable_tqdm": True},
                }
            ),
        }
    )
    cfg._source = config._source
    result = train(cfg, overwrite=True)
    return read_metrics(result.metrics)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "examples/train/config_rredcot.yaml")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=1, help="first steps left out of means")
    parser.add_argument("--model", default=None, help="override the config's model")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    import torch
    from transformers.utils import logging as hf_logging

    from cotcredit.training.config import load_config

    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = load_config(args.config)
    if args.model:
        config = config.model_copy(update={"model": args.model}) if args.model else config
        config._source = str(args.config)
    warmup = min(args.warmup, max(args.steps - 1, 0))
    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench_train") as tmp:
        for mode in ("grpo", "rredcot"):
            rows = run_mode(config, mode, args.steps, Path(tmp))
            figures[mode] = {
                "steps": len(rows),
                "step_seconds": mean_after(rows, "step_seconds", warmup),
                "rredcot_seconds": mean_after(rows, "rredcot_seconds", warmup) or 0.0,
                "completion_length": mean_after(rows, "completions/mean_length", warmup),
                "reward": mean_after(rows, "reward", 0),
                "scored": mean_after(rows, "rredcot/scored_fraction", warmup),
                "segments": mean_after(rows, "rredcot/segments_mean", warmup),
            }
    g, r = figures["grpo"], figures["rredcot"]
    ratio = r["step_seconds"] / g["step_seconds"]
    without = (r["step_seconds"] - r["rredcot_seconds"]) / g["step_seconds"]
    # Within the rredcot run: step / (step - scoring). Both parts are measured in the same steps,
    # so load changes between the two runs (a shared machine) do not enter this figure.
    within = r["step_seconds"] / (r["step_seconds"] - r["rredcot_seconds"])
    device = "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"
    print(
        f"model: {config.model or 'embedded SmolLM2-135M-Instruct'}; device: {device}; "
        f"{args.steps} steps per mode, means over steps {warmup + 1}..{args.steps}"
    )
    print(
        f"{'mode':8} {'s/step':>8} {'scoring s':>10} {'compl. len':>10} {'scored':>7} "
        f"{'segments':>8} {'reward':>7}"
    )
    for mode, f in figures.items():
        scored = "" if f["scored"] is None else f"{f['scored']:.2f}"
        segments = "" if f["segments"] is None else f"{f['segments']:.1f}"
        print(
            f"{mode:8} {f['step_seconds']:8.2f} {f['rredcot_seconds']:10.2f} "
            f"{f['completion_length'] or 0:10.1f} {scored:>7} {segments:>8} "
            f"{f['reward'] or 0:7.3f}"
        )
    print(f"ratio rredcot/grpo (two runs):          {ratio:.2f}x  (goal <= 1.3x)")
    print(f"ratio within the rredcot run (step / step without scoring): {within:.2f}x")
    print(
        f"scoring share of a rredcot step: {r['rredcot_seconds'] / r['step_seconds']:.0%}; "
        f"rredcot step without scoring / grpo step: {without:.2f}x (1 on a quiet machine)"
    )
    if args.json:
        result = {
            "figures": figures,
            "ratio": ratio,
            "ratio_within_run": within,
            "ratio_without_scoring": without,
            "steps": args.steps,
            "warmup": warmup,
            "device": device,
        }
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
