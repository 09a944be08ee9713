"""RREDCoT: return equivalence, components, packed = naive, and a constructed answer jump."""

import math

import pandas as pd
import pytest

from cotcredit.errors import UserError
from cotcredit.forcing import EXIT_PLAIN, EXIT_THINK, ForcingOptions, answer_forcing
from cotcredit.lm import Scorer
from cotcredit.methods.rredcot import RredcotOptions, redistribute_rewards
from cotcredit.pipeline import run_analysis
from cotcredit.segmentation import SegmentOptions


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
        zeta = g.outcome.iloc[0]
        g0 = g.g_before.iloc[0]
        target = zeta if sum_to == "return" else zeta - g0
        assert g.score.sum() == pytest.approx(target, abs=1e-9)
        # g_after of one segment is g_before of the next; r_k = g_k - g_(k-1) except the ends.
        assert list(g.g_after.iloc[:-1]) == list(g.g_before.iloc[1:])
        inner = g.iloc[1:-1]
        assert (inner.score - (inner.g_after - inner.g_before)).abs().max() < 1e-12 if len(inner) else True


def test_components_and_outcomes(scorer, traces_file):
    df, summary = rows_of(scorer, traces_file)
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
    a, _ = rows_of(scorer, traces_file)
    b, _ = rows_of(scorer, traces_file, length_norm=True)
    assert (a.r_hat - b.r_hat).abs().max() == 0
    t1a, t1b = a[a.trace_id == "t1"], b[b.trace_id == "t1"]
    assert (t1b.v_hat > t1a.v_hat).all()  # dividing a negative log-prob by |U*| raises it


def test_packed_equals_naive(scorer, traces_file):
    a, _ = rows_of(scorer, traces_file)
    b, _ = rows_of(scorer, traces_file, probe_mode="naive")
    for col in ("r_hat", "v_hat", "r_hat_before", "score"):
        x, y = a[col].astype(float).fillna(0), b[col].astype(float).fillna(0)
        assert (x - y).abs().max() < 1e-4, col


def test_redistribute_rewards_formula():
    r, corr = redistribute_rewards([0.1, 0.3, 0.2, 0.6], 1.0, "advantage")
    assert r == pytest.approx([0.2, -0.1, 0.4 + 0.4]) and corr == pytest.approx(0.4)
    r, _ = redistribute_rewards([0.1, 0.3, 0.2, 0.6], 0.0, "return")
    assert sum(r) == pytest.approx(0.0) and r[0] == pytest.approx(0.3)


def test_exit_string_choice_and_errors(scorer: Scorer, traces_file):
    from cotcredit.traces import read_traces

    t1, t2, _ = read_traces(traces_file).traces
    assert answer_forcing(scorer, t1, ForcingOptions()).exit_string == EXIT_PLAIN
    assert answer_forcing(scorer, t2, ForcingOptions()).exit_string == EXIT_THINK
    f = answer_forcing(scorer, t1, ForcingOptions())
    assert f.terminators and scorer.tokenizer.decode(f.answer_ids) == "12"
    with pytest.raises(UserError, match="does not tokenize cleanly"):
        answer_forcing(scorer, t1, ForcingOptions(exit_string="\ufffe\udcff"))
    assert not answer_forcing(scorer, t1, ForcingOptions(exit_string="Answer: ")).terminators


def test_trace_without_solution_first_then_with(scorer, traces_file, tmp_path):
    """A column that is all None in the first trace (v̂) must take values from later ones."""
    import json

    lines = traces_file.read_text().splitlines()
    p = tmp_path / "reordered.jsonl"
    p.write_text("\n".join([lines[1], lines[0], lines[2]]) + "\n")
    out = tmp_path / "r.parquet"
    run_analysis(p, scorer, methods={"rredcot": None}, outputs={"rredcot": out},
                 segment_options=SegmentOptions(segments=3))
    df = pd.read_parquet(out)
    assert df[df.trace_id == "t2"].v_hat.isna().all()
    assert df[df.trace_id == "t1"].v_hat.notna().all() and df.v_hat.dtype == "float64"
    assert json.loads(lines[0])["id"] == "t1"
