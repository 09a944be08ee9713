"""Training an organism checkpoint from scratch on CPU, deterministically, for any organism
regime (`unique`, `multipath`, `forecast`, `long`): the regime gives the task's text, this
module the recipe.

- Every training sequence is prompt ⊕ a response the regime shows for the problem (its
  reference; for `multipath` a valid order drawn uniformly) ⊕ end token, loss on the response.
- With `early_fraction` > 0 (the "early" recipe), that fraction of the sequences stop after a
  random number k of the response's reasoning lines and state the *final* answer: lines 1..k ⊕
  "The answer is Y*.", with the loss on Y* only, so the model learns to forecast the answer at
  a line boundary without learning to stop early when it samples.

Training stops at the first evaluation where the accuracy of temperature-1 samples on the dev
problems reaches `target_accuracy` (or after `max_steps`), so the organism is calibrated to
solve about part of the problems. Seeds fix the initialisation, the data order and the
evaluation samples; with the same torch build and thread count the weights come out
bit-identical. `save_dtype` float16 halves the checkpoint on disk; it is loaded as float32
(the scorer does on CPU), so inference from the stored weights is exact and reproducible, and
the held-out report is measured on those stored weights.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cotcredit.bench.lines import reasoning_lines
from cotcredit.bench.organism.model import build_config, build_tokenizer
from cotcredit.bench.regimes import get_regime
from cotcredit.bench.regimes.base import Problem, Regime
from cotcredit.options import option

ORGANISM_REGIMES = ("unique", "multipath", "forecast", "long")


@dataclass(frozen=True)
class TrainOptions:
    """How an organism checkpoint is trained."""

    regime: str = option("unique", choices=ORGANISM_REGIMES, help="The regime whose task is learned.")
    seed: int = option(0, help="Seed of initialisation, data order and evaluation samples.")
    hidden: int = option(128, help="Hidden size.")
    layers: int = option(3, help="Decoder layers.")
    heads: int = option(4, help="Attention heads.")
    positions: int = option(256, help="Positions (the longest prompt + response).")
    batch_size: int = option(32, help="Sequences per step.")
    lr: float = option(3e-3, help="Peak learning rate (AdamW, linear warm-up, then constant).")
    warmup: int = option(50, help="Warm-up steps.")
    max_steps: int = option(3000, help="Training steps at most.")
    eval_every: int = option(50, help="Steps between dev evaluations.")
    eval_problems: int = option(100, help="Dev problems sampled (temperature 1) per evaluation.")
    eval_max_new_tokens: int | None = option(
        None, help="Tokens an evaluation sample may generate [default: the regime's sampling]."
    )
    target_accuracy: float = option(0.5, help="Stop once the dev accuracy reaches this.")
    min_steps: int = option(0, help="Train at least this many steps before stopping.")
    train_problems: int = option(20000, help="Training problems (the regime's train split).")
    init_from: str | None = option(
        None, help="Start from this checkpoint folder (its tokenizer and architecture)."
    )
    early_fraction: float = option(
        0.0, help="Fraction of early-answer sequences (0: full responses only)."
    )
    save_dtype: str = option("float32", choices=("float32", "float16"),
                             help="Storage dtype of the saved weights (loaded as float32).")
    # One thread: on a shared 2-core machine it trained 4x faster than two.
    threads: int = option(1, help="torch CPU threads (results depend on it).")


def render_prompt(tok, prompt: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                   add_generation_prompt=True)


def early_head(response: str, k: int, exit_string: str) -> str:
    """The first `k` reasoning lines of `response` (with their line breaks), then the exit
    string: what an early-answer sequence (and a forecast probe) shows before the answer."""
    lines = reasoning_lines(response, exit_string)
    end = lines[k][0] if k < len(lines) else len(response.rsplit(exit_string, 1)[0])
    return response[:end] + exit_string


def encode_example(tok, problem: Problem, response: str | None = None, upto: int | None = None,
                   exit_string: str = "The answer is ") -> tuple[list[int], list[int]]:
    """(input ids, labels) of one training sequence; labels are -100 where no loss is taken.

    `response` defaults to the problem's reference. `upto=None`: the whole response, loss on
    every response token. `upto=k`: its first k reasoning lines, then the final answer stated,
    loss on the answer's token(s) only."""
    response = problem.solution if response is None else response
    p_ids = tok(render_prompt(tok, problem.prompt), add_special_tokens=False)["input_ids"]
    if upto is None:
        r_ids = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return p_ids + r_ids, [-100] * len(p_ids) + r_ids
    head = early_head(response, upto, exit_string)
    enc = tok(head + f"{problem.answer}.", add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    stop = len(head) + len(problem.answer)
    labels = [t if s < stop and e > len(head) else -100
              for t, (s, e) in zip(ids, enc["offset_mapping"])]
    return p_ids + ids, [-100] * len(p_ids) + labels


def sample_responses(model, tok, prompts: list[str], seed: int, max_new_tokens: int = 60,
                     batch: int = 100) -> list[str]:
    """One temperature-1 sample (no top-k/top-p) per prompt, seeded: the training recipe's
    quick evaluation (traces for the benchmark go through `cotcredit.generate`)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    out: list[str] = []
    torch.manual_seed(seed)
    tok.padding_side = "left"
    for i in range(0, len(prompts), batch):
        chunk = [render_prompt(tok, p) for p in prompts[i : i + batch]]
        enc = tok(chunk, add_special_tokens=False, return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**enc, generation_config=gen)
        out += tok.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    tok.padding_side = "right"
    return out


def evaluate(model, tok, regime: Regime, problems: list[Problem], seed: int,
             max_new_tokens: int | None = None) -> dict:
    """Accuracy of temperature-1 samples, the share with every step right and the histogram
    of first-error steps."""
    was_training = model.training
    model.eval()
    responses = sample_responses(model, tok, [p.prompt for p in problems], seed,
                                 max_new_tokens or regime.sampling["max_new_tokens"])
    model.train(was_training)
    labels = [regime.check(p, r) for p, r in zip(problems, responses)]
    hist: dict[int, int] = {}
    for c in labels:
        if c.first_error_step:
            hist[c.first_error_step] = hist.get(c.first_error_step, 0) + 1
    return {
        "accuracy": sum(c.correct for c in labels) / len(labels),
        "steps_right": sum(c.error_char < 0 for c in labels) / len(labels),
        "first_error_hist": dict(sorted(hist.items())),
    }


def forecast_logprob(model, tok, problems: list[Problem], exit_string: str = "The answer is ",
                     key: Callable[[Problem, int, int], object] | None = None,
                     batch: int = 200) -> dict:
    """How well a forced answer forecasts: the mean log p(Y*) after the exit string is appended
    to the first k reasoning lines of the reference, grouped by `key(problem, k, n_lines)`
    (default: the lines still to go, n_lines − k).

    The probe is the one RREDCoT makes (the exit string, then the answer, read as one text),
    on reference prefixes rather than the model's own lines. The answer must be one token (every
    organism value is)."""
    key = key or (lambda p, k, n: n - k)
    rows: list[tuple[object, list[int]]] = []
    for p in problems:
        prompt = render_prompt(tok, p.prompt)
        n = len(reasoning_lines(p.solution, exit_string))
        for k in range(n + 1):
            ids = tok(prompt + early_head(p.solution, k, exit_string) + p.answer,
                      add_special_tokens=False)["input_ids"]
            rows.append((key(p, k, n), ids))
    by: dict = {}
    was_training = model.training
    model.eval()
    for i in range(0, len(rows), batch):
        chunk = rows[i : i + batch]
        width = max(len(ids) for _, ids in chunk)
        x = torch.full((len(chunk), width), tok.pad_token_id)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (_, ids) in enumerate(chunk):
            x[r, : len(ids)] = torch.tensor(ids)
            mask[r, : len(ids)] = 1
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=x, attention_mask=mask).logits.float(), -1)
        for r, (group, ids) in enumerate(chunk):
            by.setdefault(group, []).append(logp[r, len(ids) - 2, ids[-1]].item())
    model.train(was_training)
    return {k: round(sum(v) / len(v), 3) for k, v in sorted(by.items())}


def mark_float32(folder: str | Path) -> None:
    """Make the checkpoint in `folder` load as float32 by default (`from_pretrained` without a
    dtype reads it from config.json), whatever dtype its weights are stored in."""
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    config["dtype"] = "float32"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def load_checkpoint(folder: str | Path):
    """(model, tokenizer) of an organism checkpoint folder, the weights as float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(folder)


