"""Cost of the Monte Carlo baseline vs RREDCoT on the same traces and segmentation.

    python benchmarks/bench_mc.py            # embedded model, examples/curated_traces.jsonl
    python benchmarks/bench_mc.py --model Qwen/Qwen3-0.6B --traces my.jsonl -k 8 -n 16 \\
        --max-new-tokens 1024 --device cuda

Segments each trace once (K segments), then runs `redistribute` (rredcot, default options) and
`mc-baseline` (N rollouts from each of the K+1 boundaries) through `pipeline.run_analysis` on
that one segmentation, and prints completions per second of the rollouts, seconds per trace of
each method and the cost ratio mc / rredcot (the paper's argument in one number).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SYNTHETIC = {
    "id": "synthetic",
    "prompt": "Apples cost 3 dollars and pears cost 4 dollars. What do 2 apples and 1 pear cost? "
    "Think step by step, then give the final answer as \\boxed{...}.",
    "response": "Let me find the cost of the apples first.\nTwo apples cost 2 * 3 = 6 dollars.\n"
    "Next, one pear costs 4 dollars.\nWait, let me check: 3 + 3 = 6, yes.\n"
    "So the total is 6 + 4 = 10 dollars.\nThe final answer is $\\boxed{10}$.",
    "answer": "10",
    "solution": "2 * 3 + 4 = 10. The final answer is $\\boxed{10}$.",
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model [default: the embedded SmolLM2-135M]")
    ap.add_argument("--traces", default=None,
                    help="JSONL traces [default: examples/curated_traces.jsonl, else a built-in "
                    "trace]")
    ap.add_argument("--max-traces", type=int, default=2)
    ap.add_argument("-k", "--segments", type=int, default=4)
    ap.add_argument("-n", "--rollouts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    from transformers.utils import logging as hf_logging

    from cotcredit.lm import ModelOptions, load_scorer
    from cotcredit.methods import RunCache
    from cotcredit.methods.mc import McOptions
    from cotcredit.pipeline.run import SEGMENTS, InputOptions, run_analysis
    from cotcredit.segmentation import SegmentOptions

    hf_logging.disable_progress_bar()
    tmp = Path(tempfile.mkdtemp(prefix="bench_mc-"))
    traces = args.traces
    if traces is None:
        ex = ROOT / "examples" / "traces.jsonl"
        if ex.exists():
            traces = str(ex)
        else:
            traces = str(tmp / "synthetic.jsonl")
            Path(traces).write_text(json.dumps(SYNTHETIC) + "\n")
    t = time.perf_counter()
    scorer = load_scorer(ModelOptions(model=args.model, device=args.device))
    load_s = time.perf_counter() - t
    inputs = InputOptions(max_traces=args.max_traces)
    seg_file = tmp / "segments.parquet"
    seg = run_analysis(traces, scorer, segment_options=SegmentOptions(segments=args.segments),
                       outputs={SEGMENTS: seg_file}, inputs=inputs)
    n_traces = len(seg.scored)
    ends: dict[str, int] = {}
    segments = seg.read_rows(SEGMENTS)  # read back from the table the run wrote
    for r in segments:
        ends[r["trace_id"]] = max(ends.get(r["trace_id"], 0), r["token_end"])
    bounds = len(segments) + n_traces

    t = time.perf_counter()
    rr = run_analysis(traces, scorer, methods={"rredcot": None}, segments_file=seg_file,
                      inputs=inputs)
    rr_s = time.perf_counter() - t

    opts = McOptions(rollouts=args.rollouts, temperature=args.temperature, top_p=args.top_p,
                     max_new_tokens=args.max_new_tokens, seed=args.seed,
                     batch_size=args.batch_size, backend=args.backend)
    run = RunCache()  # holds the run's generator, whose counts are read below
    t = time.perf_counter()
    res = run_analysis(traces, scorer, methods={"mc": opts}, segments_file=seg_file,
                       inputs=inputs, cache=run)
    mc_s = time.perf_counter() - t
    (gen,) = run.of_kind("generator")
    comps, toks, gen_s = gen.stats.completions, gen.stats.tokens, gen.stats.seconds
    rows = res.rows["mc"]
    first = {r["trace_id"]: r for r in rows}
    truncated = sum(r["trace_truncated"] for r in first.values())

    figures = {
        "model": scorer.name, "device": str(scorer.device), "traces": n_traces,
        "segments_per_trace": round(len(segments) / max(n_traces, 1), 2),
        "reasoning_tokens_per_trace": round(sum(ends.values()) / max(len(ends), 1), 1),
        "rollouts_per_boundary": args.rollouts, "boundaries": bounds,
        "max_new_tokens": args.max_new_tokens, "completions": comps,
        "truncated": truncated, "generated_tokens": toks,
        "batch_sizes": sorted(set(gen.stats.batch_sizes)),
        "completions_per_s": round(comps / gen_s, 3) if gen_s else None,
        "generated_tokens_per_s": round(toks / gen_s, 1) if gen_s else None,
        "rredcot_s_per_trace": round(rr_s / n_traces, 3),
        "mc_s_per_trace": round(mc_s / n_traces, 3),
        "cost_ratio_mc_over_rredcot": round(mc_s / rr_s, 1),
        "model_load_s": round(load_s, 1),
        "scored": [len(rr.scored), len(res.scored)],
    }
    width = max(len(k) for k in figures)
    for k, v in figures.items():
        print(f"{k:<{width}}  {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    sys.exit(main())
