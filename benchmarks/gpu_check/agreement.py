"""Part agreement: packed probes on the trace's KV cache vs one plain forward per probe (R̂, v̂,
v̂ over four references, leave-one-out coalition values), float32 and bfloat16."""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING

import torch

from benchmarks.gpu_check.shapes import build_model
from benchmarks.gpu_check.timing import Deadline, free_memory
from benchmarks.gpu_check.traces import ANSWER, REFERENCES, SOLUTION, rhat_options, trace_for
from cotcredit.lm import Scorer
from cotcredit.lm.encoding import ForcingOptions, answer_forcing
from cotcredit.methods import TraceContext, rredcot
from cotcredit.methods.attribution import ValueFunction
from cotcredit.segmentation import SegmentOptions, segment_encoded

if TYPE_CHECKING:
    from benchmarks.gpu_check.run import RunContext

# Agreement tolerances, in nats, on a summed log-probability (R̂, v̂ or a coalition value).
# float32: packed and naive run the same arithmetic in another order (and the scorer's float32
# head vs the model's): differences are rounding, measured ~1e-5 on CPU; 1e-3 leaves room for
# the GPU's other kernels and 30-layer depth and is still far below any real difference.
TOL_FP32 = 1e-3
# bfloat16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%) in every hidden state. The
# packed pass (4-D mask, sdpa, KV cache) and the naive one (causal kernel over the whole
# sequence) round at different places, the naive reference also computes its logits in
# bfloat16 (an error up to |logit| * 2^-9 per token) while the scorer uses a float32 head, and
# these differences grow through the layers and add up over the scored tokens. So packed and
# naive cannot agree to float32 precision; the meaningful bar is that packed bfloat16 is as
# faithful as the naive bfloat16 reference: its distance from the float32 reference of the
# same weights is at most BF16_FACTOR times the naive bfloat16 one, plus BF16_FLOOR_PER_TOKEN
# per scored token (measured spreads in the notes and the README).
BF16_FACTOR = 2.0
BF16_FLOOR_PER_TOKEN = 0.002


@torch.no_grad()
def naive_sequence_value(model, seq: list[int], n_target: int, terminators) -> float:
    """log p(last n_target tokens of seq | the rest) [+ log terminator mass after them] from one
    plain forward of the model (its own logits): the reference for a coalition value."""
    device = next(model.parameters()).device
    logits = model(input_ids=torch.tensor([seq], device=device), logits_to_keep=n_target + 1)
    lp = torch.log_softmax(logits.logits[0].float(), dim=-1)  # row j predicts seq[-n_target + j]
    target = torch.tensor(seq[len(seq) - n_target :], device=device)
    total = float(lp[:n_target].gather(1, target[:, None]).double().sum())
    if terminators:
        total += float(torch.logsumexp(lp[n_target, list(terminators)], dim=0))
    return total


def probe_values(scorer: Scorer, enc, seg) -> dict:
    """R̂_k, v̂_k (k = 0..K) and LOO coalition values (all present, then each segment left out),
    packed and naive, for one scorer; plus the number of scored tokens of each kind."""
    fwd = scorer.forward(enc.ids, keep_cache=True, stats_from=enc.prompt_len)
    ctx = TraceContext(scorer, enc, fwd, seg)
    packed = rredcot.estimate(ctx, rhat_options("both", "packed"))
    naive = rredcot.estimate(ctx, rhat_options("both", "naive"))
    # v̂ over the four references (the default mixture: the probability of any of the paths).
    packed_m = rredcot.estimate(ctx, rhat_options("both", "packed"), references=REFERENCES)
    naive_m = rredcot.estimate(ctx, rhat_options("both", "naive"), references=REFERENCES)
    vf = ValueFunction(ctx)
    K = vf.K
    masks = [[True] * K] + [[j != k for j in range(K)] for k in range(K)]
    loo_packed = [float(v) for v in vf(masks)]
    loo_naive = []
    for m in masks:
        seq, n_target = vf.sequence(m)
        loo_naive.append(naive_sequence_value(scorer.model, seq, n_target, vf.terminators))
    forcing = answer_forcing(scorer, ForcingOptions())
    r_probe = forcing.answer_probe(ANSWER)
    v_probe = forcing.solution_probe("\n", SOLUTION, ANSWER)
    term = 1 if forcing.terminators else 0
    a0, a1 = r_probe.span("answer")
    u0, u1 = v_probe.span("solution")
    y0, y1 = v_probe.span("answer")

    def v_tokens(solution: str) -> int:
        probe = forcing.solution_probe("\n", solution, ANSWER)
        (s0, s1), (e0, e1) = probe.span("solution"), probe.span("answer")
        return (s1 - s0) + (e1 - e0) + term

    return {
        "packed": {"rhat": packed.r_hat, "vhat": packed.v_hat, "loo": loo_packed,
                   "vhat_multi": packed_m.v_hat},
        "naive": {"rhat": naive.r_hat, "vhat": naive.v_hat, "loo": loo_naive,
                  "vhat_multi": naive_m.v_hat},
        "scored_tokens": {"rhat": a1 - a0 + term, "vhat": (u1 - u0) + (y1 - y0) + term,
                          "loo": a1 - a0 + term,
                          # a mixture's error is at most its worst path's
                          "vhat_multi": max(v_tokens(r) for r in REFERENCES)},
    }


