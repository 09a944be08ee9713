"""Does RREDCoT credit the right line? A lookup task the embedded model can do.

    python benchmarks/bench_lookup.py                 # 60 right + 60 wrong traces, embedded model
    python benchmarks/bench_lookup.py --traces 20 --model path/to/model

Each prompt holds a small price table and asks for one item's price. Each reasoning has one line
per segment; exactly one line reads a value from the table, the right row's (the trace is
correct, ζ = 1) or another row's (wrong, ζ = 0). A variant of RREDCoT "hits" when that line gets
the largest segment reward g_k − g_{k−1} in a correct trace, or the smallest in a wrong one (the
end-of-trace correction ζ − g_K is left out: it is the same bookkeeping for every variant).
The script prints hits per variant: --value rhat/vhat/both, --space prob/log, length norm, and,
for each variant in probability space, how often g_k exceeds 1 (two estimates of one success
probability added) and how many correct traces therefore get a negative correction 1 − g_K.
"""

from __future__ import annotations

import argparse
import random
import time

from cotcredit.data.trace import Trace
from cotcredit.lm import ModelOptions, load_scorer
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.pipeline.run import run_analysis
from cotcredit.segmentation import SegmentOptions

ITEMS = ["apple", "pear", "plum", "melon", "lemon", "mango", "peach", "grape", "kiwi", "cherry"]
LINES = [
    "Let me read the question again.\n",
    "It asks for the price of the {x}.\n",
    "I will find the row in the price list.\n",
    "The {y} costs {v} dollars.\n",
    "That is the value I need.\n",
]
KEY_LINE = 3


def make_traces(n: int, seed: int) -> list[Trace]:
    rng = random.Random(seed)
    traces = []
    for i in range(n):
        items = rng.sample(ITEMS, 4)
        prices = rng.sample(range(2, 30), 4)
        table = "\n".join(f"- {a}: {p} dollars" for a, p in zip(items, prices))
        x = 0
        right = i % 2 == 0
        y = x if right else rng.randrange(1, 4)
        lines = [ln.format(x=items[x], y=items[y], v=prices[y]) for ln in LINES]
        traces.append(Trace(
            id=f"lookup-{i}",
            prompt=f"Price list:\n{table}\nWhat is the price of the {items[x]}? "
                   "Give the final answer as \\boxed{}.",
            response="".join(lines) + f"The final answer is $\\boxed{{{prices[y]}}}$.",
            answer=str(prices[x]),
            solution=f"The price list says the {items[x]} costs {prices[x]} dollars. "
                     f"The final answer is $\\boxed{{{prices[x]}}}$.",
            outcome=1.0 if right else 0.0,
        ))
    return traces


VARIANTS = {
    "R̂ alone, prob": RredcotOptions(value="rhat", space="prob"),
    "R̂ alone, log": RredcotOptions(value="rhat", space="log"),
    "R̂ + v̂, prob": RredcotOptions(value="both", space="prob"),
    "R̂ + v̂ (length-norm), prob": RredcotOptions(value="both", space="prob", length_norm=True),
    "R̂ + v̂, log": RredcotOptions(value="both", space="log"),
    "v̂ alone, prob": RredcotOptions(value="vhat", space="prob"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--traces", type=int, default=120, help="half right, half wrong")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    scorer = load_scorer(ModelOptions(model=args.model))
    traces = make_traces(args.traces, args.seed)
    seg = SegmentOptions(segments=len(LINES), keywords=())
    half = len(traces) // 2
    print(f"model: {scorer.name}; {len(traces)} traces ({half} right, {half} wrong)")
    print(f"{'variant':32s} {'right':>7s} {'wrong':>7s} {'total':>9s}  seconds  g>1 (states)  "
          "correct traces with correction < 0")
    for name, opts in VARIANTS.items():
        t0 = time.perf_counter()
        rows = run_analysis(traces, scorer, methods={"rredcot": opts},
                            segment_options=seg).rows["rredcot"]
        hits = {1.0: 0, 0.0: 0}
        for t in traces:
            rs = [r for r in rows if r["trace_id"] == t.id]
            assert len(rs) == len(LINES) and rs[KEY_LINE]["text"].startswith("The ")
            deltas = [r["g_after"] - r["g_before"] for r in rs]
            pick = max if t.outcome == 1.0 else min
            hits[t.outcome] += int(pick(range(len(deltas)), key=deltas.__getitem__) == KEY_LINE)
        n = len(traces) // 2
        total = hits[1.0] + hits[0.0]
        above, states, negative = 0, 0, 0
        if opts.space == "prob":
            for t in traces:
                rs = [r for r in rows if r["trace_id"] == t.id]
                gs = [rs[0]["g_before"]] + [r["g_after"] for r in rs]
                above += sum(g > 1 for g in gs)
                states += len(gs)
                negative += t.outcome == 1.0 and rs[-1]["correction"] < 0
        over = f"{above:>4d}/{states:<5d}  {negative:>3d}/{n:<3d}" if states else "-"
        print(f"{name:32s} {hits[1.0]:>3d}/{n:<3d} {hits[0.0]:>3d}/{n:<3d} {total:>4d}/{2 * n:<4d} "
              f"{time.perf_counter() - t0:6.1f}  {over}")


if __name__ == "__main__":
    main()
