"""Attribution: the shared value function, LOO, Shapley (shap and captum), gradients, the CLI."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from cotcredit.data.trace import Trace
from cotcredit.lm.encoding import ForcingOptions, answer_forcing
from cotcredit.methods import TraceContext
from cotcredit.methods.attribution import (
    EmbeddingTarget,
    TargetOptions,
    ValueFunction,
    value_function,
)
from cotcredit.segmentation import SegmentOptions, segment_encoded

RESPONSE = (
    "Let me think step by step.\nApples cost 5 dollars.\nWait, oranges cost 7.\n"
    "So 5 + 7 = 12.\nHmm, check: 7 + 5 = 12.\nTherefore the total is 12.\n"
    "The final answer is $\\boxed{12}$."
)
TRACE = Trace(id="t", prompt="Apples cost 5, oranges 7. Total?", response=RESPONSE, answer="12")


def make_ctx(scorer, segments: int, trace: Trace = TRACE) -> TraceContext:
    enc = scorer.encode(trace, reserve=64)
    fwd = scorer.forward(enc.ids, keep_cache=True)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=segments))
    assert len(seg) == segments
    return TraceContext(scorer, enc, fwd, seg)


def all_masks(K: int) -> np.ndarray:
    return np.array(list(itertools.product([False, True], repeat=K)), dtype=bool)


# ---- the value function -------------------------------------------------------------------------
@pytest.mark.parametrize("baseline_text", [None, " ..."])
def test_packed_value_function_equals_naive_scoring(scorer, baseline_text):
    ctx = make_ctx(scorer, 6)
    packed = ValueFunction(ctx, TargetOptions(baseline_text=baseline_text))
    naive = ValueFunction(ctx, TargetOptions(baseline_text=baseline_text, probe_mode="naive"))
    rng = np.random.default_rng(0)
    masks = np.vstack([np.zeros(6, bool), np.ones(6, bool), rng.random((14, 6)) < 0.5])
    a, b = packed(masks), naive(masks)
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=0)
    assert packed.evaluated == len({m.tobytes() for m in masks})
    # Memoised: asking again scores nothing new.
    before = packed.evaluated
    np.testing.assert_array_equal(packed(masks), a)
    assert packed.evaluated == before


def test_value_function_sequences_delete_segments_by_offsets(scorer):
    ctx = make_ctx(scorer, 5)
    f = ValueFunction(ctx)
    enc = ctx.encoded
    mask = [True, False, True, True, False]
    seq, n_target = f.sequence(mask)
    kept = [
        t
        for s, m in zip(ctx.segmentation.segments, mask, strict=True)
        if m
        for t in enc.reasoning_ids[s.token_start : s.token_end]
    ]
    probe = answer_forcing(scorer, ForcingOptions()).answer_probe(TRACE.answer)
    assert seq == enc.prompt_ids + kept + probe.ids
    assert n_target == len(probe.ids) - probe.span("answer")[0]
    c = f.continuation(mask)
    assert c.prefix_len == enc.prompt_len + ctx.segmentation.segments[1].token_start
    assert enc.ids[: c.prefix_len] + c.ids == seq


def test_bad_mask_shape_is_refused(scorer):
    f = ValueFunction(make_ctx(scorer, 4))
    with pytest.raises(ValueError, match="shape"):
        f(np.ones((2, 3)))


# ---- leave-one-out ------------------------------------------------------------------------------
def test_loo_equals_two_direct_scorings(scorer):
    from cotcredit.methods.loo import LooOptions, run

    ctx = make_ctx(scorer, 5)
    rows = run(ctx, LooOptions())["loo"]
    enc = ctx.encoded
    forcing = answer_forcing(scorer, ForcingOptions())
    probe = forcing.answer_probe(TRACE.answer)
    tail = probe.ids
    n_answer = len(probe.ids) - probe.span("answer")[0]
    segs = ctx.segmentation.segments
    seqs = [enc.prompt_ids + enc.reasoning_ids + tail]
    for k in range(len(segs)):
        r = enc.reasoning_ids[: segs[k].token_start] + enc.reasoning_ids[segs[k].token_end :]
        seqs.append(enc.prompt_ids + r + tail)
    direct = scorer.score_sequences(
        seqs, [n_answer] * len(seqs), terminators=forcing.terminators or None
    )
    assert forcing.terminators  # E ends in "\boxed{": the terminator mass is part of f
    for k, row in enumerate(rows):
        assert row["score"] == pytest.approx(direct[0] - direct[k + 1], abs=1e-4)
        assert row["value_full"] == pytest.approx(direct[0], abs=1e-4)
    assert any(abs(r["score"]) > 1e-4 for r in rows)


# ---- Shapley ------------------------------------------------------------------------------------
def exact_shapley(f: ValueFunction) -> np.ndarray:
    """Textbook formula over all coalitions (the reference for both backends)."""
    K = f.K
    masks = all_masks(K)
    vals = dict(zip((m.tobytes() for m in masks), f(masks), strict=True))
    phi = np.zeros(K)
    for m in masks:
        s = int(m.sum())
        for k in np.flatnonzero(~m):
            w = math.factorial(s) * math.factorial(K - s - 1) / math.factorial(K)
            with_k = m.copy()
            with_k[k] = True
            phi[k] += w * (vals[with_k.tobytes()] - vals[m.tobytes()])
    return phi


@pytest.fixture(scope="module")
def ctx6(scorer):
    return make_ctx(scorer, 6)


def test_shapley_exact_backends_agree_and_are_efficient(ctx6):
    from cotcredit.methods.shapley import ShapleyOptions, run

    shap_rows = run(ctx6, ShapleyOptions(backend="shap"))["shapley"]
    captum_rows = run(ctx6, ShapleyOptions(backend="captum"))["shapley"]
    f = value_function(ctx6, TargetOptions())
    reference = exact_shapley(f)
    phi_shap = np.array([r["score"] for r in shap_rows])
    phi_captum = np.array([r["score"] for r in captum_rows])
    assert all(r["exact"] and r["samples"] == 0 for r in shap_rows + captum_rows)
    assert shap_rows[0]["coalitions"] == 2**6
    np.testing.assert_allclose(phi_shap, phi_captum, atol=1e-5, rtol=0)
    np.testing.assert_allclose(phi_shap, reference, atol=1e-5, rtol=0)
    assert phi_shap.sum() == pytest.approx(f.full - f.empty, abs=1e-6)
    assert shap_rows[0]["value_full"] - shap_rows[0]["value_empty"] == pytest.approx(
        phi_shap.sum(), abs=1e-6
    )
    assert np.abs(phi_shap).max() > 1e-4


@pytest.mark.parametrize("backend", ["shap", "captum"])
def test_sampled_shapley_is_efficient_and_close_to_exact(scorer, backend):
    from cotcredit.methods.shapley import ShapleyOptions, run

    ctx = make_ctx(scorer, 4)
    exact = np.array([r["score"] for r in run(ctx, ShapleyOptions(backend=backend))["shapley"]])
    opts = ShapleyOptions(backend=backend, exact_max=0, samples=400, seed=1)
    rows = run(ctx, opts)["shapley"]
    sampled = np.array([r["score"] for r in rows])
    assert not rows[0]["exact"] and rows[0]["samples"] == 400
    f = value_function(ctx, TargetOptions())
    assert sampled.sum() == pytest.approx(f.full - f.empty, abs=1e-6)  # every ordering telescopes
    scale = np.abs(exact).max()
    np.testing.assert_allclose(sampled, exact, atol=0.1 * scale, rtol=0)
    # Seeded: the same seed gives the same estimate.
    again = np.array([r["score"] for r in run(ctx, opts)["shapley"]])
    np.testing.assert_array_equal(again, sampled)


def test_captum_sampling_scores_each_coalition_once(scorer):
    from cotcredit.methods.shapley import ShapleyOptions, shapley_captum

    ctx = make_ctx(scorer, 5)
    f = ValueFunction(ctx)
    res = shapley_captum(f, ShapleyOptions(backend="captum", exact_max=0, samples=20))
    assert f.evaluated <= 2**5 < f.requested
    assert res.values.sum() == pytest.approx(f.full - f.empty, abs=1e-6)


# ---- gradients ----------------------------------------------------------------------------------
def test_integrated_gradients_completeness(scorer):
    from cotcredit.methods.gradient import GradientOptions, run

    ctx = make_ctx(scorer, 5)
    out = run(ctx, GradientOptions(kinds=("ig", "saliency", "ixg"), steps=64))
    assert set(out) == {"gradient-ig", "gradient-saliency", "gradient-ixg"}
    ig = out["gradient-ig"]
    target = EmbeddingTarget(ctx)
    with torch.no_grad():
        f_x = float(target(target.reasoning[None])[0])
        f_0 = float(target(torch.zeros_like(target.reasoning)[None])[0])
    # Same target as the perturbation methods.
    assert f_x == pytest.approx(value_function(ctx, TargetOptions()).full, abs=1e-4)
    assert ig[0]["value_full"] == pytest.approx(f_x, abs=1e-5)
    total = sum(r["score"] for r in ig)
    delta = ig[0]["delta"]
    assert abs(total - (f_x - f_0)) <= abs(delta) + 1e-5
    assert abs(delta) < 0.05 * max(abs(f_x - f_0), 1e-3)
    for r in out["gradient-saliency"] + out["gradient-ixg"] + ig:
        assert r["l2"] >= abs(r["score"]) / 1e6 and r["l2"] > 0


def test_gradient_internal_batches_give_the_same_attributions(scorer):
    from cotcredit.methods.gradient import GradientOptions, run

    ctx = make_ctx(scorer, 3)
    one = run(ctx, GradientOptions(steps=8, batch_tokens=1))["gradient-ig"]
    many = run(ctx, GradientOptions(steps=8, batch_tokens=10**6))["gradient-ig"]
    for a, b in zip(one, many, strict=True):
        assert a["score"] == pytest.approx(b["score"], abs=1e-5)


def test_options_validate():
    from cotcredit.errors import UserError
    from cotcredit.methods.gradient import GradientOptions
    from cotcredit.methods.shapley import ShapleyOptions

    with pytest.raises(UserError, match="--gradient"):
        GradientOptions(kinds=("foo",)).validate()
    with pytest.raises(UserError, match="--shapley-backend"):
        ShapleyOptions(backend="lime").validate()
    with pytest.raises(UserError, match="--samples"):
        ShapleyOptions(samples=0).validate()


# ---- command line -------------------------------------------------------------------------------
def run_cli(args, capsys):
    from cotcredit.cli import main

    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_cli_attribute_end_to_end(tiny_model_dir, traces_file, tmp_path, capsys):
    out = tmp_path / "attr.parquet"
    args = [
        "attribute",
        str(traces_file),
        "-o",
        str(out),
        "--model",
        str(tiny_model_dir),
        "--method",
        "loo,shapley,gradient",
        "--gradient",
        "ig,saliency",
        "--steps",
        "4",
        "--segments",
        "4",
        "--shapley-backend",
        "captum",
        "--quiet",
        "--device",
        "cpu",
    ]
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    df = pd.read_parquet(out)
    assert set(df["method"]) == {"loo", "shapley", "gradient-ig", "gradient-saliency"}
    assert df.groupby("method")["trace_id"].nunique().eq(3).all()
    for col in (
        "score",
        "value_full",
        "value_without",
        "backend",
        "exact",
        "samples",
        "l2",
        "delta",
        "token_start",
        "text",
    ):
        assert col in df.columns, col
    sh = df[df.method == "shapley"]
    assert (
        sh.groupby("trace_id")["score"].sum()
        - (
            sh.groupby("trace_id")["value_full"].first()
            - sh.groupby("trace_id")["value_empty"].first()
        )
    ).abs().max() < 1e-6
    # Every method on the same segmentation.
    spans = {
        m: list(zip(g.trace_id, g.token_start, g.token_end, strict=True))
        for m, g in df.groupby("method")
    }
    assert len({tuple(v) for v in spans.values()}) == 1
    # Rerun resumes instead of duplicating.
    code, _, err = run_cli(args, capsys)
    assert code == 0, err
    assert len(pd.read_parquet(out)) == len(df)
    # Reusing that segmentation file for another run works.
    seg_out = tmp_path / "loo.parquet"
    code, _, err = run_cli(
        [
            "attribute",
            str(traces_file),
            "-o",
            str(seg_out),
            "--model",
            str(tiny_model_dir),
            "--method",
            "loo",
            "--segments-file",
            str(out),
            "--quiet",
            "--baseline-text",
            " ...",
        ],
        capsys,
    )
    assert code == 0, err
    assert len(pd.read_parquet(seg_out)) == len(df[df.method == "loo"])


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--method", "loo,lime"], "--method"),
        (["--gradient", "foo", "--method", "gradient"], "--gradient"),
        (["--shapley-backend", "lime"], "--shapley-backend"),
        (["--samples", "0"], "--samples"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(
    tiny_model_dir, traces_file, tmp_path, capsys, extra, message
):
    args = [
        "attribute",
        str(traces_file),
        "-o",
        str(tmp_path / "a.parquet"),
        "--model",
        str(tiny_model_dir),
        *extra,
    ]
    code, _, err = run_cli(args, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], err


def test_packed_passes_share_common_continuation_prefixes_exactly(scorer):
    """Continuations of one prefix sharing leading tokens (a trie in the packed pass)."""
    from cotcredit.lm import Continuation

    ctx = make_ctx(scorer, 3)
    ids = ctx.encoded.ids
    p = ctx.encoded.prompt_len
    a, b = ids[p + 4 : p + 14], ids[p + 20 : p + 26]
    conts = [
        Continuation(p + 2, a + b, 3),
        Continuation(p + 2, a[:5] + b, 2),
        Continuation(p + 2, a, 0),  # a prefix of the first
        Continuation(p + 2, a + b, 3),  # a duplicate
        Continuation(p + 9, a + b, 1, (1, 2, 3)),
        Continuation(len(ids), b, 1),
    ]
    naive = scorer.score_continuations_naive(ids, conts)
    for budget in (1024, 12):  # one pass, and groups split mid-trie
        scorer_small = scorer.with_options(scorer.options)
        scorer_small.query_budget = budget
        packed = scorer_small.score_continuations(ctx.forward, conts)
        for x, y in zip(packed, naive, strict=True):
            assert x.logprob == pytest.approx(y.logprob, abs=1e-4)
            np.testing.assert_allclose(x.token_logprobs, y.token_logprobs, atol=1e-4)
