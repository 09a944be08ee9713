"""Step time of GRPO with credit (RREDCoT, Monte Carlo, the oracle) vs plain GRPO: one config.

    python benchmarks/bench_train.py                         # examples/train config, 8 steps
    python benchmarks/bench_train.py --steps 20 --model Qwen/Qwen3-0.6B --config my.yaml
    python benchmarks/bench_train.py --regime unique --sources grpo,rredcot,mc,oracle
    python benchmarks/bench_train.py --regime unique --scaling   # credit cost at 1x and 10x

Runs `cotcredit.training.run.train` once per credit source (`--sources`, default grpo and rredcot;
`--regime NAME` trains on a bench regime's checkpoint and problems instead of --config, which the
oracle needs) for --steps optimizer steps each (no evaluation; checkpoints only at the end, which
step times exclude), and reads their metrics.jsonl: mean seconds per step (the first --warmup steps
are left out), the part of a rredcot step spent computing segment rewards (one forward pass per
scored completion + packed probes on its KV cache), and the ratio rredcot / grpo (the paper reports
1.5-2x; the goal here is <= 1.3x). Generation dominates a step and its cost follows the completion
lengths, which drift apart once the two policies differ, so the table also shows the mean completion
length and the rredcot step time without scoring (≈ grpo's when the machine is quiet), and a second
ratio measured inside the rredcot run alone, step / (step − scoring), which load changes on a shared
machine between the two runs cannot bias. Only completions with a non-zero advantage are scored
(`scored` column: the fraction of completions scored).
`--scaling` instead times each source's `score_batch` alone on 16 and 160 sampled completions
of the regime (cost should grow no faster than the batch: the ratio is at most ~10).
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


def regime_config(regime: str, folder: Path):
    """A train config on a bench regime: its checkpoint, 200 of its training problems, one
    segment per line, the oracle from its checker, 4 Monte Carlo rollouts (the training
    study's settings)."""
    from cotcredit.bench.regimes import checkpoint, get_regime
    from cotcredit.bench.regimes.base import write_problems
    from cotcredit.training.config import TrainConfig

    r = get_regime(regime)
    write_problems(r.problems("train", 200), folder / "train.jsonl")
    tokens = r.sampling["max_new_tokens"]
    return TrainConfig.model_validate({
        "model": checkpoint(regime), "train_file": folder / "train.jsonl",
        "output_dir": folder / "out", "seed": 0,
        "credit": {"segments": "lines"}, "oracle": {"regime": regime}, "mc": {"rollouts": 4},
        "rredcot": {"value": "both", "exit_string": r.exit_string},
        "grpo": {"num_generations": 8, "per_device_train_batch_size": 16, "beta": 0.0,
                 "max_completion_length": tokens, "learning_rate": 1e-4,
                 "gradient_checkpointing": False},
    })


def scaling(config, sources: list[str], folder: Path) -> None:
    """Seconds of each source's `score_batch` on 16 and on 160 completions sampled from the
    regime's checkpoint (2 and 20 prompts x 8), after a warm-up call."""
    import time

    import torch

    from cotcredit.data import load_problems
    from cotcredit.lm.generation import SamplingOptions
    from cotcredit.lm.sampling import HFGenerator
    from cotcredit.training.credit import credit_source
    from cotcredit.training.run import build_dataset, load_policy, prompt_ids

    model, tokenizer, _ = load_policy(config)
    model.eval()
    problems = load_problems(config.train_file)
    rows = build_dataset(problems[:20], True, None, tokenizer).to_list()
    prompts = [prompt_ids(tokenizer, r["prompt"]) for r in rows]
    options = SamplingOptions(n=8, temperature=1.0, seed=0,
                              max_new_tokens=config.grpo.max_completion_length)
    with torch.no_grad():
        completions = HFGenerator(model, tokenizer).generate(prompts, options)
    batch = [(p, c.token_ids + [tokenizer.eos_token_id], r)
             for p, cs, r in zip(prompts, completions, rows) for c in cs]
    print(f"{'source':8} {'16 s':>8} {'160 s':>8} {'ratio':>6}")
    for source in sources:
        if source == "grpo":
            continue
        cfg = config.model_copy(update={"advantage": source})
        fn = credit_source(cfg, model, tokenizer, problems)
        times = []
        for n in (16, 16, 160):  # the first call warms up
            part = batch[:n]
            t0 = time.perf_counter()
            with torch.no_grad():
                fn.score_batch([b[0] for b in part], [b[1] for b in part], [b[2] for b in part])
            times.append(time.perf_counter() - t0)
        print(f"{source:8} {times[1]:8.2f} {times[2]:8.2f} {times[2] / times[1]:6.1f}")


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
    parser.add_argument("--sources", default="grpo,rredcot",
                        help="comma-separated credit sources (grpo first: the baseline)")
    parser.add_argument("--form", default="reweight", choices=("reweight", "segment-rewards"))
    parser.add_argument("--regime", default=None, help="train on this bench regime instead")
    parser.add_argument("--scaling", action="store_true",
                        help="time each source's scoring on 16 and 160 completions instead")
    args = parser.parse_args()
    sources = args.sources.split(",")
    warnings.simplefilter("ignore")

    import torch
    from transformers.utils import logging as hf_logging

    from cotcredit.training.config import load_config

    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    tmp_dir = tempfile.TemporaryDirectory(prefix="bench_train")
    tmp = Path(tmp_dir.name)
    config = regime_config(args.regime, tmp) if args.regime else load_config(args.config)
    if args.model:
        config = config.model_copy(update={"model": args.model}) if args.model else config
        config._source = str(args.config)
    config = config.model_copy(update={"credit": config.credit.model_copy(
        update={"form": args.form})})
    if args.scaling:
        scaling(config, sources, tmp)
        return
    warmup = min(args.warmup, max(args.steps - 1, 0))
    figures: dict[str, dict] = {}
    with tmp_dir:
        for mode in sources:
            rows = run_mode(config, mode, args.steps, tmp)
            figures[mode] = {
                "steps": len(rows),
                "step_seconds": mean_after(rows, "step_seconds", warmup),
                "rredcot_seconds": mean_after(rows, "rredcot_seconds", warmup) or 0.0,
                "completion_length": mean_after(rows, "completions/mean_length", warmup),
                "reward": mean_after(rows, "reward", 0),
                "scored": mean_after(rows, "rredcot/scored_fraction", warmup),
                "segments": mean_after(rows, "rredcot/segments_mean", warmup),
            }
    g = figures[sources[0]]
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
    ratios = {}
    for mode, r in figures.items():
        if mode == sources[0]:
            continue
        # Within one run: step / (step - credit). Both parts are measured in the same steps,
        # so load changes between runs (a shared machine) do not enter this figure.
        ratios[mode] = {
            "ratio": r["step_seconds"] / g["step_seconds"],
            "ratio_within_run": r["step_seconds"] / (r["step_seconds"] - r["rredcot_seconds"]),
            "ratio_without_scoring": (r["step_seconds"] - r["rredcot_seconds"])
            / g["step_seconds"],
        }
        print(f"{mode}: ratio to {sources[0]} (two runs) {ratios[mode]['ratio']:.2f}x; within "
              f"its run (step / step without credit) {ratios[mode]['ratio_within_run']:.2f}x"
              + ("  (rredcot goal <= 1.3x)" if mode == "rredcot" else ""))
    if args.json:
        result = {
            "figures": figures,
            "ratios": ratios,
            "form": args.form,
            "steps": args.steps,
            "warmup": warmup,
            "device": device,
        }
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
