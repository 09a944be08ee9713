"""RREDCoT's packed probe passes at several query budgets (query tokens per pass), side by side.

    python benchmarks/bench_query_budget.py                        # embedded model, CPU
    python benchmarks/bench_query_budget.py --budgets 256,512,1024 --n 16 --repeats 2

Measured on the 2-core CPU machine, one thread, both cores busy with other work (so ratios,
not seconds): the embedded SmolLM2-135M-Instruct, 4 completions, 3 repeats: 256 at 0.86x
1024's time, 512 at 0.96x; 16 completions, 2 repeats: 0.94x and 0.99x. A 0.8M-parameter
checkpoint of the bench's `long` regime (16 completions of 230 tokens, one call each): 256 at
0.66x, 512 at 0.76x, 128 at 0.87x. Rewards and g agree to 3e-6.

A packed pass runs a (queries x (trace + queries)) attention mask, so a larger budget means
fewer passes but more masked-out attention per query; the best budget depends on the device
(`Scorer` defaults: 4096 on CUDA, 256 on CPU). Completions: the first --n traces of the lookup
study (the embedded model's own), scored by one `OnlineRredcot` call per budget with v̂
(`--value both`, the probes whose length the budget packs). The budgets run interleaved
(rotated each repeat) in one process after a warm-up, so machine load hits them alike; medians
of --repeats. The check: every segment reward and g agrees with the first budget's to 1e-5.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from bench_online import lookup_completions  # the script's own folder is on sys.path

from cotcredit.lm import ModelOptions, load_scorer
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.training.online import OnlineRredcot


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    ap.add_argument("--budgets", default="256,512,1024", help="comma-separated query budgets")
    ap.add_argument("--n", type=int, default=4, help="completions scored per call")
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--value", default="both", choices=("rhat", "vhat", "both"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    budgets = [int(b) for b in args.budgets.split(",")]

    scorer = load_scorer(ModelOptions(model=args.model, device="cpu"))
    prompts, completions, answers, solutions = lookup_completions(scorer, args.n)
    options = RredcotOptions(value=args.value, sum_to="advantage")
    online = OnlineRredcot(scorer.model, scorer.tokenizer, options, segments=args.segments)

    def score(budget: int) -> tuple[float, list[float]]:
        online.scorer.query_budget = budget
        start = time.perf_counter()
        result = online(prompts, completions, answers, solutions)
        return time.perf_counter() - start, [x for r in result for x in r.rewards + r.g]

    score(budgets[0])  # warm-up
    times: dict[int, list[float]] = {b: [] for b in budgets}
    values: dict[int, list[float]] = {}
    for repeat in range(args.repeats):
        for b in budgets[repeat % len(budgets):] + budgets[: repeat % len(budgets)]:
            seconds, values[b] = score(b)
            times[b].append(seconds)
    base = budgets[-1]
    print(f"model {scorer.name}; {args.n} completions, {args.segments} segments, value "
          f"{args.value}, {torch.get_num_threads()} threads, {args.repeats} repeats")
    worst = 0.0
    for b in budgets:
        diff = max(abs(x - y) for x, y in zip(values[b], values[budgets[0]], strict=True))
        worst = max(worst, diff)
        print(f"budget {b:>5}: {statistics.median(times[b]):7.2f} s  "
              f"x budget {base}: {statistics.median(times[b]) / statistics.median(times[base]):.2f}"
              f"  max |difference| {diff:.1e}")
    if worst > 1e-5:
        raise SystemExit("FAIL: the budgets' rewards differ by more than 1e-5")


if __name__ == "__main__":
    main()
