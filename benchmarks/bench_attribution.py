"""cotcredit's LOO and Shapley against captum's stock LLMAttribution, same target and segments.

    python benchmarks/bench_attribution.py [--model M] [--traces F | --synthetic] [--samples N]

One trace (the first of examples/traces.jsonl when present, else a built-in ~400-token trace),
segmented once by cotcredit. Both sides compute the same scalar,

    f(S) = log p(Y* | prompt ⊕ reasoning restricted to S ⊕ E)   (no terminator mass here),

and the same attributions:
- LOO: cotcredit `loo` vs `LLMAttribution(FeatureAblation)`, both f(all) − f(all but k);
- Shapley, sampled: cotcredit `shapley --shapley-backend captum` vs
  `LLMAttribution(ShapleyValueSampling)`, with the same N orderings of the segments.

The stock side is captum's `LLMAttribution` over a `TextTemplateInput` whose features are the
segment texts (baseline "": deletion), by default with `forward_in_tokens=False` (its faster
mode: one forward over input ⊕ target per perturbation; `--stock-mode tokens` is captum's own
default, which decodes the target token by token on a KV cache). Its tokenizer is wrapped only
so that the perturbed strings become exactly cotcredit's token ids (prompt and response tokenized
separately, segments cut at token boundaries): the template joins the pieces with a separator
character that the wrapper splits on; decoding and everything else go to the real tokenizer.
The cotcredit time includes the trace's forward pass (in a run that pass is shared with
segmentation; the time without it is printed too). Timings are wall-clock, the best of
`--repeats` interleaved runs (other work on the machine distorts them: the load is printed;
`--threads 1` is steadier on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from cotcredit.data.trace import Trace
from cotcredit.data.traces import read_traces
from cotcredit.lm import ModelOptions, load_scorer  # noqa: E402
from cotcredit.lm.encoding import ForcingOptions, answer_forcing
from cotcredit.methods import (  # noqa: E402
    TraceContext,  # noqa: E402
    loo,
    shapley,
)
from cotcredit.methods.attribution import TargetOptions  # noqa: E402
from cotcredit.segmentation import SegmentOptions, segment_encoded  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEP = "\x1e"  # joins the template's pieces; split again by the tokenizer wrapper


def synthetic_trace() -> Trace:
    """A deterministic ~400-token lookup-and-arithmetic trace."""
    items = [("apples", 3), ("pears", 5), ("plums", 2), ("lemons", 4), ("melons", 9), ("figs", 6)]
    table = "\n".join(f"| {name} | {price} dollars |" for name, price in items)
    prompt = (
        "A market stall has this price list:\n| item | price |\n" + table + "\n"
        "Mia buys 3 pears, 2 melons and 4 figs. How much does she pay in total? "
        "Think step by step, then give the final answer as \\boxed{...}."
    )
    lines = [
        "Let me read the price list carefully before computing anything.",
        "The items Mia buys are pears, melons and figs, so I need those three rows.",
        "First, the pears: the table says pears cost 5 dollars each.",
        "She buys 3 pears, so the pears cost 3 * 5 = 15 dollars.",
        "Wait, let me make sure I read the right row. The row for pears says 5 dollars. Yes.",
        "Next, the melons: melons cost 9 dollars each according to the table.",
        "She buys 2 melons, so that is 2 * 9 = 18 dollars.",
        "Hmm, 18 seems right: 9 + 9 = 18.",
        "Now the figs: figs cost 6 dollars each.",
        "She buys 4 figs, which cost 4 * 6 = 24 dollars.",
        "Let me double-check the figs: 6 + 6 + 6 + 6 = 24. Good.",
        "So the three parts are 15 dollars, 18 dollars and 24 dollars.",
        "Adding the first two: 15 + 18 = 33 dollars.",
        "Then adding the figs: 33 + 24 = 57 dollars.",
        "Actually, let me add them in another order to be safe: 18 + 24 = 42, and 42 + 15 = 57.",
        "Both orders give 57 dollars, so the sum is consistent.",
        "I did not use apples, plums or lemons, which is correct because Mia did not buy them.",
        "Therefore the total Mia pays is 57 dollars.",
    ]
    response = "\n".join(lines) + "\nThe final answer is $\\boxed{57}$."
    return Trace(id="synthetic-market", prompt=prompt, response=response, answer="57")


class PieceTokenizer:
    """Tokenizes `SEP`-joined pieces to fixed ids per piece position; delegates the rest."""

    def __init__(self, tokenizer, pieces: list[tuple[str, list[int]]]):
        self.tokenizer = tokenizer
        self.pieces = pieces  # per position: (text when present, its ids)

    def encode(self, text: str, return_tensors=None, add_special_tokens=True, **kwargs):
        parts = text.split(SEP)
        assert len(parts) == len(self.pieces), (len(parts), len(self.pieces))
        ids: list[int] = []
        for part, (full_text, full_ids) in zip(parts, self.pieces, strict=True):
            if part == full_text:
                ids += full_ids
            else:
                assert part == "", "only deletion (baseline '') is benchmarked"
        return torch.tensor([ids]) if return_tensors == "pt" else ids

    def __call__(self, *args, **kwargs):
        return self.tokenizer(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="default: the embedded SmolLM2-135M-Instruct")
    ap.add_argument("--traces", default=str(ROOT / "examples" / "traces.jsonl"))
    ap.add_argument("--synthetic", action="store_true", help="use the built-in ~400-token trace")
    ap.add_argument("--segments", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8, help="Shapley orderings (both sides)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many interleaved runs")
    ap.add_argument(
        "--stock-mode",
        choices=("seq", "tokens"),
        default="seq",
        help="captum's forward: seq = one pass over input + target (its faster mode, default "
        "here); tokens = its default, target decoded token by token with a KV cache",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args(argv)

    from captum.attr import FeatureAblation, LLMAttribution, ShapleyValueSampling, TextTemplateInput

    torch.set_grad_enabled(False)
    if args.threads:
        torch.set_num_threads(args.threads)
    scorer = load_scorer(ModelOptions(model=args.model, device="cpu", dtype="float32"))
    if not args.synthetic and Path(args.traces).exists():
        trace = read_traces(args.traces).traces[0]
    else:
        trace = synthetic_trace()
    target = TargetOptions(forcing=ForcingOptions(answer_terminator=""))
    enc = scorer.encode(trace, reserve=64)
    fwd = scorer.forward(enc.ids, keep_cache=True)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=args.segments))
    K = len(seg)
    forcing = answer_forcing(scorer, target.forcing)
    assert not forcing.terminators

    # ---- cotcredit ---------------------------------------------------------------------------
    def ours(method, options):
        t0 = time.perf_counter()
        f = scorer.forward(enc.ids, keep_cache=True)
        t1 = time.perf_counter()
        rows = method.run(TraceContext(scorer, enc, f, seg), options)
        t2 = time.perf_counter()
        label = next(iter(rows))
        return np.array([r["score"] for r in rows[label]]), t2 - t0, t2 - t1

    sh_opts = shapley.ShapleyOptions(
        target=target, backend="captum", samples=args.samples, exact_max=0, seed=args.seed
    )
    orders = shapley._orderings(K, args.samples, args.seed)

    # ---- captum stock ------------------------------------------------------------------------
    prompt_text = scorer.render_prompt(trace.prompt)
    pieces = [(prompt_text, enc.prompt_ids)]
    pieces += [(s.text, enc.reasoning_ids[s.token_start : s.token_end]) for s in seg.segments]
    pieces += [(forcing.exit_string, forcing.exit_ids)]
    assert all(SEP not in t for t, _ in pieces)
    tok = PieceTokenizer(scorer.tokenizer, pieces)
    template = SEP.join(["{}"] * (K + 2))
    inp = TextTemplateInput(
        template,
        values=[t for t, _ in pieces],
        baselines=[prompt_text, *[""] * K, forcing.exit_string],
        mask=[0, *range(1, K + 1), 0],
    )
    assert (
        tok.encode(inp.to_model_input(), return_tensors="pt")[0].tolist()
        == enc.ids + forcing.exit_ids
    )
    answer = torch.tensor(forcing.answer_ids)

    def stock(kind):
        if kind == "loo":
            algo = FeatureAblation(scorer.model)
            kwargs = {}
        else:
            algo = ShapleyValueSampling(scorer.model)
            algo.permutation_generator = lambda n, s: iter(
                [[0] + [k + 1 for k in o] for o in orders]
            )
            kwargs = {"n_samples": len(orders)}
        llm = LLMAttribution(algo, tok)
        t0 = time.perf_counter()
        res = llm.attribute(
            inp, target=answer, forward_in_tokens=args.stock_mode == "tokens", **kwargs
        )
        dt = time.perf_counter() - t0
        return res.seq_attr.double().cpu().numpy()[1 : K + 1], dt

    results = {}
    for name, method, options in (
        ("loo", loo, loo.LooOptions(target=target)),
        ("shapley", shapley, sh_opts),
    ):
        o_t, o_x, s_t = [], [], []
        for _ in range(args.repeats):
            a, t_all, t_attr = ours(method, options)
            b, t_stock = stock(name)
            o_t.append(t_all)
            o_x.append(t_attr)
            s_t.append(t_stock)
        results[name] = {
            "cotcredit_s": min(o_t),
            "cotcredit_without_trace_pass_s": min(o_x),
            "captum_stock_s": min(s_t),
            "speedup": min(s_t) / min(o_t),
            "max_abs_diff": float(np.abs(a - b).max()),
            "max_abs_score": float(np.abs(a).max()),
        }
    info = {
        "model": scorer.name,
        "trace": trace.id,
        "prompt_tokens": enc.prompt_len,
        "reasoning_tokens": enc.n_reasoning,
        "segments": K,
        "samples": args.samples,
        "stock_mode": args.stock_mode,
        "threads": torch.get_num_threads(),
        "load": os.getloadavg()[0],
    }
    print(
        f"model {info['model']}; trace {trace.id}: {enc.prompt_len} prompt + {enc.n_reasoning} "
        f"reasoning tokens, {K} segments; Shapley: {args.samples} orderings; "
        f"captum forward mode {args.stock_mode}; "
        f"{info['threads']} threads, load {info['load']:.1f}"
    )
    print(
        f"{'method':<10}{'cotcredit s':>13}{'(no trace pass)':>17}{'captum stock s':>16}"
        f"{'speedup':>9}{'max |diff|':>12}{'max |score|':>13}"
    )
    for name, r in results.items():
        print(
            f"{name:<10}{r['cotcredit_s']:>13.2f}{r['cotcredit_without_trace_pass_s']:>17.2f}"
            f"{r['captum_stock_s']:>16.2f}{r['speedup']:>8.1f}x{r['max_abs_diff']:>12.2e}"
            f"{r['max_abs_score']:>13.3f}"
        )
    out = {"info": info, "results": results}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
