"""Segmentation cost as the reasoning grows: 1×, 10× and 100× the tokens, no model.

    python benchmarks/bench_segmentation.py                 # 1k, 10k, 100k tokens, K = 16
    python benchmarks/bench_segmentation.py --segments 64

A synthetic reasoning of short lines, half of them opened by a discourse keyword ("Wait,", "So"),
one token per character (so candidate cuts grow with the text: about one per 13 tokens), random
entropies. Prints the seconds of `segment_encoded` (candidate cuts, merge down to K, segment
rows) per size and the cost per token relative to the smallest size: flat means linear.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from cotcredit.data.trace import Trace
from cotcredit.lm.encoding import EncodedTrace
from cotcredit.segmentation import SegmentOptions, segment_encoded

LINES = ["Wait, check row {i}.\n", "So it is {i}.\n", "The next value is {i}.\n", "Then add.\n"]


def synthetic(tokens: int, seed: int = 0) -> tuple[EncodedTrace, torch.Tensor]:
    rng = random.Random(seed)
    text, i = "", 0
    while len(text) < tokens:
        text += LINES[rng.randrange(len(LINES))].format(i=i)
        i += 1
    text = text[:tokens]
    response = text + "The answer is 1."
    trace = Trace(id="synthetic", prompt="p", response=response, answer="1")
    enc = EncodedTrace(trace=trace, prompt_ids=[0], reasoning_ids=list(range(len(text))),
                       token_starts=list(range(len(text) + 1)), cuttable=[True] * len(text))
    gen = torch.Generator().manual_seed(seed)
    return enc, torch.rand(len(text) + 1, generator=gen, dtype=torch.float32) * 3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many")
    args = ap.parse_args()
    options = SegmentOptions(segments=args.segments)
    base = None
    print(f"{'tokens':>9} {'candidates':>10} {'seconds':>9} {'µs/token':>9} {'vs smallest':>11}")
    for n in args.sizes:
        enc, ent = synthetic(n)
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            seg = segment_encoded(enc, ent, options)
            best = min(best, time.perf_counter() - t0)
        candidates = enc.reasoning_text.count("\n")
        per_token = best / n
        base = base or per_token
        assert len(seg.segments) == min(args.segments, n)
        print(f"{n:>9,} {candidates:>10,} {best:>9.4f} {per_token * 1e6:>9.2f} "
              f"{per_token / base:>10.2f}×")


if __name__ == "__main__":
    main()
