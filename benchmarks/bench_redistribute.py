"""Seconds per trace: RREDCoT (packed probes) vs one plain forward vs the naive per-boundary loop.

    python benchmarks/bench_redistribute.py                      # embedded model, 1k tokens, K=16
    python benchmarks/bench_redistribute.py --tokens 8192 --segments 32 --skip-naive
    python benchmarks/bench_redistribute.py --references 1 2 4 8   # v̂ over n references

"redistribute" is everything `cotcredit redistribute` does for a trace after loading: encode,
one forward pass (entropies + KV cache), segmentation, all probes, rows. "plain forward" is one
forward pass over the same prompt + reasoning tokens, without cache. "naive" scores every probe
with its own full forward pass over prefix + probe. Medians of --repeats runs, measured side by
side in one process.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from cotcredit.data.trace import Trace
from cotcredit.lm import ModelOptions, load_scorer
from cotcredit.methods.base import TraceContext
from cotcredit.methods.rredcot import RredcotOptions, estimate
from cotcredit.methods.rredcot import run as rredcot_run
from cotcredit.segmentation import SegmentOptions, segment_encoded

SENTENCES = [
    "Let me compute the cost of the apples first: 4 apples at 3 dollars each is 12 dollars.",
    "Wait, I should double-check the price of the oranges in the table.",
    "So the oranges cost 2 dollars each, and 5 of them cost 10 dollars.",
    "Hmm, the question asks for the total, so I add the two amounts.",
    "Therefore the total is 12 + 10 = 22 dollars.",
    "Actually, let me verify once more by adding item by item.",
]


def synthetic_trace(scorer, n_tokens: int) -> Trace:
    lines, i = [], 0
    while len(scorer.encode_text("\n".join(lines))) < n_tokens:
        lines.append(SENTENCES[i % len(SENTENCES)])
        i += 1
    return Trace(
        "bench", "Apples cost 3 dollars and oranges 2 dollars. What do 4 apples and 5 oranges cost?",
        "\n".join(lines) + "\nThe final answer is $\\boxed{22}$.", "22",
        solution="4 apples at 3 dollars each cost 4 * 3 = 12 dollars.\n"
        "5 oranges at 2 dollars each cost 5 * 2 = 10 dollars.\n"
        "So the total is 12 + 10 = 22 dollars.\nThe final answer is $\\boxed{22}$.",
        outcome=1.0,
    )


def with_references(trace: Trace, n: int) -> Trace:
    """The trace with n distinct reference solutions (its own first; the others reworded)."""
    others = [trace.solution.replace("4 apples", f"Four apples (way {j})", 1) for j in range(1, n)]
    return dataclasses.replace(trace, extra={**trace.extra, "solutions": others})


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model (default: embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--tokens", type=int, default=1024, help="reasoning tokens of the synthetic trace")
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--references", type=int, nargs="*", default=[],
                    help="also time v̂ over this many distinct references (each n given)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args()

    scorer = load_scorer(ModelOptions(model=args.model, device=args.device, dtype=args.dtype))
    trace = synthetic_trace(scorer, args.tokens)
    seg_opts = SegmentOptions(segments=args.segments)
    enc = scorer.encode(trace, reserve=256)
    scorer.terminator_ids("}")  # built once per model; not per trace
    x = torch.tensor([enc.ids], device=scorer.device)

    def redistribute(value: str, part: str = "whole", n_refs: int = 0):
        options = RredcotOptions(value=value, solution_part=part)
        if n_refs:
            options = dataclasses.replace(options, references="solutions", empty_part="drop")
        traced = with_references(trace, n_refs) if n_refs else trace

        def run():
            e = scorer.encode(traced, reserve=256 * max(n_refs, 1))
            fwd = scorer.forward(e.ids, stats_from=e.prompt_len)
            seg = segment_encoded(e, fwd.entropies, seg_opts)
            rredcot_run(TraceContext(scorer, e, fwd, seg), options)
        return run

    def plain():
        scorer.model(input_ids=x)  # the model's own forward: logits at every position

    fwd = scorer.forward(enc.ids, stats_from=enc.prompt_len)
    ctx = TraceContext(scorer, enc, fwd, segment_encoded(enc, fwd.entropies, seg_opts))

    def naive():
        estimate(ctx, RredcotOptions(value="rhat", probe_mode="naive"))

    with torch.inference_mode():
        redistribute("rhat")()  # warm-up
        t_plain = timed(plain, args.repeats)
        t_rhat = timed(redistribute("rhat"), args.repeats)
        t_both = timed(redistribute("both"), args.repeats)
        t_remaining = timed(redistribute("both", "remaining"), args.repeats)
        t_refs = {n: timed(redistribute("both", "remaining", n), args.repeats)
                  for n in args.references}
        t_naive = None if args.skip_naive else timed(naive, max(1, args.repeats // 2))
        checked = RredcotOptions(value="both", solution_part="remaining")
        packed = estimate(ctx, checked)
        ref = packed if args.skip_naive else estimate(
            ctx, dataclasses.replace(checked, probe_mode="naive"))
    print(f"model: {scorer.name}  device: {scorer.device}  dtype: {scorer.dtype}  threads: {torch.get_num_threads()}")
    print(f"trace: {enc.prompt_len} prompt + {enc.n_reasoning} reasoning tokens, {len(ctx.segmentation)} segments")
    print(f"plain forward (model logits)    {t_plain:8.2f} s")
    print(f"redistribute --value rhat       {t_rhat:8.2f} s   ({t_rhat / t_plain:.2f}x plain forward)")
    print(f"redistribute --value both       {t_both:8.2f} s   ({t_both / t_plain:.2f}x plain forward)"
          "   --solution-part whole")
    print(f"redistribute --value both       {t_remaining:8.2f} s   "
          f"({t_remaining / t_plain:.2f}x plain forward)   --solution-part remaining")
    for n, t in t_refs.items():
        print(f"  over {n} reference(s)          {t:8.2f} s   ({t / t_plain:.2f}x plain forward)"
              "   --references solutions --empty-part drop")
    if t_naive is not None:
        print(f"naive per-boundary (rhat)       {t_naive:8.2f} s   (redistribute is {t_naive / t_rhat:.1f}x faster)")
        diff = max(abs(a - b) for a, b in zip(packed.r_hat + packed.v_hat, ref.r_hat + ref.v_hat))
        print(f"max |packed - naive| log-prob (R̂ and v̂, remaining): {diff:.2e}")


if __name__ == "__main__":
    main()
