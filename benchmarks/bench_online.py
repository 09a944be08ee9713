"""A batch of completions scored together vs one call per completion (the online API).

    python benchmarks/bench_online.py                  # embedded model, 32 completions
    python benchmarks/bench_online.py --n 64 --segments 8 --value both

Completions: the first --n traces of the lookup study (examples/lookup/study_traces.jsonl: the
embedded model's own completions of the lookup task, ~40-60 tokens of reasoning each), as token
ids after their rendered prompts, the way a trainer hands them over. "batched" is one
`OnlineRredcot` call on all of them (shared padded forward and packed probe passes), "single"
is one call per completion. Both run after a warm-up call, side by side in one process;
medians of --repeats. The check: every segment reward and g of both ways agree to 1e-5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from cotcredit.lm import ModelOptions, load_scorer
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.training.online import OnlineRredcot

TRACES = Path(__file__).resolve().parent.parent / "examples" / "lookup" / "study_traces.jsonl"


def timed(fn, repeats: int):
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def lookup_completions(scorer, n: int) -> tuple[list, list, list, list]:
    """The first `n` lookup-study traces (repeated when fewer) as a trainer hands them over:
    prompt token ids, completion token ids (reasoning and answer, then EOS), answers and
    reference solutions."""
    tok = scorer.tokenizer
    rows = [json.loads(line) for line in TRACES.read_text().splitlines() if line.strip()]
    rows = (rows * (n // len(rows) + 1))[:n]
    prompts = [scorer.encode_prompt(r["prompt"]) for r in rows]
    completions = [tok.encode(r["response"], add_special_tokens=False) + [tok.eos_token_id]
                   for r in rows]
    return prompts, completions, [str(r["answer"]) for r in rows], [r.get("solution") for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    ap.add_argument("--n", type=int, default=32, help="completions in the batch")
    ap.add_argument("--segments", type=int, default=4)
    ap.add_argument("--value", default="rhat", choices=("rhat", "vhat", "both"))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    scorer = load_scorer(ModelOptions(model=args.model, device="cpu"))
    tok = scorer.tokenizer
    prompt_ids, completion_ids, answers, solutions = lookup_completions(scorer, args.n)
    online = OnlineRredcot(scorer.model, tok, RredcotOptions(value=args.value, sum_to="advantage"),
                           segments=args.segments)
    online.score_one(prompt_ids[0], completion_ids[0], answers[0], solutions[0])  # warm-up

    def batched():
        return online(prompt_ids, completion_ids, answers, solutions)

    def single():
        return [online.score_one(p, c, a, s)
                for p, c, a, s in zip(prompt_ids, completion_ids, answers, solutions)]

    t_batch, together = timed(batched, args.repeats)
    t_single, alone = timed(single, args.repeats)
    diff = 0.0
    for x, y in zip(together, alone):
        assert x.spans == y.spans, "segmentations differ"
        diff = max(diff, *(abs(a - b) for a, b in zip(x.rewards + x.g, y.rewards + y.g)))
    tokens = sum(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids))
    print(f"model {scorer.name}; {args.n} completions, {tokens} prompt+completion tokens, "
          f"{args.segments} segments, value {args.value}, {torch.get_num_threads()} threads")
    print(f"batched: {t_batch:.2f} s   single calls: {t_single:.2f} s   "
          f"ratio single/batched: {t_single / t_batch:.2f}x")
    print(f"max |difference| of rewards and g: {diff:.2e} ({'ok' if diff <= 1e-5 else 'FAIL'})")
    if diff > 1e-5:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
