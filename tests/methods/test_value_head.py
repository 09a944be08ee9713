"""The value head (`value-head`): cross-fitting never scores a problem with a model fitted on it,
the fit recovers a planted value, and the method's values and cost are the head's on the
trace's hidden states plus its share of the fitting cost."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from cotcredit.data.trace import problem_key
from cotcredit.data.traces import iter_traces
from cotcredit.errors import UserError
from cotcredit.methods.mc import McOptions
from cotcredit.methods.value_head import ValueHeadOptions
from cotcredit.methods.value_head_fit import (
    HeadSpec,
    boundary_features,
    cross_fit,
    fit_model,
    fit_value_head,
    load_head,
    predict,
    problem_folds,
)
from cotcredit.pipeline.run import run_analysis
from cotcredit.segmentation import SegmentOptions


def planted(n_traces=60, per_problem=3, width=8, seed=0):
    """Features whose first coordinate sets the value: V = σ(2·x_0)."""
    g = torch.Generator().manual_seed(seed)
    feats, targets, problem_of = {}, {}, {}
    for i in range(n_traces):
        x = torch.randn(5, width, generator=g)
        tid = f"t{i}"
        feats[tid], targets[tid] = x, torch.sigmoid(2 * x[:, 0]).tolist()
        problem_of[tid] = f"p{i // per_problem}"
    return feats, targets, problem_of


@pytest.mark.parametrize("kind", ["linear", "mlp"])
def test_a_head_recovers_a_planted_value(kind):
    feats, targets, _ = planted()
    x = torch.cat(list(feats.values()))
    y = torch.tensor([v for t in targets.values() for v in t])
    state = fit_model(x, y, HeadSpec(kind, l2=1e-4))
    got = predict(state, HeadSpec(kind), x)
    assert float((got - y).abs().mean()) < 0.05
    # The penalty shrinks the fit toward a constant.
    flat = predict(fit_model(x, y, HeadSpec(kind, l2=10.0)), HeadSpec(kind), x)
    assert float(flat.std()) < 0.5 * float(got.std())


def test_cross_fitting_never_scores_a_problem_it_was_fitted_on():
    feats, targets, problem_of = planted()
    fit_ids = [t for t in feats if int(t[1:]) < 30]  # the first 10 problems fit
    head = cross_fit(feats, targets, problem_of, fit_ids, HeadSpec("linear"), folds=4)
    assert set(head.fold_of) == {problem_of[t] for t in fit_ids}
    assert len(set(head.fold_of.values())) == 4
    for tid in feats:
        problem = problem_of[tid]
        name, _ = head.model_for(problem)
        assert problem not in head.fitted_on[name]
        if problem in head.fold_of:  # a fitting problem: by the fold that left it out
            assert name == f"fold{head.fold_of[problem]}"
            others = {problem_of[t] for t in fit_ids} - {
                p for p, g in head.fold_of.items() if g == head.fold_of[problem]}
            assert set(head.fitted_on[name]) == others
        else:  # the rest: by the model fitted on every fitting problem
            assert name == "outside"
            assert set(head.fitted_on[name]) == {problem_of[t] for t in fit_ids}
    # Folds are by problem, whatever the order they are listed in.
    assert problem_folds(["a", "b", "c", "d"], 2) == problem_folds(["d", "c", "b", "a"], 2)


def test_cross_fitting_needs_two_problems():
    feats, targets, problem_of = planted(n_traces=3)
    with pytest.raises(UserError, match="2 problems"):
        cross_fit(feats, targets, problem_of, list(feats), HeadSpec())


# ---- the method, on the tiny model -------------------------------------------------------------
@pytest.fixture
def fitted(scorer, traces_file, tmp_path, graded):
    """A Monte Carlo table of the tiny traces and a head fitted to it (every trace fits)."""
    s = run_analysis(traces_file, scorer, methods={"mc": McOptions(rollouts=4, max_new_tokens=5)},
                     segment_options=SegmentOptions(segments=3))
    mc = pd.DataFrame(s.rows["mc"])
    path = tmp_path / "head.pt"
    head = fit_value_head(traces_file, mc, scorer, path, spec=HeadSpec("linear", l2=0.1),
                          folds=3, scored_traces=6)
    return mc, path, head


def test_the_method_scores_with_the_head_and_counts_its_share(scorer, traces_file, fitted):
    mc, path, head = fitted
    segments = mc[["trace_id", "segment", "token_end"]]
    s = run_analysis(traces_file, scorer, methods={"value-head": ValueHeadOptions(str(path))},
                     segment_options=SegmentOptions(segments=3))
    rows = pd.DataFrame(s.rows["value-head"]).sort_values(["trace_id", "segment"])

    mc_cost = mc.groupby("trace_id")[["cost_forward_tokens", "cost_generated_tokens"]].first()
    for trace in iter_traces(traces_file):
        mine = rows[rows["trace_id"] == trace.id]
        bounds = [0, *segments[segments["trace_id"] == trace.id].sort_values(
            "segment")["token_end"]]
        enc = scorer.encode(trace)
        x = boundary_features(scorer, enc, bounds, "last")
        name, state = head.model_for(problem_key(trace))
        want = predict(state, head.spec, x).tolist()
        assert mine["value_after"].tolist() == pytest.approx(want[1:], abs=1e-6)
        assert mine["value_before"].iloc[0] == pytest.approx(want[0], abs=1e-6)
        assert (mine["head_model"] == name).all() and name.startswith("fold")
        # one forward pass of its own + the share of fitting: the Monte Carlo of the 3 fitting
        # traces and their feature passes, spread over the 6 traces it is meant to score
        share_f = (mc_cost["cost_forward_tokens"].sum() + sum(
            len(scorer.encode(t).ids) for t in iter_traces(traces_file))) / 6
        share_g = mc_cost["cost_generated_tokens"].sum() / 6
        assert mine["cost_forward_tokens"].iloc[0] == len(enc.ids) + round(share_f)
        assert mine["cost_generated_tokens"].iloc[0] == round(share_g)


def test_outcome_head_and_saved_file(scorer, traces_file, tmp_path, fitted):
    mc, _, _ = fitted
    head = fit_value_head(traces_file, mc, scorer, tmp_path / "outcome.pt", target="outcome",
                          spec=HeadSpec("mlp", layer="middle", steps=50), folds=3)
    again = load_head(tmp_path / "outcome.pt")
    assert again.target == "outcome" and again.spec == head.spec
    assert again.amortized["cost_generated_tokens"] == 0  # no rollouts
    assert json.dumps(again.fitted_on) == json.dumps(head.fitted_on)


def test_options_refuse_a_missing_head(tmp_path):
    with pytest.raises(UserError, match="needs a fitted head"):
        ValueHeadOptions().validate()
    with pytest.raises(UserError, match="no such file"):
        ValueHeadOptions(str(tmp_path / "none.pt")).validate()
    (tmp_path / "junk.pt").write_text("junk")
    with pytest.raises(UserError, match="not a value head"):
        ValueHeadOptions(str(tmp_path / "junk.pt")).validate()


def test_the_head_trains_as_a_method_credit_source(scorer, traces_file, fitted):
    """`advantage: method` with the value head: a completion's rewards are the method's scores
    on the same tokens (`run_analysis` on its trace), its spans the segments'."""
    from cotcredit.training.method_credit import MethodCredit, method_options

    _, path, _ = fitted
    options = method_options("value-head", {"head": str(path)})
    source = MethodCredit(scorer.model, scorer.tokenizer, "value-head", options, segments=3)
    traces = list(iter_traces(traces_file))
    encoded = [scorer.encode(t) for t in traces]
    got = source.score_batch(
        [e.ids[: e.prompt_len] for e in encoded], [e.ids[e.prompt_len:] for e in encoded],
        [{"prompt": t.prompt, "answer": t.answer} for t in traces])  # problems by prompt
    s = run_analysis(traces_file, scorer, methods={"value-head": options},
                     segment_options=SegmentOptions(segments=3))
    rows = pd.DataFrame(s.rows["value-head"]).sort_values(["trace_id", "segment"])
    for trace, enc, (rewards, spans) in zip(traces, encoded, got, strict=True):
        mine = rows[rows["trace_id"] == trace.id]
        assert rewards == pytest.approx(mine["score"].tolist(), abs=1e-6)
        assert spans[0][0] == 0 and spans[-1][1] == enc.n_reasoning
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_bench_runs_the_head_only_when_named_with_its_file(tmp_path, fitted):
    """Without a head the method cannot run: `bench`'s default methods leave it out, and
    naming it without a head is one line before any model loads."""
    from cotcredit.bench.variants import default_methods, method_runs

    assert "value-head" not in default_methods({}) and "mc" in default_methods({})
    with pytest.raises(UserError, match="value-head needs a fitted head"):
        method_runs("value-head", {})
    _, path, _ = fitted
    runs = method_runs("head", {"head": {"method": "value-head", "head": str(path)}})
    assert [r.label for r in runs] == ["head", "mc"]
