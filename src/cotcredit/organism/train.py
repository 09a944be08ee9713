"""Training the organism from scratch on CPU, deterministically.

Two regimes, one recipe:

- ``full``: every training sequence is prompt ⊕ full reference solution ⊕ end token, with the
  loss on the response. A forced "The answer is " mid-chain is out of this model's
  distribution: it has only ever stated an answer after the last step.
- ``early``: as ``full`` (the checked-in one continues training the ``full`` checkpoint,
  `init_from`), and a fraction of the sequences (`early_fraction`) stop after a random
  number k < n of steps and state the *final* answer: steps 1..k ⊕ "The answer is Y*.". Their
  loss is on Y* only, so the model learns to forecast the answer at a step boundary without
  learning to stop early when it samples.

Training stops at the first evaluation where the accuracy of temperature-1 samples on the dev
problems reaches `target_accuracy` (or after `max_steps`), so the organism is calibrated to
solve about half the problems. Seeds fix the initialisation, the data order and the evaluation
samples; with the same torch build and thread count the weights come out bit-identical.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from cotcredit.options import option
from cotcredit.organism.checker import check_response
from cotcredit.organism.model import build_config, build_tokenizer
from cotcredit.organism.task import ANSWER_PREFIX, Problem, reference_solution

REGIMES = ("full", "early")


@dataclass(frozen=True)
class TrainOptions:
    """How an organism checkpoint is trained."""

    regime: str = option("full", choices=REGIMES, help="full: full chains only; early: early answers too.")
    seed: int = option(0, help="Seed of initialisation, data order and evaluation samples.")
    hidden: int = option(128, help="Hidden size.")
    layers: int = option(3, help="Decoder layers.")
    heads: int = option(4, help="Attention heads.")
    batch_size: int = option(32, help="Sequences per step.")
    lr: float = option(3e-3, help="Peak learning rate (AdamW, linear warm-up, then constant).")
    warmup: int = option(50, help="Warm-up steps.")
    max_steps: int = option(3000, help="Training steps at most.")
    eval_every: int = option(50, help="Steps between dev evaluations.")
    eval_problems: int = option(100, help="Dev problems sampled (temperature 1) per evaluation.")
    target_accuracy: float = option(0.5, help="Stop once the dev accuracy reaches this.")
    min_steps: int = option(0, help="Train at least this many steps before stopping.")
    init_from: str | None = option(
        None, help="Start from this checkpoint folder (its tokenizer and architecture)."
    )
    early_fraction: float = option(0.5, help="early regime: fraction of early-answer sequences.")
    # One thread: on a shared 2-core machine it trained 4x faster than two.
    threads: int = option(1, help="torch CPU threads (results depend on it).")


def encode_example(tok, problem: Problem, upto: int | None = None) -> tuple[list[int], list[int]]:
    """(input ids, labels) of one training sequence; labels are -100 where no loss is taken.

    `upto=None`: the full solution, loss on every response token. `upto=k`: k steps, then the
    final answer stated, loss on the answer's token only."""
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": problem.prompt}], tokenize=False, add_generation_prompt=True
    )
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    if upto is None:
        r_ids = tok(reference_solution(problem), add_special_tokens=False)["input_ids"]
        r_ids = r_ids + [tok.eos_token_id]
        return p_ids + r_ids, [-100] * len(p_ids) + r_ids
    head = reference_solution(problem, upto).rsplit(ANSWER_PREFIX, 1)[0] + ANSWER_PREFIX
    full = head + f"{problem.answer}."
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    labels = [
        t if s < len(head) + len(str(problem.answer)) and e > len(head) else -100
        for t, (s, e) in zip(ids, enc["offset_mapping"])
    ]
    return p_ids + ids, [-100] * len(p_ids) + labels


def sample_responses(model, tok, problems: list[Problem], seed: int, max_new_tokens: int = 60,
                     batch: int = 100) -> list[str]:
    """One temperature-1 sample (no top-k/top-p) per problem, seeded."""
    from transformers import GenerationConfig

    gen = GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    out: list[str] = []
    torch.manual_seed(seed)
    tok.padding_side = "left"
    for i in range(0, len(problems), batch):
        chunk = problems[i : i + batch]
        prompts = [
            tok.apply_chat_template([{"role": "user", "content": p.prompt}], tokenize=False,
                                    add_generation_prompt=True)
            for p in chunk
        ]
        enc = tok(prompts, add_special_tokens=False, return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**enc, generation_config=gen)
        out += tok.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    tok.padding_side = "right"
    return out


