"""RREDCoT: return equivalence, components, packed = naive, and a constructed answer jump."""

import math

import pandas as pd
import pytest

from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm import Scorer
from cotcredit.lm.encoding import EXIT_PLAIN, EXIT_THINK, ForcingOptions, answer_forcing
from cotcredit.methods import TraceContext
from cotcredit.methods.rredcot import RredcotOptions, redistribute_rewards
from cotcredit.pipeline.run import run_analysis
from cotcredit.segmentation import SegmentOptions, segment_encoded


def rows_of(scorer, traces_file, **opts):
    s = run_analysis(traces_file, scorer, methods={"rredcot": RredcotOptions(**opts)},
                     segment_options=SegmentOptions(segments=4))
    return pd.DataFrame(s.rows["rredcot"]), s


@pytest.mark.parametrize("sum_to", ["return", "advantage"])
@pytest.mark.parametrize("space", ["prob", "log"])
def test_rewards_sum_to_outcome(scorer, traces_file, sum_to, space):
    df, _ = rows_of(scorer, traces_file, sum_to=sum_to, space=space)
    for _, g in df.groupby("trace_id"):
        g = g.sort_values("segment")
        zeta, terminal = g.outcome.iloc[0], g.terminal.iloc[0]
        # The outcome in g's space: ζ in probability space, its log (floored) in log space.
        assert terminal == (zeta if space == "prob" else math.log(max(zeta, 1e-300)) if zeta > 1e-6
                            else min(math.log(1e-6), g.g_before.min(), g.g_after.min()))
        g0 = g.g_before.iloc[0]
        target = terminal if sum_to == "return" else terminal - g0
        assert g.score.sum() == pytest.approx(target, abs=1e-9)
        # g_after of one segment is g_before of the next; r_k = g_k - g_(k-1) except the ends.
        assert list(g.g_after.iloc[:-1]) == list(g.g_before.iloc[1:])
        inner = g.iloc[1:-1]
        if len(inner):
            assert (inner.score - (inner.g_after - inner.g_before)).abs().max() < 1e-12


#: The estimator that was the default before v̂ followed every known path.
ONE_REFERENCE = {"references": "solution", "solution_part": "remaining", "empty_part": "keep"}


def test_default_is_rhat_plus_vhat_over_every_known_path(scorer, traces_file):
    """The default (R̂ + v̂; the listed solutions and right-answer siblings, matched by content,
    the empty part dropped) equals asking for it and differs from the one-reference estimator;
    a trace without a solution gets R̂ alone; --value rhat gives R̂ alone everywhere."""
    df, summary = rows_of(scorer, traces_file)
    both, _ = rows_of(scorer, traces_file, value="both", references="siblings",
                      solution_part="matched", empty_part="drop")
    cols = ["score", "r_hat", "v_hat", "g_after"]
    pd.testing.assert_frame_equal(df[cols], both[cols])
    earlier, _ = rows_of(scorer, traces_file, **ONE_REFERENCE)
    # R̂ does not depend on the references; the packed passes group the probes differently
    # with more references, which moves float32 sums by ~1e-7 relative
    assert earlier.r_hat.tolist() == pytest.approx(df.r_hat.tolist(), rel=1e-6)
    assert not earlier.v_hat.fillna(0).equals(df.v_hat.fillna(0))
    assert df[df.trace_id == "t1"].v_hat.notna().all()
    assert df[df.trace_id == "t2"].v_hat.isna().all()
    assert any("R̂ alone" in n for n in summary.notes)
    rhat, _ = rows_of(scorer, traces_file, value="rhat")
    assert rhat.v_hat.isna().all() and (rhat.g_after - rhat.r_hat.map(math.exp)).abs().max() == 0


def test_components_and_outcomes(scorer, traces_file):
    df, summary = rows_of(scorer, traces_file, value="both")
    t1 = df[df.trace_id == "t1"]  # has a solution: v̂ present, g = exp(R̂) + exp(v̂)
    assert t1.v_hat.notna().all()
    assert (t1.g_after - (t1.r_hat.map(math.exp) + t1.v_hat.map(math.exp))).abs().max() < 1e-12
    t2 = df[df.trace_id == "t2"]  # no solution: R̂ alone, said once
    assert t2.v_hat.isna().all()
    assert (t2.g_after - t2.r_hat.map(math.exp)).abs().max() < 1e-12
    assert any("R̂ alone" in n for n in summary.notes)
    # Outcomes: t1 correct field, t2 graded (boxed 7 vs 7), t3 reward field.
    assert dict(df.groupby("trace_id").outcome.first()) == {"t1": 1.0, "t2": 1.0, "t3": 1.0}
    assert (df.r_hat < 0).all()


