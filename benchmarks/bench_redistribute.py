"""Seconds per trace: RREDCoT (packed probes) vs one plain forward vs the naive per-boundary loop.

    python benchmarks/bench_redistribute.py                      # embedded model, 1k tokens, K=16
    python benchmarks/bench_redistribute.py --tokens 8192 --segments 32 --skip-naive
    python benchmarks/bench_redistribute.py --references 1 2 4 8   # v̂ over n references

"redistribute" is everything `cotcredit redistribute` does for a trace after loading: encode,
one forward pass (entropies + KV cache), segmentation, all probes, rows. "plain forward" is one
forward pass over the same prompt + reasoning tokens, without cache. "naive" scores every probe
with its own full forward pass over prefix + probe. Medians of --repeats runs, measured side by
side in one process. "tokens" is what the model computed for the trace (its forward pass plus
every probe's query tokens in the packed passes) over the trace's own tokens: the time's
machine-independent part (a packed probe token costs about what a trace token does, plus its
attention to the cached trace).

Rows (every value option named, so a row keeps its meaning whatever the defaults are): R̂ alone;
the default v̂ (the trace's listed solutions, matched by content, the empty part dropped; with one
reference here, as an in-memory trace has no siblings); the one-reference estimator over the
remaining steps with the empty part kept (the earlier default) and over the whole solution; and
with --references, the default over n distinct references.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch

from cotcredit.data.trace import Trace
from cotcredit.lm import ModelOptions, load_scorer
from cotcredit.methods import TraceContext
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


#: The one-reference estimator over the remaining steps (the earlier default).
ONE_REFERENCE = {"references": "solution", "solution_part": "remaining", "empty_part": "keep"}
#: The default v̂ as an in-memory trace gets it (no siblings: its listed solutions).
KNOWN_PATHS = {"references": "solutions", "solution_part": "matched", "empty_part": "drop"}


def synthetic_trace(scorer, n_tokens: int) -> Trace:
    lines, i = [], 0
    while len(scorer.encode_text("\n".join(lines))) < n_tokens:
        lines.append(SENTENCES[i % len(SENTENCES)])
        i += 1
    return Trace(
        "bench",
        "Apples cost 3 dollars and oranges 2 dollars. What do 4 apples and 5 oranges cost?",
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
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model (default: embedded SmolLM2-135M-Instruct)")
    ap.add_argument("--tokens", type=int, default=1024,
                    help="reasoning tokens of the synthetic trace")
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

    tokens: dict[str, float] = {}

    def redistribute(value: str, paths: dict, n_refs: int = 0):
        options = RredcotOptions(value=value, **paths)
        traced = with_references(trace, n_refs) if n_refs else trace

        def run():
            e = scorer.encode(traced, reserve=256 * max(n_refs, 1))
            before = scorer.forward_tokens
            fwd = scorer.forward(e.ids, stats_from=e.prompt_len)
            seg = segment_encoded(e, fwd.entropies, seg_opts)
            rredcot_run(TraceContext(scorer, e, fwd, seg), options)
            tokens[f"{value} {sorted(paths.items())} {n_refs}"] = (
                (scorer.forward_tokens - before) / len(e.ids))
        run.key = f"{value} {sorted(paths.items())} {n_refs}"
        return run

    def tok(run) -> str:
        return f"{tokens[run.key]:.2f}x tokens"

    def plain():
        scorer.model(input_ids=x)  # the model's own forward: logits at every position

    fwd = scorer.forward(enc.ids, stats_from=enc.prompt_len)
    ctx = TraceContext(scorer, enc, fwd, segment_encoded(enc, fwd.entropies, seg_opts))

    def naive():
        estimate(ctx, RredcotOptions(value="rhat", probe_mode="naive"))

    with torch.inference_mode():
        redistribute("rhat", ONE_REFERENCE)()  # warm-up
        t_plain = timed(plain, args.repeats)
        runs = {"rhat": redistribute("rhat", ONE_REFERENCE),
                "default": redistribute("both", KNOWN_PATHS),
                "remaining": redistribute("both", ONE_REFERENCE),
                "whole": redistribute("both", {**ONE_REFERENCE, "solution_part": "whole"}),
                **{n: redistribute("both", KNOWN_PATHS, n) for n in args.references}}
        t = {k: timed(run, args.repeats) for k, run in runs.items()}
        t_rhat, t_default, t_remaining, t_whole = (t["rhat"], t["default"], t["remaining"],
                                                   t["whole"])
        t_refs = {n: t[n] for n in args.references}
        t_naive = None if args.skip_naive else timed(naive, max(1, args.repeats // 2))
        checked = RredcotOptions(value="both", **ONE_REFERENCE)
        packed = estimate(ctx, checked)
        ref = packed if args.skip_naive else estimate(
            ctx, dataclasses.replace(checked, probe_mode="naive"))
    print(f"model: {scorer.name}  device: {scorer.device}  dtype: {scorer.dtype}  "
          f"threads: {torch.get_num_threads()}")
    print(f"trace: {enc.prompt_len} prompt + {enc.n_reasoning} reasoning tokens, "
          f"{len(ctx.segmentation)} segments")
    print(f"plain forward (model logits)    {t_plain:8.2f} s")
    print(f"redistribute --value rhat       {t_rhat:8.2f} s   "
          f"({t_rhat / t_plain:.2f}x plain forward, {tok(runs['rhat'])})")
    print(f"redistribute (default v̂)        {t_default:8.2f} s   "
          f"({t_default / t_plain:.2f}x plain forward, {tok(runs['default'])})   one reference, "
          "matched, empty part dropped")
    print(f"redistribute --value both       {t_remaining:8.2f} s   "
          f"({t_remaining / t_plain:.2f}x plain forward, {tok(runs['remaining'])})   "
          "--references solution --solution-part remaining --empty-part keep")
    print(f"redistribute --value both       {t_whole:8.2f} s   "
          f"({t_whole / t_plain:.2f}x plain forward, {tok(runs['whole'])})   "
          "--references solution --solution-part whole --empty-part keep")
    for n, tn in t_refs.items():
        print(f"  default over {n} reference(s)  {tn:8.2f} s   ({tn / t_plain:.2f}x plain forward, "
              f"{tok(runs[n])})   --references solutions --solution-part matched --empty-part drop")
    if t_naive is not None:
        print(f"naive per-boundary (rhat)       {t_naive:8.2f} s   "
              f"(redistribute is {t_naive / t_rhat:.1f}x faster)")
        diff = max(abs(a - b) for a, b in zip(packed.r_hat + packed.v_hat, ref.r_hat + ref.v_hat))
        print(f"max |packed - naive| log-prob (R̂ and v̂, remaining): {diff:.2e}")


if __name__ == "__main__":
    main()
