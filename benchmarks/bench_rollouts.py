"""Monte Carlo rollouts against the machine's decoding speed, side by side in one run.

    python benchmarks/bench_rollouts.py                      # embedded SmolLM2-135M, CPU, 1 trace
    python benchmarks/bench_rollouts.py --max-traces 2 --repeats 3 --profile
    python benchmarks/bench_rollouts.py --model Qwen/Qwen3-0.6B --traces my.jsonl -n 16 \\
        --max-new-tokens 512 --device cuda

Protocol. The traces (default: the demo's lookup traces) are segmented once (default
segmentation, as `make demo` does). `mc-baseline`'s generator calls are recorded by running the
method with a stand-in generator (prompts, keys and sampling options exactly as the method builds
them: N rollouts from every boundary of a trace, one call per trace). Then, alternating, and
`--repeats` times each:

* mc: the recorded calls through the real generator (`get_generator(scorer, "hf")`), i.e.
  prefill, sampling with the per-row random streams, stopping, batching: everything
  `mc-baseline` does except grading. Tokens/s = tokens it generated / seconds.
* plain: transformers `generate` on the same rows (each prompt repeated N times, longest first)
  in batches of the same size, from a prefilled KV cache (the prefill is not timed), every row
  decoding exactly `--max-new-tokens` tokens (no stop): the speed at which this machine decodes
  that batch with a KV cache, the practical limit. Tokens/s = rows x tokens / seconds.

* baseline (with `--baseline FILE`): the same calls through the `HFGenerator` of another
  version's sampling module, e.g. ``git show v0.2.0:src/cotcredit/sampling.py > old.py``; its
  completions must equal mc's (same seeds and keys, same samples).

The figures are ratios per repeat (each repeat runs every side in turn, so a machine shared with
other work slows them alike), and their medians: plain / mc of tokens per second, and mc /
baseline of rollouts per second. The mc completions must be identical across repeats.
`--profile` adds a cProfile breakdown of one mc pass: model forward (linear layers, attention),
prefill, sampler, cache rebuilds, decoding text, other Python.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
DEMO_TRACES = ("examples/lookup/traces.jsonl",)


def _imports():
    """The library's names, from the package layout this checkout has."""
    from cotcredit.lm import ModelOptions, load_scorer
    from cotcredit.methods.mc import McOptions
    from cotcredit.pipeline import SEGMENTS, InputOptions, run_analysis
    from cotcredit.segmentation import SegmentOptions

    try:
        from cotcredit.lm import Completion, get_generator
    except (ImportError, AttributeError):  # the flat layout of cotcredit 0.2
        from cotcredit.sampling import Completion, get_generator
    return (ModelOptions, load_scorer, McOptions, SEGMENTS, InputOptions, run_analysis,
            SegmentOptions, Completion, get_generator)


class Recorder:
    """A stand-in generator: records each call and answers empty completions."""

    backend = "hf"

    def __init__(self, completion_type, stats):
        self.calls: list[tuple[list[list[int]], object, list[str]]] = []
        self.completion_type = completion_type
        self.stats = stats

    def generate(self, prompts, options, keys=None, progress=None):
        self.calls.append(([list(p) for p in prompts], options, list(keys)))
        return [[self.completion_type([], "", "stop") for _ in range(options.n)] for _ in prompts]