def test_value_vhat_needs_solution(scorer, traces_file):
    with pytest.raises(UserError, match="needs a reference solution"):
        rows_of(scorer, traces_file, value="vhat")


def test_length_norm_changes_only_vhat(scorer, traces_file):
    a, _ = rows_of(scorer, traces_file, value="both", solution_part="whole")
    b, _ = rows_of(scorer, traces_file, value="both", solution_part="whole", length_norm=True)
    assert (a.r_hat - b.r_hat).abs().max() == 0
    t1a, t1b = a[a.trace_id == "t1"], b[b.trace_id == "t1"]
    assert (t1b.v_hat > t1a.v_hat).all()  # dividing a negative log-prob by |U*| raises it


def test_packed_equals_naive(scorer, traces_file):
    a, _ = rows_of(scorer, traces_file, value="both", solution_part="whole")
    b, _ = rows_of(scorer, traces_file, value="both", solution_part="whole", probe_mode="naive")
    for col in ("r_hat", "v_hat", "r_hat_before", "score"):
        x, y = a[col].astype(float).fillna(0), b[col].astype(float).fillna(0)
        assert (x - y).abs().max() < 1e-4, col


def test_redistribute_rewards_formula():
    r, corr = redistribute_rewards([0.1, 0.3, 0.2, 0.6], 1.0, "advantage")
    assert r == pytest.approx([0.2, -0.1, 0.4 + 0.4]) and corr == pytest.approx(0.4)
    r, _ = redistribute_rewards([0.1, 0.3, 0.2, 0.6], 0.0, "return")
    assert sum(r) == pytest.approx(0.0) and r[0] == pytest.approx(0.3)


def test_exit_string_is_chosen_once_per_model_and_errors(scorer: Scorer):
    # The tiny tokenizer's template has no <think>: the plain exit string, for every trace.
    f = answer_forcing(scorer, ForcingOptions())
    assert f.exit_string == EXIT_PLAIN
    probe = f.answer_probe("12")
    a0, a1 = probe.span("answer")
    assert f.terminators and scorer.tokenizer.decode(probe.ids[a0:a1]) == "12"
    assert scorer.tokenizer.decode(probe.ids) == EXIT_PLAIN + "12"
    with pytest.raises(UserError, match="does not tokenize cleanly"):
        answer_forcing(scorer, ForcingOptions(exit_string="\ufffe\udcff"))
    assert not answer_forcing(scorer, ForcingOptions(exit_string="Answer: ")).terminators


def test_thinking_models_get_the_close_tag(scorer: Scorer):
    from cotcredit.lm.encoding import default_exit_string

    class Tok:
        chat_template = "{{ '<|im_start|>assistant\\n<think>\\n' }}"

    assert default_exit_string(Tok()) == EXIT_THINK
    assert default_exit_string(scorer.tokenizer) == EXIT_PLAIN


def test_trace_without_solution_first_then_with(scorer, traces_file, tmp_path):
    """A column that is all None in the first trace (v̂) must take values from later ones."""
    import json

    lines = traces_file.read_text().splitlines()
    p = tmp_path / "reordered.jsonl"
    p.write_text("\n".join([lines[1], lines[0], lines[2]]) + "\n")
    out = tmp_path / "r.parquet"
    run_analysis(p, scorer, methods={"rredcot": RredcotOptions(value="both")},
                 outputs={"rredcot": out},
                 segment_options=SegmentOptions(segments=3))
    df = pd.read_parquet(out)
    assert df[df.trace_id == "t2"].v_hat.isna().all()
    assert df[df.trace_id == "t1"].v_hat.notna().all() and df.v_hat.dtype == "float64"
    assert json.loads(lines[0])["id"] == "t1"


def test_log_space_wrong_trace_penalises_its_commitment():
    from cotcredit.methods.rredcot import terminal_value

    g = [-3.0, -2.0, -1.5]
    t = terminal_value(0.0, g, "log", 1e-6)
    assert t == pytest.approx(math.log(1e-6))
    r, _ = redistribute_rewards(g, t, "return")
    assert r[-1] < 0 and sum(r) == pytest.approx(t)
    # Estimates below the floor: the terminal follows them down, the commitment is still <= 0.
    g = [-30.0, -20.0, -25.0]
    t = terminal_value(0.0, g, "log", 1e-6)
    r, _ = redistribute_rewards(g, t, "advantage")
    assert t == -30.0 and r[-1] <= 0 and sum(r) == pytest.approx(t - g[0])
    # A correct trace ends at log 1 = 0; probability space keeps ζ.
    assert terminal_value(1.0, g, "log") == 0.0 and terminal_value(0.0, g, "prob") == 0.0