def evaluate(model, tok, problems: list[Problem], seed: int) -> dict:
    """Accuracy of temperature-1 samples and the histogram of first-error steps."""
    model.eval()
    responses = sample_responses(model, tok, problems, seed)
    model.train()
    checks = [check_response(p, r) for p, r in zip(problems, responses)]
    hist: dict[int, int] = {}
    for c in checks:
        if c.first_error_step:
            hist[c.first_error_step] = hist.get(c.first_error_step, 0) + 1
    return {
        "accuracy": sum(c.correct for c in checks) / len(checks),
        "steps_right": sum(c.steps_right for c in checks) / len(checks),
        "first_error_hist": dict(sorted(hist.items())),
    }


def forecast_logprob(model, tok, problems: list[Problem], batch: int = 200) -> dict[int, float]:
    """How well a forced answer forecasts: the mean log p(Y*) after "The answer is " is
    appended to the first k reference steps, by the number of steps still to go (n − k).

    0 steps to go is the answer line itself; log(1/20) = −3.0 is a uniform guess over the
    task's values. The probe is the one RREDCoT makes (the exit string, then the answer, read
    as one text), on reference prefixes rather than the model's own steps."""
    rows: list[tuple[int, list[int]]] = []
    for p in problems:
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": p.prompt}], tokenize=False, add_generation_prompt=True
        )
        for k in range(len(p.steps) + 1):
            head = reference_solution(p, k).rsplit(ANSWER_PREFIX, 1)[0] + ANSWER_PREFIX
            ids = tok(prompt + head + str(p.answer), add_special_tokens=False)["input_ids"]
            rows.append((len(p.steps) - k, ids))
    by: dict[int, list[float]] = {}
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
        for r, (togo, ids) in enumerate(chunk):
            # The answer is one token (every value is), the last of the row.
            by.setdefault(togo, []).append(logp[r, len(ids) - 2, ids[-1]].item())
    model.train(was_training)
    return {k: round(sum(v) / len(v), 3) for k, v in sorted(by.items())}


def train_organism(options: TrainOptions, train: list[Problem], dev: list[Problem], out: Path,
                   log=print) -> dict:
    """Train one checkpoint and save it (model, tokenizer, `training.json`) to `out`."""
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    if options.init_from:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(options.init_from)
        model = LlamaForCausalLM.from_pretrained(options.init_from, dtype=torch.float32)
    else:
        tok = build_tokenizer()
        config = build_config(tok, hidden=options.hidden, layers=options.layers,
                              heads=options.heads)
        model = LlamaForCausalLM(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=options.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, options.warmup))
    )
    order: list[int] = []
    curve, started = [], time.time()
    result: dict = {}
    step = 0
    for step in range(1, options.max_steps + 1):
        batch = []
        for _ in range(options.batch_size):
            if not order:
                order = list(range(len(train)))
                rng.shuffle(order)
            p = train[order.pop()]
            upto = None
            if options.regime == "early" and rng.random() < options.early_fraction:
                upto = rng.randrange(len(p.steps))
            batch.append(encode_example(tok, p, upto))
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (x, y) in enumerate(batch):
            ids[i, : len(x)] = torch.tensor(x)
            labels[i, : len(y)] = torch.tensor(y)
            mask[i, : len(x)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % options.eval_every == 0 or step == options.max_steps:
            result = evaluate(model, tok, dev[: options.eval_problems], seed=options.seed + step)
            result.update(step=step, loss=round(loss.item(), 4),
                          seconds=round(time.time() - started, 1))
            curve.append(result)
            log(json.dumps(result))
            if result["accuracy"] >= options.target_accuracy and step >= options.min_steps:
                break
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config.do_sample = True  # the organism is meant to be sampled at T = 1
    model.save_pretrained(out)
    tok.save_pretrained(out)
    info = {
        "options": {**asdict(options), "init_from": options.init_from and Path(options.init_from).name},
        "steps": step, "parameters": model.num_parameters(),
        "train_problems": len(train), "torch": torch.__version__,
        "seconds": round(time.time() - started, 1), "curve": curve,
    }
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    return info