def max_diff(a: list[float], b: list[float]) -> float:
    """The largest |a_i - b_i|; equal infinities (a state with no path left) differ by 0."""
    return max(0.0 if x == y else abs(x - y) for x, y in zip(a, b, strict=True))


QUANTITIES = ("rhat", "vhat", "vhat_multi", "loo")


def agreement_rows(name: str, vals32: dict, vals16: dict | None, tokens: int, K: int) -> list:
    rows = []
    n_tok = vals32["scored_tokens"]
    for kind in QUANTITIES:
        ref = vals32["naive"][kind]
        d32 = max_diff(vals32["packed"][kind], ref)
        row = {
            "model": name, "quantity": kind, "tokens": tokens, "segments": K,
            "values": len(ref), "scored_tokens": n_tok[kind],
            # how much the values differ between probes (finite ones)
            "spread": max(finite) - min(finite) if (finite := [v for v in ref
                                                             if math.isfinite(v)]) else 0.0,
            "fp32_packed_vs_naive": d32, "fp32_tolerance": TOL_FP32, "fp32_ok": d32 <= TOL_FP32,
            # every boundary's value, to see where a disagreement sits
            "fp32_values": {"packed": list(vals32["packed"][kind]), "naive": list(ref)},
        }
        if vals16 is not None:
            p16, n16 = vals16["packed"][kind], vals16["naive"][kind]
            naive_err = max_diff(n16, ref)
            packed_err = max_diff(p16, ref)
            tol = BF16_FACTOR * naive_err + BF16_FLOOR_PER_TOKEN * n_tok[kind]
            row.update({
                "bf16_packed_vs_naive": max_diff(p16, n16),
                "bf16_naive_vs_fp32": naive_err,
                "bf16_packed_vs_fp32": packed_err,
                "bf16_tolerance": tol,
                "bf16_ok": packed_err <= tol,
                "bf16_values": {"packed": list(p16), "naive": list(n16)},
            })
        rows.append(row)
    return rows


def part_agreement(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    ctx.release()
    plan = ctx.plan
    result["tolerance"] = {
        "fp32_nats": TOL_FP32,
        "bf16": f"|packed bf16 - naive fp32| <= {BF16_FACTOR} x |naive bf16 - naive fp32| + "
                f"{BF16_FLOOR_PER_TOKEN} nats x scored tokens",
    }
    for name in plan.agreement_models:
        deadline.check()
        shape = ctx.shapes[name]
        tokens = plan.agreement_tokens
        if shape.window:  # probes late in the trace must not see its start in sliding layers
            tokens = max(2 * tokens, 2 * shape.window + 64)
        tok = ctx.tokenizer(shape.vocab)
        model32 = build_model(shape, ctx.device, torch.float32)
        s32 = Scorer(model32, tok, name=name)
        trace = trace_for(s32, tokens)
        reserve = max(rredcot.reserve(s32, trace, rhat_options("both")),
                      rredcot.reserve(s32, trace, rhat_options("both"), references=REFERENCES))
        enc = s32.encode(trace, reserve=reserve)
        fwd = s32.forward(enc.ids, keep_cache=False, stats_from=enc.prompt_len)
        # One segmentation for both dtypes: the probes sit at the same boundaries.
        seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=plan.agreement_segments))
        vals32 = probe_values(s32, enc, seg)
        deadline.check()
        model16 = copy.deepcopy(model32).to(torch.bfloat16)  # the same weights, rounded
        for key in [k for k in model16.__dict__ if k.startswith("_cotcredit")]:
            del model16.__dict__[key]  # the scorer's per-model checks and caches: redo them
        vals16 = probe_values(Scorer(model16, tok, name=name), enc, seg)
        del model16
        for row in agreement_rows(name, vals32, vals16, enc.prompt_len + enc.n_reasoning,
                                  len(seg)):
            result["rows"].append(row)
        result["notes"] += [n for n in s32.notes if n not in result["notes"]]
        del model32, s32
        free_memory()
    failed = [f"{r['model']} {r['quantity']}" for r in result["rows"]
              if not r["fp32_ok"] or r.get("bf16_ok") is False]
    result["ok"] = not failed
    if failed:
        result["failed"] = failed