def _batch(tok, seqs: list[tuple[list[int], list[int]]]):
    width = max(len(ids) for ids, _ in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    labels = torch.full((len(seqs), width), -100)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (x, y) in enumerate(seqs):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return ids, mask, labels


def _start(options: TrainOptions, regime: Regime, train: list[Problem]):
    from transformers import AutoTokenizer, LlamaForCausalLM

    if options.init_from:
        tok = AutoTokenizer.from_pretrained(options.init_from)
        model = LlamaForCausalLM.from_pretrained(options.init_from, dtype=torch.float32)
        if options.positions > model.config.max_position_embeddings:  # rotary: no table to grow
            model.config.max_position_embeddings = options.positions
        tok.model_max_length = max(tok.model_max_length, options.positions)
        return model, tok
    corpus = [p.prompt + "\n" + p.solution for p in train[:3000]]
    # The unique regime keeps the tokenizer its checkpoint was trained with (the default).
    tok = build_tokenizer(None if regime.name == "unique" else corpus, options.positions,
                          regime.max_number)
    config = build_config(tok, hidden=options.hidden, layers=options.layers,
                          heads=options.heads, positions=options.positions)
    return LlamaForCausalLM(config), tok


def train_organism(options: TrainOptions, train: list[Problem], dev: list[Problem], out: Path,
                   log=print) -> dict:
    """Train one checkpoint on `train` (stopping on `dev`) and save it (model, tokenizer,
    `training.json`) to `out`."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    regime = get_regime(options.regime)
    torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    model, tok = _start(options, regime, train)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, options.warmup))
    )
    order: list[int] = []
    curve, started = [], time.time()
    step = 0
    for step in range(1, options.max_steps + 1):
        seqs = []
        for _ in range(options.batch_size):
            if not order:
                order = list(range(len(train)))
                rng.shuffle(order)
            p = train[order.pop()]
            response = regime.training_response(p, rng)
            upto = None
            if options.early_fraction and rng.random() < options.early_fraction:
                upto = rng.randrange(len(reasoning_lines(response, regime.exit_string)))
            seqs.append(encode_example(tok, p, response, upto, regime.exit_string))
        ids, mask, labels = _batch(tok, seqs)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % options.eval_every == 0 or step == options.max_steps:
            result = evaluate(model, tok, regime, dev[: options.eval_problems],
                              options.seed + step, options.eval_max_new_tokens)
            result.update(step=step, loss=round(loss.item(), 4),
                          seconds=round(time.time() - started, 1))
            curve.append(result)
            log(json.dumps(result))
            if result["accuracy"] >= options.target_accuracy and step >= options.min_steps:
                break
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.do_sample = True  # the organism is meant to be sampled at T = 1
    if options.save_dtype == "float16":
        model = model.to(torch.float16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    mark_float32(out)
    info = {
        "options": {**asdict(options),
                    "init_from": options.init_from and Path(options.init_from).name},
        "steps": step, "parameters": model.num_parameters(),
        "train_problems": len(train), "torch": torch.__version__,
        "seconds": round(time.time() - started, 1), "curve": curve,
    }
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    return info