def plain_generate(scorer, prompts, n: int, batch: int, new_tokens: int, temperature: float,
                   top_p: float) -> tuple[float, int]:
    """Seconds and tokens of transformers `generate` decoding `new_tokens` tokens in every row
    (each prompt n times), in batches of `batch` rows, from a prefilled (untimed) KV cache."""
    import torch
    from transformers import DynamicCache, GenerationConfig

    try:
        from cotcredit.lm.head import cache_arg as cache_kw
    except ImportError:  # an older cotcredit: the keyword of the transformers it ran on
        def cache_kw(module, cache):
            return {"past_key_values": cache}

    model, tok = scorer.model, scorer.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rows = [p for p in sorted(prompts, key=len, reverse=True) for _ in range(n)]
    config = GenerationConfig(do_sample=temperature > 0, temperature=temperature or None,
                              top_p=top_p, top_k=0, max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, pad_token_id=pad, eos_token_id=pad,
                              use_cache=True, return_dict_in_generate=True)
    decoder = model.get_decoder()
    seconds, tokens = 0.0, 0
    saved = model.generation_config
    model.generation_config = GenerationConfig(pad_token_id=pad, eos_token_id=pad)
    try:
        for start in range(0, len(rows), batch):
            part = rows[start : start + batch]
            width = max(len(p) for p in part)
            ids = torch.full((len(part), width), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for r, p in enumerate(part):
                ids[r, width - len(p):] = torch.tensor(p)
                mask[r, width - len(p):] = 1
            ids, mask = ids.to(scorer.device), mask.to(scorer.device)
            with torch.no_grad():
                cache = DynamicCache(config=model.config)
                pos = (mask[:, :-1].cumsum(-1) - 1).clamp(min=0)
                decoder(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=pos,
                        **cache_kw(decoder, cache), use_cache=True)
                t0 = time.perf_counter()
                out = model.generate(input_ids=ids, attention_mask=mask,
                                     **cache_kw(model, cache), generation_config=config)
                seconds += time.perf_counter() - t0
            tokens += (out.sequences.shape[1] - width) * len(part)
    finally:
        model.generation_config = saved
    return seconds, tokens


def baseline_generator(path: str, scorer):
    """The `HFGenerator` of the sampling module in the file `path` (another version's), on the
    scorer's model."""
    spec = importlib.util.spec_from_file_location("bench_rollouts_baseline", path)
    if spec is None or spec.loader is None:
        sys.exit(f"--baseline {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.HFGenerator(scorer.model, scorer.tokenizer)


def mc_generate(gen, calls) -> tuple[float, int, list]:
    """Seconds and tokens of the recorded calls through the real generator, and the samples."""
    t0 = time.perf_counter()
    tokens, samples = 0, []
    for prompts, options, keys in calls:
        out = gen.generate(prompts, options, keys=keys)
        ids = [[c.token_ids for c in cs] for cs in out]
        tokens += sum(len(t) for cs in ids for t in cs)
        samples.append(ids)
    return time.perf_counter() - t0, tokens, samples


def profile_breakdown(stats: pstats.Stats, total: float) -> dict[str, float]:
    """Seconds of one profiled mc pass by where they went (cumulative times of known calls)."""
    raw = stats.stats  # {(file, line, name): (cc, nc, tottime, cumtime, callers)}

    def tot(pred) -> float:
        return sum(v[2] for k, v in raw.items() if pred(k))

    def cum(pred) -> float:
        return max((v[3] for k, v in raw.items() if pred(k)), default=0.0)

    parts = {
        "linear layers (incl. output head)":
            tot(lambda k: k[2] == "<built-in method torch._C._nn.linear>"),
        "attention (sdpa)": tot(lambda k: "scaled_dot_product_attention" in k[2]),
        "prefill (shared, untimed in plain)":
            cum(lambda k: k[0].endswith("sampling.py") and k[2] == "_prompt_kv"),
        "rows joining slots (prompt KV copy)":
            cum(lambda k: k[0].endswith("slots.py") and k[2] == "join"),
        "cache rebuilds (compact)": cum(lambda k: k[0].endswith("slots.py") and k[2] == "compact"),
        "sampler (per-row inverse CDF)": cum(lambda k: k[2] == "inverse_cdf_tokens"),
        "decode text of completions": cum(lambda k: k[2] == "decode_continuation"),
    }
    parts["total"] = total
    return {k: round(v, 2) for k, v in parts.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model [default: the embedded SmolLM2-135M]")
    ap.add_argument("--traces", default=None, help="JSONL traces [default: the demo's]")
    ap.add_argument("--segments-file", default=None, help="reuse a segmentation of the traces")
    ap.add_argument("--max-traces", type=int, default=1)
    ap.add_argument("-n", "--rollouts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=None, help="mc's --batch-size")
    ap.add_argument("--plain-batch", type=int, default=None,
                    help="rows per plain generate call [default: the batch size mc used]")
    ap.add_argument("--baseline", default=None,
                    help="a sampling module file of another version: its HFGenerator runs too")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch threads [default: torch's]")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--profile", action="store_true", help="cProfile one more mc pass")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument("--dump", default=None, help="write the mc samples (token ids) to this JSON")
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging as hf_logging

    (ModelOptions, load_scorer, McOptions, SEGMENTS, InputOptions, run_analysis,
     SegmentOptions, Completion, get_generator) = _imports()
    hf_logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    traces = args.traces or next((str(ROOT / p) for p in DEMO_TRACES if (ROOT / p).exists()), None)
    if traces is None:
        sys.exit("no traces: pass --traces")
    tmp = Path(tempfile.mkdtemp(prefix="bench_rollouts-"))
    scorer = load_scorer(ModelOptions(model=args.model, device=args.device))
    inputs = InputOptions(max_traces=args.max_traces)
    seg_file = args.segments_file
    if seg_file is None:
        seg_file = tmp / "segments.parquet"
        run_analysis(traces, scorer, segment_options=SegmentOptions(), outputs={SEGMENTS: seg_file},
                     inputs=inputs)

    options = McOptions(rollouts=args.rollouts, temperature=args.temperature, top_p=args.top_p,
                        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    real = get_generator(scorer, "hf")
    recorder = Recorder(Completion, type(real.stats)())
    sampling = sys.modules[get_generator.__module__]
    made = sampling.HFGenerator
    sampling.HFGenerator = lambda model, tokenizer: recorder  # the run's generator records
    try:
        run_analysis(traces, scorer, methods={"mc": options}, segments_file=seg_file,
                     inputs=inputs)
    finally:
        sampling.HFGenerator = made
    calls = recorder.calls
    rows = sum(len(p) * o.n for p, o, _ in calls)
    prompt_tokens = [len(p) for ps, _, _ in calls for p in ps]

    # The batch size mc uses: its option, else the automatic size of its first (longest) batch.
    mc_batch = args.batch_size or real.auto_batch_size(max(prompt_tokens) + args.max_new_tokens)
    plain_batch = args.plain_batch or mc_batch
    old = baseline_generator(args.baseline, scorer) if args.baseline else None
    ratios, mc_tps, plain_tps, first = [], [], [], None
    mc_rps, old_rps, speedups = [], [], []
    identical = same_as_baseline = True
    for _ in range(args.repeats):
        mc_s, mc_tok, samples = mc_generate(real, calls)
        pl_s, pl_tok = plain_generate(scorer, [p for ps, _, _ in calls for p in ps],
                                      args.rollouts, plain_batch, args.max_new_tokens,
                                      args.temperature, args.top_p)
        first = first if first is not None else samples
        identical &= samples == first
        mc_tps.append(mc_tok / mc_s)
        mc_rps.append(rows / mc_s)
        plain_tps.append(pl_tok / pl_s)
        ratios.append(plain_tps[-1] / mc_tps[-1])
        line = (f"  mc {mc_tok} tokens in {mc_s:.1f} s ({mc_tps[-1]:.1f}/s, {mc_rps[-1]:.2f} "
                f"rollouts/s); plain {pl_tok} in {pl_s:.1f} s ({plain_tps[-1]:.1f}/s); "
                f"plain/mc {ratios[-1]:.2f}")
        if old is not None:
            old_s, _, old_samples = mc_generate(old, calls)
            same_as_baseline &= old_samples == samples
            old_rps.append(rows / old_s)
            speedups.append(mc_rps[-1] / old_rps[-1])
            line += (f"; baseline {old_s:.1f} s ({old_rps[-1]:.2f} rollouts/s); "
                     f"mc/baseline {speedups[-1]:.2f}; same samples "
                     f"{'yes' if old_samples == samples else 'NO'}")
        print(line, flush=True)

    figures = {
        "model": scorer.name, "device": str(scorer.device), "threads": torch.get_num_threads(),
        "traces": len(calls), "rows": rows, "rollouts_per_boundary": args.rollouts,
        "prompt_tokens": f"{min(prompt_tokens)}-{max(prompt_tokens)}",
        "max_new_tokens": args.max_new_tokens, "mc_batch": mc_batch, "plain_batch": plain_batch,
        "mc_tokens_per_row": round(sum(len(t) for s in first for cs in s for t in cs) / rows, 1),
        "mc_tokens_per_s": round(statistics.median(mc_tps), 1),
        "plain_tokens_per_s": round(statistics.median(plain_tps), 1),
        "plain_over_mc": round(statistics.median(ratios), 2),
        "ratios": [round(r, 2) for r in ratios],
        "mc_identical_across_repeats": identical,
        "mc_rollouts_per_s": round(statistics.median(mc_rps), 2),
    }
    if old is not None:
        figures.update({
            "baseline": args.baseline,
            "baseline_rollouts_per_s": round(statistics.median(old_rps), 2),
            "mc_over_baseline": round(statistics.median(speedups), 2),
            "speedups": [round(r, 2) for r in speedups],
            "mc_identical_to_baseline": same_as_baseline,
        })
    if args.profile:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        mc_generate(real, calls)
        prof.disable()
        figures["profile_seconds"] = profile_breakdown(pstats.Stats(prof), time.perf_counter() - t0)
    width = max(len(k) for k in figures)
    for k, v in figures.items():
        print(f"{k:<{width}}  {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    if args.dump:
        Path(args.dump).write_text(json.dumps(first))


if __name__ == "__main__":
    main()
