"""Part train: one GRPO step in each advantage mode on a random model of a real shape, then one
`cotcredit.train` step per credit source and advantage form on the `unique` checkpoint."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks.gpu_check.shapes import build_model
from benchmarks.gpu_check.timing import Deadline, free_memory, measure
from benchmarks.gpu_check.traces import ANSWER, PROMPT, SOLUTION

if TYPE_CHECKING:
    from benchmarks.gpu_check.run import RunContext

PROBLEMS = [
    (PROMPT, ANSWER),
    ("What is 3 + 4?", "7"),
    ("What is 5 + 7?", "12"),
    ("A pear costs 4 dollars. What do two pears cost?", "8"),
]


def varied_reward(completion_ids, **kwargs) -> list[float]:
    """A reward that differs between random completions (share of even token ids), so groups
    have a non-zero advantage and every completion is scored in mode rredcot."""
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def part_train(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    try:
        import trl
        from datasets import Dataset
    except Exception as e:  # missing, or an installed version that does not import here
        why = (f"{e.name} is not installed" if isinstance(e, ImportError) and e.name
               else f"trl/datasets do not import ({type(e).__name__}: {str(e)[:200]})")
        result["status"] = f"skipped: {why}"
        result["notes"].append(
            "needs trl and datasets: carry their wheels (`pip download --no-deps -d wheels ...` "
            "here, `pip install --no-index --no-deps --target DIR wheels/*.whl` and "
            "PYTHONPATH=DIR there; see the README)"
        )
        return
    import warnings

    from transformers.trainer_callback import PrinterCallback
    from transformers.utils import logging as hf_logging

    from cotcredit.training.scoring import PolicySegmentRewards
    from cotcredit.training.trainer import RredcotGRPOTrainer

    hf_logging.set_verbosity_error()
    ctx.release()
    plan = ctx.plan
    shape = ctx.shapes[plan.train_model]
    tok = ctx.tokenizer(shape.vocab)
    cuda = ctx.device.type == "cuda"
    dataset = Dataset.from_list([
        {"prompt": [{"role": "user", "content": q}], "answer": a, "solution": SOLUTION}
        for q, a in PROBLEMS
    ])
    for mode in ("grpo", "rredcot"):
        deadline.check()
        model = build_model(shape, torch.device("cpu"), torch.float32)  # the trainer moves it
        with tempfile.TemporaryDirectory(prefix="gpu_check_train") as out, \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            args = trl.GRPOConfig(
                output_dir=out, use_cpu=not cuda, bf16=cuda and torch.cuda.is_bf16_supported(),
                gradient_checkpointing=False, num_generations=plan.train_generations,
                max_completion_length=plan.train_completion,
                per_device_train_batch_size=plan.train_batch, gradient_accumulation_steps=1,
                max_steps=1, save_strategy="no", logging_steps=1, learning_rate=1e-6,
                report_to="none", disable_tqdm=True, seed=0,
            )
            scoring = PolicySegmentRewards(model, tok, segments=8) if mode == "rredcot" else None
            trainer = RredcotGRPOTrainer(
                model=model, reward_funcs=varied_reward, args=args, train_dataset=dataset,
                processing_class=tok, advantage_mode=mode, segment_rewards_fn=scoring,
            )
            trainer.remove_callback(PrinterCallback)  # its log dicts would bury the table
            m: dict = {}
            with measure(ctx.device, m):
                trainer.train()
        logged = trainer.state.log_history[0] if trainer.state.log_history else {}
        pick = ("step_time", "loss", "reward", "completions/mean_length",
                "rredcot/scoring_seconds", "rredcot/scored_fraction", "rredcot/segments_mean")
        result["rows"].append({
            "model": shape.name, "mode": mode, "steps": trainer.state.global_step,
            "completions": plan.train_batch, "max_completion_length": plan.train_completion,
            "train_s": m["seconds"], "peak_gib": m["extra_gib"],
            "bf16": bool(args.bf16),
            **{k: logged.get(k) for k in pick if k in logged},
        })
        del trainer, model
        free_memory()
        ctx.checkpoint()
    result["notes"].append(f"trl {trl.__version__}; reward = share of even token ids (random "
                           "completions are never correct)")
    train_sources(ctx, deadline, result)


# Every credit source and advantage form through `cotcredit.train`, one step each, on the
# `unique` regime's shipped checkpoint and problems (tests/training/test_train_credit.py's config).
def source_config(model: str, advantage: str, form: str) -> dict:
    """A one-step `cotcredit train` config of a credit source and advantage form."""
    return {
        "model": model, "train_file": "train.jsonl", "output_dir": f"out-{advantage}-{form}",
        "seed": 3, "advantage": advantage,
        "credit": {"form": form, "segments": "lines", "shuffled": "oracle"},
        "oracle": {"regime": "unique"}, "mc": {"rollouts": 4},
        "rredcot": {"value": "both", "exit_string": "The answer is "},
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 8,
                 "max_completion_length": 48, "max_steps": 1, "save_steps": 1,
                 "learning_rate": 1e-4, "beta": 0.0, "report_to": "none",
                 "extra": {"disable_tqdm": True}},
    }


SOURCES_AND_FORMS = (("grpo", "reweight"),
                     *((a, f) for a in ("oracle", "mc", "rredcot", "shuffled")
                       for f in ("reweight", "segment-rewards")))


def train_sources(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    try:
        import math_verify  # noqa: F401  (the correctness reward)
        import pydantic  # noqa: F401  (the config)
    except ImportError as e:
        result["notes"].append(f"credit sources skipped: {e.name} is not installed")
        return
    import warnings

    import yaml

    from cotcredit.bench.regimes import checkpoint, get_regime
    from cotcredit.bench.regimes.base import write_problems
    from cotcredit.training.metrics import read_metrics
    from cotcredit.training.run import train

    with tempfile.TemporaryDirectory(prefix="gpu_check_sources") as tmp:
        folder = Path(tmp)
        write_problems(get_regime("unique").problems("train", 8), folder / "train.jsonl")
        for advantage, form in SOURCES_AND_FORMS:
            deadline.check()
            name = f"{advantage}-{form}"
            path = folder / f"{name}.yaml"
            path.write_text(yaml.safe_dump(source_config(str(checkpoint("unique")), advantage,
                                                         form)))
            m: dict = {}
            with warnings.catch_warnings(), measure(ctx.device, m):
                warnings.simplefilter("ignore")
                run = train(path, overwrite=True)
            logged = read_metrics(run.metrics)[-1]
            result["rows"].append({
                "model": "unique (shipped)", "mode": advantage, "form": form,
                "steps": logged.get("step"), "completions": 8, "max_completion_length": 48,
                "train_s": m["seconds"], "peak_gib": m["extra_gib"],
                **{k: logged.get(k) for k in ("step_time", "reward", "rredcot/scoring_seconds",
                                              "rredcot/scored_fraction")},
            })
            ctx.checkpoint()
