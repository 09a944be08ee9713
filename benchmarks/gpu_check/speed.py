"""Part speed: `redistribute` (R̂, R̂ + v̂, four references) vs one plain forward of the model,
packed vs naive probes, at several trace lengths and segment counts."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import torch

from benchmarks.gpu_check.timing import Deadline, gib_of, measure, peak, sync, timed
from benchmarks.gpu_check.traces import OTHER_SOLUTIONS, rhat_options, trace_for
from cotcredit.data.trace import Trace
from cotcredit.lm import Continuation, Scorer, resolve_dtype
from cotcredit.lm.encoding import ForcingOptions, answer_forcing
from cotcredit.methods import TraceContext, rredcot
from cotcredit.segmentation import SegmentOptions, segment_encoded

if TYPE_CHECKING:
    from benchmarks.gpu_check.run import RunContext


def redistribute_once(scorer: Scorer, trace: Trace, K: int, value: str) -> dict:
    """What `cotcredit redistribute` does for one trace after loading, timed by step. `value`:
    rhat, both (R̂ + v̂), or multi (R̂ + v̂ over the trace's solution and OTHER_SOLUTIONS, listed
    in its `solutions` field as a user's file lists them)."""
    dev = scorer.device
    if value == "multi":
        trace = dataclasses.replace(trace, extra={**trace.extra, "solutions": OTHER_SOLUTIONS})
        value = "both"
    t0 = time.perf_counter()
    enc = scorer.encode(trace, reserve=rredcot.reserve(scorer, trace, rhat_options(value)))
    fwd = scorer.forward(enc.ids, keep_cache=True, stats_from=enc.prompt_len)
    sync(dev)
    t1 = time.perf_counter()
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=K))
    t2 = time.perf_counter()
    before = scorer.forward_tokens
    rredcot.run(TraceContext(scorer, enc, fwd, seg), rhat_options(value))
    sync(dev)
    t3 = time.perf_counter()
    return {"forward_s": t1 - t0, "segment_s": t2 - t1, "probes_s": t3 - t2,
            "probe_tokens": scorer.forward_tokens - before, "segments": len(seg),
            "ctx": (enc, fwd, seg)}


def naive_rhat(scorer: Scorer, trace: Trace, enc, seg, sample: int | None) -> dict:
    """R̂ probes with one plain forward each, on `sample` evenly spread boundaries (None: all);
    seconds scaled to all K + 1 boundaries."""
    forcing = answer_forcing(scorer, ForcingOptions())
    probe = forcing.answer_probe(trace.answer)
    a0, _ = probe.span("answer")
    bounds = seg.boundaries
    if sample is not None and sample < len(bounds):
        picks = sorted({round(i * (len(bounds) - 1) / (sample - 1)) for i in range(sample)})
        bounds = [bounds[i] for i in picks]
    conts = [Continuation(enc.prompt_len + b, probe.ids, a0, forcing.terminators or None)
             for b in bounds]
    before = scorer.forward_tokens
    m: dict = {}
    with measure(scorer.device, m):
        scorer.score_continuations_naive(enc.ids, conts)
    scale = len(seg.boundaries) / len(conts)
    return {"seconds": m["seconds"] * scale, "timed_probes": len(conts),
            "probes": len(seg.boundaries), "tokens": (scorer.forward_tokens - before) * scale,
            "extra_gib": m["extra_gib"]}


def part_speed(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    """Trace lengths outer, models inner: a run cut short loses the longest traces, not whole
    models. Models stay loaded between lengths (and for the generation part)."""
    plan = ctx.plan
    dtype = resolve_dtype("auto", ctx.device)
    result["notes"].append(
        f"dtype {str(dtype).replace('torch.', '')}; plain forward = model(input_ids) with logits "
        "at every position; redistribute = encode + forward with KV cache and entropies + "
        "segmentation + all probes + rows; multi = R̂ + v̂ over 4 references (the trace's "
        "solution and 3 listed in its 'solutions' field); naive = the same with one plain "
        "forward per R̂ probe "
        "(timed on evenly spread probes beyond the shortest traces, scaled to all); peak = "
        "weights + the most memory allocated above them during the measurement"
    )
    for n_tokens, segment_counts in plan.speed_runs:
        for name in plan.speed_models:
            shape = ctx.shapes[name]
            if n_tokens > shape.context:
                result["notes"].append(f"{name}: {n_tokens} tokens skipped (context "
                                       f"{shape.context})")
                continue
            deadline.check()
            scorer = ctx.scorer(name, dtype)
            for row in speed_rows(ctx, scorer, n_tokens, segment_counts, deadline):
                result["rows"].append(row)
                ctx.checkpoint()
            result["notes"] += [n for n in scorer.notes if n not in result["notes"]]


def speed_rows(ctx: RunContext, scorer: Scorer, n_tokens: int, segment_counts, deadline):
    """Rows of one model at one trace length: plain forward, redistribute (R̂, R̂ + v̂), naive."""
    plan, model, dev = ctx.plan, scorer.model, ctx.device
    weights = gib_of(model)
    trace = trace_for(scorer, n_tokens)
    x = torch.tensor([scorer.encode(trace).ids], device=dev)

    def plain():
        with torch.no_grad():
            model(input_ids=x)

    if not scorer.__dict__.get("_gpu_check_warm"):  # kernels, allocator, terminator ids
        warm = trace_for(scorer, plan.speed_runs[0][0])
        redistribute_once(scorer, warm, segment_counts[0], "multi")
        model(input_ids=torch.tensor([scorer.encode(warm).ids], device=dev))
        scorer.__dict__["_gpu_check_warm"] = True
    t_plain = timed(plain, dev, deadline)
    for K in segment_counts:
        deadline.check()
        row = {"model": scorer.name, "tokens": int(x.shape[1]), "segments_asked": K,
               "weights_gib": weights, "plain_s": t_plain["seconds"],
               "plain_peak_gib": peak(weights, t_plain)}
        for value in ("rhat", "both", "multi"):
            steps: dict = {}

            def once(value=value, steps=steps, K=K):
                steps.update(redistribute_once(scorer, trace, K, value))

            t = timed(once, dev, deadline)
            enc, _, seg = steps.pop("ctx")
            row.update({f"{value}_s": t["seconds"], f"{value}_peak_gib": peak(weights, t),
                        f"{value}_x_plain": t["seconds"] / t_plain["seconds"]})
            row.update({f"{value}_{k}": v for k, v in steps.items() if k != "segments"})
            row["segments"] = steps["segments"]
        deadline.check()
        sample = None if n_tokens <= plan.naive_all_below else plan.naive_sample
        naive = naive_rhat(scorer, trace, enc, seg, sample)
        naive_total = row["rhat_forward_s"] + row["rhat_segment_s"] + naive["seconds"]
        row.update({
            "naive_rhat_s": naive_total,
            "naive_probes_s": naive["seconds"],
            "naive_timed_probes": naive["timed_probes"],
            "naive_probe_tokens": naive["tokens"],
            "naive_peak_gib": peak(weights, naive),
            "naive_x_packed": naive_total / row["rhat_s"],
            "naive_probes_x_packed": naive["seconds"] / row["rhat_probes_s"],
        })
        yield row
