"""``cotcredit train``: GRPO on a problem set, with plain or RREDCoT per-token advantages.

``train(config)`` does, in order:

1. Read and validate the config (``config.load_config``; ``max_steps`` may override it), build
   TRL's ``GRPOConfig``, read the problem files (``data.load_problems``: prompt, answer,
   optional solution, id; line-numbered errors).
2. Load the model and tokenizer through ``cotcredit.lm`` (hub id, local folder, .gguf file or
   the embedded default; a fresh copy, never the analysis commands' cached one, since training
   changes the weights in place) on the CPU; the trainer moves it to its device.
3. Build the dataset: ``prompt`` as chat messages (system prompt first when configured) for a
   model with a chat template, else the raw text; ``answer``, ``solution``, ``problem_id``.
4. Reward function ``correct``: 1.0 when the completion's final answer is equivalent to the
   reference answer (``grading.grade_completion``, math-verify), else 0.0.
5. Mode ``rredcot``: ``scoring.PolicySegmentRewards`` on the trainer's own model (the current
   policy; with ``lora``, the adapted one) gives the segment rewards of a batch's completions
   (``cotcredit.training.online.OnlineRredcot``: shared forward and probe passes), redistributing each
   completion's total reward (step 4's functions, weighted as TRL weights them);
   ``RredcotGRPOTrainer`` turns them into per-token advantages
   (``advantages.segment_token_advantages``).
6. Evaluate accuracy on ``eval_file`` before training, train (resuming from a checkpoint when
   asked), evaluate after, and write the outputs.

Outputs in ``output_dir``: ``checkpoint-N/`` (TRL/transformers checkpoints, the last step always
saved; each loads with ``--model output_dir/checkpoint-N``), ``metrics.jsonl`` (see
``metrics``), ``eval.json`` (accuracy before and after), ``eval_completions.jsonl`` (every
eval completion, graded), ``eval_curve.jsonl`` (with ``eval.every``: accuracy every N steps),
``reward_curve.png``, ``config.yaml`` (the config as run, paths absolute). Multi-GPU: ``accelerate launch -m cotcredit train config.yaml`` (each process loads
the model; only the main process writes the files above; evaluation is split over processes).
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from cotcredit import distributed
from cotcredit.data.problems import load_problems
from cotcredit.errors import UserError
from cotcredit.extras import require
from cotcredit.lm.encoding import rendered_by_template, template_markers
from cotcredit.training.config import TrainConfig, load_config
from cotcredit.training.metrics import (
    CURVE_FILE,
    METRICS_FILE,
    MetricsLogger,
    plot_reward_curve,
    truncate_metrics,
)
from cotcredit.training.trl_config import lora_config, to_grpo_config

EVAL_FILE = "eval.json"
EVAL_CURVE_FILE = "eval_curve.jsonl"  # accuracy on eval_file every eval.every steps
EVAL_COMPLETIONS_FILE = "eval_completions.jsonl"
CONFIG_FILE = "config.yaml"


@dataclass
class TrainResult:
    """What a training run left in ``output_dir``."""

    output_dir: Path
    global_step: int
    checkpoint: Path | None  # the last checkpoint folder
    metrics: Path
    eval: dict | None  # eval.json's content (None without eval_file)
    curve: Path | None
    config: Path
    seconds: float


def prompt_field(problem_prompt: str, chat: bool, system_prompt: str | None, tokenizer=None,
                 markers: Sequence[str] | None = None):
    """The dataset's ``prompt`` value: chat messages for a chat model, else the raw text (also
    for a prompt already in the model's chat format, as in analysis; `markers`: the
    tokenizer's `template_markers`, when known)."""
    if not chat or (tokenizer is not None
                    and rendered_by_template(tokenizer, problem_prompt, markers)):
        return problem_prompt
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*messages, {"role": "user", "content": problem_prompt}]


def prompt_ids(tokenizer, prompt) -> list[int]:
    """Token ids of a dataset ``prompt`` value as TRL renders it for generation."""
    if isinstance(prompt, list):
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])


def _texts(value) -> list[str]:
    """A `solutions` field as a list of texts (one text: a list of it)."""
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def build_dataset(problems, chat: bool, system_prompt: str | None, tokenizer=None):
    """The training dataset: per problem the `prompt_field`, answer, solution and problem id."""
    from datasets import Dataset

    # Several reference solutions (a `solutions` list) reach v̂ when any problem has them.
    listed = any(p.extra.get("solutions") for p in problems)
    markers = template_markers(tokenizer) if tokenizer is not None else None
    return Dataset.from_list(
        [
            {
                "prompt": prompt_field(p.prompt, chat, system_prompt, tokenizer, markers),
                "answer": p.answer,
                "solution": p.solution,
                "problem_id": p.id,
                **({"solutions": _texts(p.extra.get("solutions"))} if listed else {}),
            }
            for p in problems
        ]
    )


