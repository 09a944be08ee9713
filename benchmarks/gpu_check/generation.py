"""Part generation: batched sampling throughput for rollouts (completions/s, tokens/s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.gpu_check.timing import Deadline, gib_of, measure, peak
from benchmarks.gpu_check.traces import trace_for
from cotcredit.lm import resolve_dtype
from cotcredit.lm.generation import SamplingOptions
from cotcredit.lm.sampling import get_generator

if TYPE_CHECKING:
    from benchmarks.gpu_check.run import RunContext


def part_generation(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    plan = ctx.plan
    dtype = resolve_dtype("auto", ctx.device)
    for name in plan.generation_models:
        deadline.check()
        scorer = ctx.scorer(name, dtype)
        weights = gib_of(scorer.model)
        generator = get_generator(scorer, "hf")
        trace = trace_for(scorer, plan.speed_runs[0][0])
        enc = scorer.encode(trace)
        # Rollout prompts as Monte Carlo makes them, n samples each: the prompt + the reasoning
        # up to a boundary; distinct prompts of about half the trace, so every batch size sees
        # the same prompt length.
        mid = enc.n_reasoning // 2
        n = plan.generation_samples
        generator.generate([enc.prefix(mid)], SamplingOptions(n=1, max_new_tokens=4,
                                                              batch_size=1))
        for batch in plan.generation_batches:
            deadline.check()
            prompts = [enc.prefix(mid - i) for i in range(max(1, batch // n))]
            options = SamplingOptions(n=n, max_new_tokens=plan.generation_new_tokens,
                                      temperature=1.0, seed=0, batch_size=batch)
            m: dict = {}
            with measure(ctx.device, m):
                out = generator.generate(prompts, options)
            completions = [c for cs in out for c in cs]
            new_tokens = sum(len(c.token_ids) for c in completions)
            result["rows"].append({
                "model": name, "batch": batch, "prompts": len(prompts), "samples": n,
                "prompt_tokens": int(sum(len(p) for p in prompts) / len(prompts)),
                "max_new_tokens": plan.generation_new_tokens,
                "completions": len(completions), "new_tokens": new_tokens,
                "truncated": sum(c.truncated for c in completions),
                "seconds": m["seconds"], "peak_gib": peak(weights, m),
                "completions_per_s": len(completions) / m["seconds"],
                "tokens_per_s": new_tokens / m["seconds"],
            })
            ctx.checkpoint()
        del scorer, generator
    ctx.release()