@pytest.mark.parametrize("space", ["prob", "log"])
def test_wrong_trace_commitment_is_negative_in_both_spaces(scorer, space):
    from cotcredit.methods.rredcot import run

    trace = Trace("w", "What is 3 + 4?", "Let me add.\nSo 3 + 4 = 8.\nThe answer is 8.", "7",
                  outcome=0.0)
    enc = scorer.encode(trace, reserve=64)
    fwd = scorer.forward(enc.ids)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=2))
    rows = run(TraceContext(scorer, enc, fwd, seg), RredcotOptions(value="rhat", space=space))
    rows = rows["rredcot"]
    assert rows[-1]["score"] <= 0
    assert math.fsum(r["score"] for r in rows) == pytest.approx(rows[0]["terminal"], abs=1e-9)
    assert rows[0]["space"] == space


# ---- v̂'s probe text, the step alignment, the weight λ ----------------------------------------
LINES_TRACE = Trace(
    "lines", "What do 3 apples cost?",
    "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12.", "12",
    solution="Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12.", outcome=1.0,
)
ANSWER_LINE = ForcingOptions(exit_string="The answer is ")


def context(scorer, trace, segments):
    enc = scorer.encode(trace, reserve=64)
    fwd = scorer.forward(enc.ids)
    return TraceContext(scorer, enc, fwd, segment_encoded(enc, fwd.entropies,
                                                          SegmentOptions(segments=segments)))


def probe_texts(scorer, ctx, **opts):
    """v̂'s probe C ⊕ U*_k ⊕ E ⊕ Y* after each state for the trace's own solution (one reference,
    the empty part kept: one probe per state)."""
    from cotcredit.methods.rredcot import build_probes

    probes = build_probes(ctx, RredcotOptions(**{"references": "solution", "empty_part": "keep",
                                                 **opts}))
    return [scorer.tokenizer.decode(c.ids) for c in probes.continuations[probes.n_states:]]


def test_vhat_probe_text_at_each_boundary(scorer):
    ctx = context(scorer, LINES_TRACE, 2)
    assert [s.text for s in ctx.segmentation.segments] == ["Apples cost 4 each.\n",
                                                           "So 3 apples cost 12.\n"]
    # Every state ends a line (the prompt's template ends in "\n" too): no connector, so no
    # empty line; the exit string starts a line of its own after U*.
    full = "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12"
    assert probe_texts(scorer, ctx, solution_part="whole", forcing=ANSWER_LINE) == [full] * 3
    assert probe_texts(scorer, ctx, solution_part="remaining", forcing=ANSWER_LINE) == [
        full, "So 3 apples cost 12.\nThe answer is 12", "The answer is 12"]
    # An exit string that opens with whitespace follows U* as it is.
    assert probe_texts(scorer, ctx, solution_part="remaining")[1] == (
        "So 3 apples cost 12." + EXIT_PLAIN + "12")
    for b, text in zip(ctx.segmentation.boundaries,
                       probe_texts(scorer, ctx, solution_part="whole", forcing=ANSWER_LINE)):
        n = ctx.prefix_len(b)
        assert "\n\n" not in scorer.tokenizer.decode(ctx.encoded.ids[n - 3 : n]) + text


def test_vhat_connector_only_where_the_state_stops_mid_line(scorer):
    trace = Trace("mid", "What do 3 apples cost?",
                  "Apples cost 4 each. So 3 apples cost 12.\nThe answer is 12.", "12",
                  solution="Apples cost 4 each.\nSo 3 apples cost 12.", outcome=1.0)
    ctx = context(scorer, trace, 2)
    assert ctx.segmentation.segments[0].text == "Apples cost 4 each. "  # cut before "So"
    texts = probe_texts(scorer, ctx, solution_part="remaining", forcing=ANSWER_LINE)
    assert texts[1] == "\nSo 3 apples cost 12.\nThe answer is 12"  # C = "\n" starts a line


def test_steps_covered_is_proportional_and_one_to_one_when_counts_match():
    from cotcredit.methods.rredcot import steps_covered

    assert [steps_covered(k, 4, 4) for k in range(5)] == [0, 1, 2, 3, 4]
    assert [steps_covered(k, 8, 4) for k in range(9)] == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    assert [steps_covered(k, 2, 5) for k in range(3)] == [0, 2, 5]
    assert [steps_covered(k, 3, 1) for k in range(4)] == [0, 0, 0, 1]