def _completion_text(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(str(m.get("content") or "") for m in completion)
    return str(completion)


def correct(completions, answer, **kwargs) -> list[float]:
    """The reward: 1.0 when the completion's final answer equals the reference (math-verify)."""
    from cotcredit.data.grading import grade_completion

    return [
        1.0 if grade_completion(_completion_text(c), str(a)).correct else 0.0
        for c, a in zip(completions, answer, strict=True)
    ]


# ---- model -----------------------------------------------------------------------------------
def load_policy(cfg: TrainConfig):
    """(model, tokenizer, display name): a fresh float32 (``dtype: auto``) copy on the CPU."""
    import torch
    from transformers.utils import logging as hf_logging

    from cotcredit.lm import load_model_files, locate_model

    hf_logging.disable_progress_bar()
    path, label = locate_model(cfg.model)
    dtype = {
        "auto": torch.float32,
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
    }[cfg.dtype]
    model, tokenizer = load_model_files(path, dtype, f"model {cfg.model}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer, label


def _check_rredcot_inputs(fn, problems, cfg: TrainConfig) -> None:
    """Fail before training on what would fail at the first scoring of a problem."""
    from cotcredit.lm.encoding import answer_forcing

    forcing = answer_forcing(fn.scorer, fn.options.forcing)
    for p in problems:
        where = f"{p.source}:{p.line}"
        if fn.options.value == "vhat" and not p.solution:
            raise UserError(
                f"{where}: rredcot.value vhat needs a reference solution "
                "(field 'solution') for every training problem"
            )
        forcing.answer_probe(p.answer, where)
        if p.solution and fn.options.value != "rhat":
            forcing.solution_probe(fn.options.connector, p.solution, p.answer, where)


# ---- evaluation ------------------------------------------------------------------------------
def _eval_options(cfg: TrainConfig, args):
    from cotcredit.lm.generation import SamplingOptions

    e = cfg.eval
    return SamplingOptions(
        n=e.samples,
        temperature=e.temperature,
        top_p=e.top_p,
        max_new_tokens=e.max_new_tokens or args.max_completion_length,
        seed=cfg.seed,
        batch_size=e.batch_size,
    ).validate()


def evaluate(trainer, problems, prompts: list[list[int]], options) -> tuple[dict, list[dict]]:
    """Accuracy of the trainer's current model on ``problems`` (split over processes)."""
    import torch
    from trl.models.utils import unwrap_model_for_generation

    from cotcredit.data.grading import grade_completion
    from cotcredit.lm.sampling import HFGenerator

    acc = trainer.accelerator
    mine = list(range(acc.process_index, len(problems), acc.num_processes))
    rows: list[dict] = []
    start = time.perf_counter()
    with unwrap_model_for_generation(trainer.model_wrapped, acc) as model, torch.no_grad():
        was_training = model.training
        model.eval()
        try:
            generator = HFGenerator(model, trainer.processing_class)
            outputs = generator.generate([prompts[i] for i in mine], options) if mine else []
        finally:
            model.train(was_training)
    for i, completions in zip(mine, outputs):
        p = problems[i]
        for j, c in enumerate(completions):
            graded = grade_completion(c.text, p.answer)
            rows.append(
                {
                    "problem_id": p.id,
                    "sample": j,
                    "completion": c.text,
                    "extracted_answer": graded.answer,
                    "correct": bool(graded.correct),
                    "finish_reason": c.finish_reason,
                }
            )
    if acc.num_processes > 1:
        every = distributed.gather_objects(rows, acc.process_index, acc.num_processes)
        rows = [row for part in every for row in part]
    n = len(rows)
    right = sum(r["correct"] for r in rows)
    summary = {
        "accuracy": right / n if n else None,
        "correct": right,
        "completions": n,
        "problems": len(problems),
        "seconds": round(time.perf_counter() - start, 3),
    }
    return summary, rows


# ---- output folder ---------------------------------------------------------------------------
def _checkpoints(output_dir: Path) -> list[Path]:
    found = [p for p in output_dir.glob("checkpoint-*") if p.is_dir()]
    return sorted(
        found, key=lambda p: int(p.name.split("-")[-1]) if p.name.split("-")[-1].isdigit() else -1
    )


def _resume_checkpoint(output_dir: Path, resume: bool | str, overwrite: bool) -> Path | None:
    if resume and overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    existing = _checkpoints(output_dir) if output_dir.is_dir() else []
    if isinstance(resume, str) and resume:
        path = Path(resume)
        if not (path / "trainer_state.json").is_file():
            raise UserError(f"{resume}: not a checkpoint folder (no trainer_state.json)")
        return path
    if resume:
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
        if last is None:
            raise UserError(f"{output_dir}: no checkpoint to resume from (no checkpoint-N folder)")
        return Path(last)
    if existing and not overwrite:
        raise UserError(
            f"{output_dir}: already holds checkpoints of a run ({existing[-1].name}); pass "
            "--resume to continue it or --overwrite to start over"
        )
    if existing and overwrite:
        for p in existing:
            shutil.rmtree(p)
        for name in (METRICS_FILE, EVAL_FILE, EVAL_CURVE_FILE, EVAL_COMPLETIONS_FILE, CURVE_FILE):
            (output_dir / name).unlink(missing_ok=True)
    return None


def _write_config(cfg: TrainConfig, path: Path) -> None:
    import trl

    from cotcredit.version import __version__

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):
        style = "|" if "\n" in value else None  # multi-line strings as literal blocks
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    header = f"# config as run by cotcredit {__version__} (trl {trl.__version__})\n"
    body = yaml.dump(
        cfg.model_dump(mode="json"), Dumper=Dumper, sort_keys=False, allow_unicode=True
    )
    path.write_text(header + body, encoding="utf-8")


def _with_overrides(cfg: TrainConfig, max_steps: int | None, seed: int | None) -> TrainConfig:
    """The config with the command line's --max-steps and --seed applied."""
    source = cfg._source
    if max_steps is not None:
        if max_steps < 1:
            raise UserError(f"--max-steps must be at least 1, got {max_steps}")
        cfg = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"max_steps": max_steps})})
    if seed is not None:
        cfg = cfg.model_copy(update={"seed": seed})
    cfg._source = source
    return cfg


