"""Part mc: Monte Carlo rollouts as `mc-baseline` samples them vs plain batched `generate` on
the same rows; whether a rollout's samples stay the same across repeats and batch sizes."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.gpu_check.timing import Deadline, gib_of, measure, peak
from benchmarks.gpu_check.traces import trace_for
from cotcredit.data.trace import Trace
from cotcredit.lm import Scorer, resolve_dtype
from cotcredit.lm.generation import SamplingOptions
from cotcredit.lm.sampling import get_generator
from cotcredit.segmentation import SegmentOptions, segment_encoded

if TYPE_CHECKING:
    from benchmarks.gpu_check.run import RunContext


def bench_rollouts():
    """benchmarks/bench_rollouts.py (its plain `generate` and timed Monte Carlo calls)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench_rollouts.py"
    spec = importlib.util.spec_from_file_location("gpu_check_bench_rollouts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mc_calls(scorer: Scorer, trace: Trace, segments: int, rollouts: int, new_tokens: int) -> list:
    """The generator call `mc-baseline` makes for one trace: `rollouts` samples from every
    boundary, keyed as `methods.mc.sample_rollouts` keys them."""
    from cotcredit.methods.mc import McOptions

    enc = scorer.encode(trace)
    fwd = scorer.forward(enc.ids, keep_cache=False, stats_from=enc.prompt_len)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=segments))
    options = McOptions(rollouts=rollouts, max_new_tokens=new_tokens)
    prompts = [enc.prefix(b) for b in seg.boundaries]
    keys = [f"{trace.id}@{b}" for b in seg.boundaries]
    return [(prompts, options.sampling(rollouts), keys)]


def part_mc(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    """Monte Carlo rollouts as `mc-baseline` samples them (prefill, per-row random streams,
    stopping, slot batching) vs transformers `generate` decoding the same rows in batches of the
    same size from a prefilled KV cache (benchmarks/bench_rollouts.py, on a random model of a
    real shape: rows run to the token limit on both sides). Two repeats, alternating; then the
    same rows in batches of half the size, to see whether a row's samples depend on its batch."""
    rollouts = bench_rollouts()
    plan = ctx.plan
    dtype = resolve_dtype("auto", ctx.device)
    result["notes"].append(
        f"dtype {str(dtype).replace('torch.', '')}; {plan.mc_rollouts} rollouts from each of "
        f"{plan.mc_segments + 1} boundaries of a {plan.mc_tokens}-token trace, "
        f"{plan.mc_new_tokens} new tokens; plain = transformers generate on the same rows, "
        "prefill untimed")
    for name in plan.mc_models:
        deadline.check()
        scorer = ctx.scorer(name, dtype)
        weights = gib_of(scorer.model)
        generator = get_generator(scorer, "hf")
        trace = trace_for(scorer, plan.mc_tokens)
        calls = mc_calls(scorer, trace, plan.mc_segments, plan.mc_rollouts, plan.mc_new_tokens)
        prompts = calls[0][0]
        rows = len(prompts) * plan.mc_rollouts
        batch = min(rows, generator.auto_batch_size(max(len(p) for p in prompts)
                                                    + plan.mc_new_tokens))
        generator.generate([prompts[-1]], SamplingOptions(n=1, max_new_tokens=4, batch_size=1))
        mc_tps, plain_tps, first, identical = [], [], None, True
        m: dict = {}
        for _ in range(2):
            deadline.check()
            with measure(ctx.device, m):
                mc_s, mc_tok, samples = rollouts.mc_generate(generator, calls)
            pl_s, pl_tok = rollouts.plain_generate(scorer, prompts, plan.mc_rollouts, batch,
                                                   plan.mc_new_tokens, 1.0, 1.0)
            first = samples if first is None else first
            identical &= samples == first
            mc_tps.append(mc_tok / mc_s)
            plain_tps.append(pl_tok / pl_s)
        deadline.check()
        half = [(p, dataclasses.replace(o, batch_size=max(1, batch // 2)), k)
                for p, o, k in calls]
        _, _, halved = rollouts.mc_generate(generator, half)
        same = [a == b for x, y in zip(first[0], halved[0], strict=True)
                for a, b in zip(x, y, strict=True)]
        result["rows"].append({
            "model": name, "rows": rows, "batch": batch, "prompt_tokens": len(prompts[-1]),
            "max_new_tokens": plan.mc_new_tokens,
            "mc_tokens_per_row": sum(len(t) for cs in first[0] for t in cs) / rows,
            "mc_tokens_per_s": statistics.median(mc_tps),
            "plain_tokens_per_s": statistics.median(plain_tps),
            "plain_over_mc": statistics.median(p / q for p, q in zip(plain_tps, mc_tps,
                                                                    strict=True)),
            "mc_rollouts_per_s": statistics.median(rows * t / mc_tok for t in mc_tps),
            "mc_identical_across_repeats": identical,
            "same_at_half_batch": sum(same) / len(same),
            "mc_peak_gib": peak(weights, m),
        })
        ctx.checkpoint()
    ctx.release()