def test_reference_steps_and_what_remains():
    from cotcredit.methods.rredcot import reference_steps, remaining_solution

    steps = reference_steps("Read the row.\n\nThe kiwi costs 7.\nSo it costs 7.\nThe answer is 7.")
    assert steps == ["Read the row.", "The kiwi costs 7.", "So it costs 7."]  # no answer line
    assert [remaining_solution(steps, k, 3) for k in range(4)] == [
        "Read the row.\nThe kiwi costs 7.\nSo it costs 7.", "The kiwi costs 7.\nSo it costs 7.",
        "So it costs 7.", ""]
    # Six segments over three steps: a step is covered every second segment.
    assert [remaining_solution(steps, k, 6) for k in (1, 2, 5, 6)] == [
        "Read the row.\nThe kiwi costs 7.\nSo it costs 7.", "The kiwi costs 7.\nSo it costs 7.",
        "So it costs 7.", ""]


def test_remaining_probes_on_a_trace_not_aligned_one_to_one(scorer):
    # Three segments, two reference steps: covered 0, 0, 1, 2 steps at s_0..s_3.
    trace = Trace("three", "What do 3 apples cost?",
                  "Apples cost 4 each.\nThere are 3 apples.\nSo 3 apples cost 12.\n"
                  "The answer is 12.", "12",
                  solution="Apples cost 4 each.\nSo 3 apples cost 12.", outcome=1.0)
    ctx = context(scorer, trace, 3)
    assert len(ctx.segmentation) == 3
    assert probe_texts(scorer, ctx, solution_part="remaining", forcing=ANSWER_LINE) == [
        "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12",
        "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12",
        "So 3 apples cost 12.\nThe answer is 12",
        "The answer is 12",
    ]


@pytest.mark.parametrize("space", ["prob", "log"])
@pytest.mark.parametrize("part", ["whole", "remaining"])
def test_vhat_weight_zero_is_rhat_alone_exactly(scorer, traces_file, space, part):
    rhat, _ = rows_of(scorer, traces_file, value="rhat", space=space)
    zero, _ = rows_of(scorer, traces_file, value="both", vhat_weight=0.0, space=space,
                      solution_part=part)
    assert zero.v_hat.isna().all()  # not computed: the probes packed are R̂'s alone
    for col in ("score", "g_before", "g_after", "r_hat", "correction", "terminal"):
        assert list(zero[col]) == list(rhat[col]), col  # exactly, not approximately


def test_vhat_weight_scales_the_vhat_term(scorer, traces_file):
    df, _ = rows_of(scorer, traces_file, value="both", vhat_weight=0.25)
    t1 = df[df.trace_id == "t1"]
    lam_pv = t1.g_after - t1.r_hat.map(math.exp)
    assert (lam_pv - 0.25 * t1.v_hat.map(math.exp)).abs().max() < 1e-12


def test_remaining_vhat_at_the_end_is_the_forced_answer(scorer):
    # Nothing left of U* at s_K: v̂_K = log p(Y* | s_K ⊕ E) = R̂_K (no connector after "\n").
    from cotcredit.methods.rredcot import estimate

    ctx = context(scorer, LINES_TRACE, 2)
    for norm in (False, True):
        est = estimate(ctx, RredcotOptions(value="both", length_norm=norm,
                                           forcing=ANSWER_LINE, **ONE_REFERENCE))
        assert est.v_hat[-1] == pytest.approx(est.r_hat[-1], abs=1e-9)
        assert all(v < est.r_hat[k] for k, v in enumerate(est.v_hat[:-1]) if not norm)


@pytest.mark.parametrize("paths", [ONE_REFERENCE, {}], ids=["one-reference", "default"])
def test_vhat_packed_equals_naive(scorer, traces_file, paths):
    a, _ = rows_of(scorer, traces_file, value="both", length_norm=True, **paths)
    b, _ = rows_of(scorer, traces_file, value="both", length_norm=True, probe_mode="naive",
                   **paths)
    x, y = a.v_hat.astype(float).fillna(0), b.v_hat.astype(float).fillna(0)
    assert (x - y).abs().max() < 1e-4


@pytest.mark.parametrize("bad", [{"vhat_weight": -1.0}, {"vhat_weight": math.inf},
                                 {"value": "vhat", "vhat_weight": 0.0}])
def test_vhat_weight_is_checked(bad):
    with pytest.raises(UserError, match="vhat-weight"):
        RredcotOptions(**bad).validate()