class _PeriodicEval:
    """A TrainerCallback that measures eval accuracy every `every` steps (main process writes
    one line per evaluation to eval_curve.jsonl: step, accuracy, correct, completions). The last
    step is left to the evaluation after training, which adds its line to the curve."""

    def __init__(self, every: int, problems, prompts, options, path: Path):
        from transformers import TrainerCallback

        self.every, self.problems, self.prompts, self.options, self.path = (
            every, problems, prompts, options, path
        )
        self.trainer = None
        outer = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                last = state.max_steps and state.global_step >= state.max_steps
                if state.global_step % outer.every == 0 and outer.trainer is not None and not last:
                    outer.run(state.global_step)

        self.callback = Callback()

    def run(self, step: int) -> None:
        summary, _ = evaluate(self.trainer, self.problems, self.prompts, self.options)
        if self.trainer.accelerator.is_main_process:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"step": step, **summary}) + "\n")


# ---- the run ---------------------------------------------------------------------------------
def train(
    config: str | Path | TrainConfig,
    resume: bool | str = False,
    *,
    max_steps: int | None = None,
    seed: int | None = None,
    overwrite: bool = False,
    callbacks: list | None = None,
    extra_rewards: list | None = None,
) -> TrainResult:
    """Run GRPO (``advantage: grpo``) or GRPO with RREDCoT token advantages (``rredcot``).

    ``config``: a YAML path or a ``TrainConfig``. ``resume``: True continues from the last
    ``checkpoint-N`` in ``output_dir``, a path from that checkpoint; without it an
    ``output_dir`` that already holds checkpoints is refused unless ``overwrite`` (which deletes
    them and the old logs). ``max_steps`` overrides ``grpo.max_steps``, ``seed`` the config's seed. ``callbacks``: extra
    ``transformers.TrainerCallback`` objects. ``extra_rewards``: more TRL reward functions
    (``f(completions, answer, **columns) -> list[float]``), summed with the correctness reward
    (weighted by ``grpo.extra.reward_weights`` when set); in mode ``rredcot`` that total is the
    outcome ζ each completion's segment rewards redistribute (without extra rewards: the graded
    correctness). User mistakes raise ``UserError``.
    """
    require("cotcredit train", "train")  # before the config is read or a model loads
    start = time.perf_counter()
    cfg = load_config(config) if isinstance(config, (str, Path)) else config
    cfg = _with_overrides(cfg, max_steps, seed)
    args = to_grpo_config(cfg)
    peft_config = lora_config(cfg)
    train_problems = load_problems(cfg.train_file, cfg.data_format, cfg.train_split)
    eval_problems = (load_problems(cfg.eval_file, cfg.data_format, cfg.eval_split)
                     if cfg.eval_file is not None else None)
    out = Path(cfg.output_dir)
    checkpoint = _resume_checkpoint(out, resume, overwrite)

    from cotcredit.training.credit import credit_source
    from cotcredit.training.scoring import PolicySegmentRewards
    from cotcredit.training.trainer import RredcotGRPOTrainer

    model, tokenizer, label = load_policy(cfg)
    chat = bool(cfg.chat_template and getattr(tokenizer, "chat_template", None))
    dataset = build_dataset(train_problems, chat, cfg.system_prompt, tokenizer)
    segment_fn = credit_source(cfg, model, tokenizer, train_problems, name=label,
                               temperature=args.temperature,
                               max_new_tokens=args.max_completion_length)
    if isinstance(segment_fn, PolicySegmentRewards):
        _check_rredcot_inputs(segment_fn, train_problems, cfg)

    out.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(out / METRICS_FILE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer = RredcotGRPOTrainer(
            model=model,
            reward_funcs=[correct, *(extra_rewards or [])],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[logger, *(callbacks or [])],
            advantage_mode="grpo" if segment_fn is None else "rredcot",
            segment_rewards_fn=segment_fn,
            strength=cfg.credit.strength,
            floor=cfg.credit.floor,
            shuffle_seed=cfg.seed if cfg.advantage == "shuffled" else None,
            form=cfg.credit.form,
            peft_config=peft_config,
        )
    if hasattr(segment_fn, "model"):
        # With LoRA the trainer wrapped the model: score through the adapted policy it trains.
        segment_fn.model = trainer.model
    logger.trainer = trainer
    main = trainer.accelerator.is_main_process
    if main:
        _write_config(cfg, out / CONFIG_FILE)
        if checkpoint is None:
            (out / METRICS_FILE).unlink(missing_ok=True)
            (out / EVAL_CURVE_FILE).unlink(missing_ok=True)
        else:
            state = json.loads((checkpoint / "trainer_state.json").read_text())
            step = int(state.get("global_step", 0))
            truncate_metrics(out / METRICS_FILE, step)
            truncate_metrics(out / EVAL_CURVE_FILE, step)

    eval_result: dict | None = None
    eval_rows: list[dict] = []
    if eval_problems is not None:
        options = _eval_options(cfg, args)
        markers = template_markers(tokenizer)
        eval_prompts = [
            prompt_ids(tokenizer, prompt_field(p.prompt, chat, cfg.system_prompt, tokenizer,
                                               markers))
            for p in eval_problems
        ]
        settings = {
            # Relative to the working folder when inside it: run folders carry no machine path.
            "file": _shown_path(cfg.eval_file),
            "temperature": options.temperature,
            "top_p": options.top_p,
            "max_new_tokens": options.max_new_tokens,
            "samples": options.n,
            "seed": options.seed,
        }
        previous = _read_json(out / EVAL_FILE) if checkpoint is not None else None
        if previous and previous.get("settings") == settings and previous.get("before"):
            before = previous["before"]  # the base model was evaluated by the first run
            eval_rows = [
                r for r in _read_jsonl(out / EVAL_COMPLETIONS_FILE) if r.get("when") == "before"
            ]
        else:
            before, rows = evaluate(trainer, eval_problems, eval_prompts, options)
            eval_rows = [{"when": "before", **r} for r in rows]
        eval_result = {"settings": settings, "before": before, "after": None}
        if main:
            _write_json(out / EVAL_FILE, eval_result)
            if cfg.eval.every and checkpoint is None:
                with open(out / EVAL_CURVE_FILE, "w", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": 0, **before}) + "\n")
        if cfg.eval.every:
            periodic = _PeriodicEval(
                cfg.eval.every, eval_problems, eval_prompts, options, out / EVAL_CURVE_FILE
            )
            periodic.trainer = trainer
            trainer.add_callback(periodic.callback)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)

    if eval_problems is not None and eval_result is not None:
        after, rows = evaluate(trainer, eval_problems, eval_prompts, options)
        eval_rows += [{"when": "after", **r} for r in rows]
        eval_result["after"] = {**after, "step": trainer.state.global_step}
    curve = None
    if main:
        if eval_result is not None:
            _write_json(out / EVAL_FILE, eval_result)
            if cfg.eval.every and eval_result["after"]:
                truncate_metrics(out / EVAL_CURVE_FILE, trainer.state.global_step - 1)
                with open(out / EVAL_CURVE_FILE, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"step": trainer.state.global_step, **after}) + "\n")
            with open(out / EVAL_COMPLETIONS_FILE, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in eval_rows)
        if (out / METRICS_FILE).exists():
            curve = plot_reward_curve(
                out / METRICS_FILE, out / CURVE_FILE, f"{cfg.advantage}: {label}", eval_result
            )
    trainer.accelerator.wait_for_everyone()
    last = _checkpoints(out)
    return TrainResult(
        output_dir=out,
        global_step=trainer.state.global_step,
        checkpoint=last[-1] if last else None,
        metrics=out / METRICS_FILE,
        eval=eval_result,
        curve=curve,
        config=out / CONFIG_FILE,
        seconds=time.perf_counter() - start,
    )


def _shown_path(path: Path) -> str:
    """`path` relative to the working folder when it lies inside it, else as it is."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _read_jsonl(path: Path) -> list[dict]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
