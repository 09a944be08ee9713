"""Adaptive Monte Carlo (`--rollouts auto`): the stopping rule, the budget, the search for the
first drop, and the rollouts it takes being those of the fixed mode."""

from __future__ import annotations

import hashlib
import math

import pandas as pd
import pytest

from cotcredit.errors import UserError
from cotcredit.lm.generation import SamplingOptions
from cotcredit.methods.mc import McOptions
from cotcredit.methods.mc_adaptive import (
    CAP_FACTOR,
    AdaptivePlan,
    Tally,
    Z,
    drop_search,
    half_width,
    prior_weights,
    run_rounds,
    span_weights,
    wilson,
)
from cotcredit.pipeline.run import _key_options, run_analysis
from cotcredit.segmentation import SegmentOptions

PLAN = AdaptivePlan(budget=16, precision=0.2, round_rollouts=8)


def uniform(k: int, j: int) -> float:
    """A fixed pseudo-random number in [0, 1) per (boundary, sample)."""
    return int.from_bytes(hashlib.sha256(f"{k}/{j}".encode()).digest()[:8], "little") / 2**64


def drawer(p: list[float], log: list | None = None, cut=lambda k, j: False):
    """A `draw` whose sample j of position k is correct when uniform(k, j) < p[k]."""

    def draw(asked):
        if log is not None:
            log.append(dict(asked))
        return {k: [(uniform(k, j) < p[k], cut(k, j)) for j in range(first, first + m)]
                for k, (first, m) in asked.items()}

    return draw


# ---- the interval and the stopping rule ------------------------------------------------------
def test_wilson_interval_matches_its_formula():
    for c, n in [(0, 8), (8, 8), (7, 8), (3, 5), (20, 64)]:
        p = c / n
        centre = (c + Z * Z / 2) / (n + Z * Z)
        half = Z * math.sqrt(n * p * (1 - p) + Z * Z / 4) / (n + Z * Z)
        assert wilson(c, n) == pytest.approx((max(0, centre - half), min(1, centre + half)))
    # All right or all wrong: the interval touches 0 or 1 and its half-width is z²/(2(n+z²)).
    assert half_width(Tally(8, 0, 8)) == pytest.approx(Z * Z / (2 * (8 + Z * Z)))
    assert half_width(Tally(8, 8, 8)) == pytest.approx(Z * Z / (2 * (8 + Z * Z)))
    assert half_width(Tally(3, 0, 0)) == math.inf and wilson(0, 0) == (0.0, 1.0)


def test_a_unanimous_first_round_resolves_its_boundary_and_it_stops():
    log: list = []
    # Value 1 and 0 everywhere but position 2 (about 1/2): after the first round only position 2
    # is unresolved (and, the value not dropping from first to last, there is no search).
    tallies = run_rounds(5, PLAN, drawer([1.0, 0.0, 0.5, 0.0, 1.0], log), drop_truncated=False)
    assert log[0] == {k: (0, 8) for k in range(5)}
    assert all(set(r) == {2} for r in log[1:]) and len(log) > 1
    assert [t.n for t in tallies][:2] == [8, 8] and [t.n for t in tallies][3:] == [8, 8]
    # Position 2 went on, 8 at a time from where it stopped, until resolved or capped.
    assert [r[2] for r in log[1:]] == [(8 * i, 8) for i in range(1, len(log))]
    assert half_width(tallies[2]) <= PLAN.precision or tallies[2].n == PLAN.cap
    assert half_width(Tally(16, 8, 16)) > PLAN.precision  # so one more round was needed
    assert sum(t.n for t in tallies) <= PLAN.total(5)


def test_seven_of_eight_is_not_resolved_at_precision_two_tenths():
    assert half_width(Tally(8, 7, 8)) > 0.2 >= half_width(Tally(8, 8, 8))


def test_the_budget_is_respected_and_spent_when_nothing_resolves():
    plan = AdaptivePlan(budget=12, precision=0.01, round_rollouts=5)
    log: list = []
    tallies = run_rounds(6, plan, drawer([0.5] * 6, log), drop_truncated=False)
    assert sum(t.n for t in tallies) == plan.total(6) == 72
    assert all(t.n <= plan.cap == CAP_FACTOR * 12 for t in tallies)
    assert sum(m for r in log for _, m in r.values()) == 72
    # The counts are those of the samples drawn.
    for k, t in enumerate(tallies):
        assert t.correct == sum(uniform(k, j) < 0.5 for j in range(t.n)) and t.usable == t.n


def test_one_boundary_never_takes_more_than_its_cap():
    # The last boundary's rollouts are all cut off and dropped: it has no value, so it is never
    # resolved, and it stops at its cap with budget to spare.
    tallies = run_rounds(20, PLAN, drawer([1.0] * 20, cut=lambda k, j: k == 19),
                         drop_truncated=True)
    assert tallies[-1].n == PLAN.cap == 64 and tallies[-1].usable == 0
    assert all(t.n == 8 for t in tallies[:-1]) and sum(t.n for t in tallies) < PLAN.total(20)


def test_dropped_rollouts_are_not_usable():
    tallies = run_rounds(3, PLAN, drawer([1.0, 1.0, 1.0], cut=lambda k, j: j % 2 == 0),
                         drop_truncated=True)
    for t in tallies:
        assert t.correct == t.usable == t.n // 2
    wrong = run_rounds(3, PLAN, drawer([1.0, 1.0, 1.0], cut=lambda k, j: j % 2 == 0),
                       drop_truncated=False)
    assert all(t.usable == t.n and t.correct == t.n // 2 for t in wrong)


# ---- the binary search for the first drop ----------------------------------------------------
@pytest.mark.parametrize("drop", [1, 4, 7, 11, 12])
def test_the_search_finds_a_planted_first_drop(drop):
    # 13 boundaries, value 0.8 before the drop and 0.2 from it on: a first round of 8 cannot
    # tell many of them from 1/2. A coarse precision resolves every value after the first round,
    # so every later rollout is the search's.
    p = [0.8 if k < drop else 0.2 for k in range(13)]
    plan = AdaptivePlan(budget=24, precision=0.45, round_rollouts=8)
    log: list = []
    tallies = run_rounds(13, plan, drawer(p, log), drop_truncated=False)
    assert all(len(r) == 1 for r in log[1:])  # one boundary per round: bisection
    assert drop_search(tallies, plan.precision) is None  # located, not out of budget
    assert sum(t.n for t in tallies) < plan.total(13)
    values = [t.value for t in tallies]
    credits = [b - a for a, b in zip(values, values[1:], strict=False)]
    # Segment `drop` (between boundaries drop-1 and drop) has the lowest credit, and every
    # boundary the search asked about ended on one side of τ or as close to it as p/2.
    assert min(range(len(credits)), key=credits.__getitem__) == drop - 1
    tau = (values[0] + values[-1]) / 2
    for i in {i for r in log[1:] for i in r}:
        low, high = wilson(tallies[i].correct, tallies[i].n)
        assert low > tau or high < tau or half_width(tallies[i]) <= plan.precision / 2
    # Bisection: far fewer extra rounds than boundaries.
    assert len(log) - 1 <= 2 * math.ceil(math.log2(13)) + 4


def test_no_search_without_a_drop():
    assert drop_search([Tally(8, 2, 8), Tally(8, 4, 8), Tally(8, 6, 8)], 0.2) is None
    assert drop_search([Tally(8, 8, 8), Tally(8, 4, 8)], 0.2) is None  # nothing in between
    # A drop with an unclear middle: the search asks about it.
    assert drop_search([Tally(64, 64, 64), Tally(8, 4, 8), Tally(64, 0, 64)], 0.2) == 1


# ---- the first round at the ends, and a prior ------------------------------------------------
ENDS = AdaptivePlan(budget=24, precision=0.45, round_rollouts=8, first_round="ends")


@pytest.mark.parametrize("drop", [1, 4, 7, 11, 12])
def test_from_the_ends_the_search_bisects_and_finds_the_drop(drop):
    p = [0.8 if k < drop else 0.2 for k in range(13)]
    log: list = []
    tallies = run_rounds(13, ENDS, drawer(p, log), drop_truncated=False)
    assert log[0] == {0: (0, 8), 12: (0, 8)}  # the ends only
    sampled = [i for i, t in enumerate(tallies) if t.n]
    # The search asked about about log2(13) boundaries, not 13, and located the drop between
    # two sampled neighbours: the boundary before it high, the boundary at it low.
    assert len(sampled) <= 2 + math.ceil(math.log2(13)) + 1
    tau = (tallies[0].value + tallies[-1].value) / 2
    before = max(i for i in sampled if i < drop)
    after = min(i for i in sampled if i >= drop)
    assert tallies[before].value > tau > tallies[after].value
    assert after == drop and before == drop - 1


def test_point_decisions_bisect_with_rounds_too_small_for_an_interval():
    # Rounds of 2: no Wilson interval of 2 rollouts lies on one side of τ, so the interval rule
    # keeps asking one boundary; the point rule halves the interval every round.
    p = [1.0 if k < 9 else 0.0 for k in range(16)]
    point = AdaptivePlan(budget=2, precision=0.3, round_rollouts=2, first_round="ends",
                         decision="point")
    log: list = []
    tallies = run_rounds(16, point, drawer(p, log), drop_truncated=False)
    assert log[1:5] == [{8: (0, 2)}, {12: (0, 2)}, {10: (0, 2)}, {9: (0, 2)}]  # bisection
    assert tallies[8].value == 1.0 and tallies[9].value == 0.0
    # then the budget left resolves what was sampled
    assert all(half_width(t) <= point.precision for t in tallies if t.n)
    assert sum(t.n for t in tallies) <= point.total(16)
    # A first value of 1/2 puts τ at 1/4: 0 of 4 right (interval [0, 0.49]) is not low by its
    # interval, and the interval rule asks that boundary again; by its estimate it is low.
    tallies = [Tally(4, 2, 4), Tally(), Tally(4, 0, 4), Tally(), Tally(4, 0, 4)]
    assert drop_search(tallies, 0.3) == 2
    assert drop_search(tallies, 0.3, decision="point") == 1


def test_a_small_budget_is_shared_between_the_ends():
    plan = AdaptivePlan(budget=1, precision=0.3, round_rollouts=4, first_round="ends")
    log: list = []
    tallies = run_rounds(6, plan, drawer([0.9] * 3 + [0.1] * 3, log), drop_truncated=False)
    assert log[0] == {0: (0, 3), 5: (0, 3)} and sum(t.n for t in tallies) == 6


def test_no_drop_from_the_ends_means_two_boundaries():
    tallies = run_rounds(9, ENDS, drawer([0.9] * 9), drop_truncated=False)
    assert [i for i, t in enumerate(tallies) if t.n] == [0, 8]


def test_prior_weights_rank_the_segments():
    assert prior_weights([0.0, -1.0, 0.5]) == [0.5, 1.0, 0.25]
    assert prior_weights([0.0, 0.0, -1.0]) == [2 ** -1.5, 2 ** -1.5, 1.0]  # ties share a rank
    # Span i holds the segments between scored boundaries i-1 and i.
    assert span_weights([1.0, 2.0, 4.0, 8.0], [0, 1, 3, 4]) == [0.0, 1.0, 6.0, 8.0]


@pytest.mark.parametrize("drop", [2, 9])
def test_a_right_prior_finds_the_drop_with_fewer_rollouts(drop):
    p = [0.9 if k < drop else 0.1 for k in range(13)]
    credits = [-1.0 if s == drop - 1 else 0.0 for s in range(12)]  # segment `drop` (index - 1)
    weights = span_weights(prior_weights(credits), list(range(13)))
    plain = run_rounds(13, ENDS, drawer(p), drop_truncated=False)
    guided = run_rounds(13, ENDS, drawer(p), drop_truncated=False, weights=weights)
    sampled = [i for i, t in enumerate(guided) if t.n]
    assert {drop - 1, drop} <= set(sampled)
    assert len(sampled) <= 4 < len([t for t in plain if t.n])
    # The weights only move where rollouts go: the values are the rollouts' own.
    for a, b in zip(guided, plain, strict=True):
        if a.n == b.n:
            assert (a.correct, a.usable) == (b.correct, b.usable)


# ---- options ---------------------------------------------------------------------------------
def test_options():
    McOptions(rollouts="auto").validate()
    McOptions(rollouts="auto", first_round="ends", prior="paths").validate()
    McOptions(rollouts="auto", first_round="ends", rollout_budget=1).validate()  # ends: 2 first
    for bad in (dict(rollouts="many"), dict(rollouts="auto", rollout_budget=4),
                dict(rollouts="auto", first_round="middle"), dict(rollouts="auto", prior="x"),
                dict(rollouts="auto", first_round="ends", rollout_budget=0),
                dict(rollouts="auto", precision=0), dict(rollouts="auto", round_rollouts=0),
                dict(rollouts="auto", backend="vllm")):
        with pytest.raises(UserError):
            McOptions(**bad).validate()


def test_adaptive_settings_leave_the_fixed_mode_run_key_alone():
    fixed = _key_options(McOptions())
    assert _key_options(McOptions(rollout_budget=99, precision=0.5)) == fixed
    assert "rollout_budget" not in fixed and "precision" not in fixed
    auto = _key_options(McOptions(rollouts="auto"))
    assert auto != _key_options(McOptions(rollouts="auto", precision=0.1))


# ---- with the tiny model ---------------------------------------------------------------------
# Rounds of 2: a unanimous pair resolves a value (half-width 0.33), a split one (0.41) does not.
AUTO = dict(rollouts="auto", rollout_budget=6, round_rollouts=2, precision=0.35,
            max_new_tokens=6, seed=0)


def run_mc(scorer, traces_file, tmp_path, name, **opts):
    path = tmp_path / f"{name}.parquet"
    s = run_analysis(traces_file, scorer,
                     methods={"mc": McOptions(**opts, save_rollouts=str(path))},
                     segment_options=SegmentOptions(segments=3))
    return pd.DataFrame(s.rows["mc"]), pd.read_parquet(path)


def test_first_sample_continues_the_streams(scorer):
    from cotcredit.lm.sampling import HFGenerator

    gen = HFGenerator(scorer.model, scorer.tokenizer)
    prompts = [[5, 6, 7, 8], [5, 6]]
    opts = SamplingOptions(n=5, max_new_tokens=5, seed=4)
    whole = gen.generate(prompts, opts, keys=["a", "b"])
    tail = gen.generate(prompts, SamplingOptions(n=3, max_new_tokens=5, seed=4, first_sample=2),
                        keys=["a", "b"])
    for w, t in zip(whole, tail, strict=True):
        assert [c.token_ids for c in w[2:]] == [c.token_ids for c in t]


def test_adaptive_rollouts_are_the_first_of_a_fixed_run(scorer, traces_file, graded, tmp_path):
    df, ro = run_mc(scorer, traces_file, tmp_path, "auto", **AUTO)
    cap = CAP_FACTOR * AUTO["rollout_budget"]
    _, fixed = run_mc(scorer, traces_file, tmp_path, "fixed", rollouts=cap, max_new_tokens=6,
                      seed=0)
    key = ["trace_id", "boundary", "sample"]
    cols = ["token", "text", "n_tokens", "answer", "correct", "truncated"]
    both = ro.merge(fixed, on=key, how="left", suffixes=("", "_fixed"), validate="1:1")
    assert len(both) == len(ro) and both["text_fixed"].notna().all()
    for c in cols:
        assert (both[c] == both[f"{c}_fixed"]).all(), c
    # Each boundary took samples 0..n-1, in whole rounds or up to the budget.
    counts = ro.groupby(["trace_id", "boundary"])["sample"].agg(["count", "max", "min"])
    assert (counts["min"] == 0).all() and (counts["max"] == counts["count"] - 1).all()
    assert (counts["count"] >= AUTO["round_rollouts"]).all() and (counts["count"] <= cap).all()
    assert counts["count"].nunique() > 1  # some boundaries stopped, some went on
    per_trace = ro.groupby("trace_id").size()
    assert (per_trace <= AUTO["rollout_budget"] * 4).all()  # 4 boundaries, budget 6 on average
    # The rows count what was taken, and V is the fraction correct of it.
    for _, row in df.iterrows():
        g = ro[(ro.trace_id == row["trace_id"]) & (ro.boundary == row["segment"] + 1)]
        assert row["n_rollouts"] == len(g)
        assert row["n_correct"] == int((g["correct"] & ~g["truncated"]).sum())
        assert row["value_after"] == pytest.approx(row["n_correct"] / row["n_rollouts"])
        assert row["trace_rollouts"] == per_trace[row["trace_id"]]


def test_adaptive_runs_are_deterministic_and_batch_size_free(scorer, traces_file, graded,
                                                              tmp_path):
    a, ra = run_mc(scorer, traces_file, tmp_path, "a", **AUTO)
    b, rb = run_mc(scorer, traces_file, tmp_path, "b", **AUTO, batch_size=1)
    c, rc = run_mc(scorer, traces_file, tmp_path, "c", **AUTO, batch_size=5)
    cols = ["trace_id", "segment", "score", "n_rollouts", "n_correct", "score_half_a",
            "score_half_b"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    pd.testing.assert_frame_equal(a[cols], c[cols])
    drop = ["run_id"]
    pd.testing.assert_frame_equal(ra.drop(columns=drop), rb.drop(columns=drop))


def test_cli_rollouts_auto(tiny_model_dir, traces_file, tmp_path, graded):
    from cotcredit.cli import main

    out = tmp_path / "mc.parquet"
    main(["mc-baseline", str(traces_file), "-o", str(out), "--model", str(tiny_model_dir),
          "--device", "cpu", "-k", "2", "--rollouts", "auto", "--rollout-budget", "3",
          "--round-rollouts", "2", "--precision", "0.3", "--max-new-tokens", "4", "-q"])
    df = pd.read_parquet(out)
    assert len(df) == 6 and (df["n_rollouts"] >= 2).all()
    assert (df.groupby("trace_id")["trace_rollouts"].first() <= 3 * 3).all()


def test_the_rredcot_prior_follows_the_siblings_in_the_input(scorer, tmp_path, monkeypatch):
    """The rredcot prior is RREDCoT's credit with its default references, siblings read from
    the input as rredcot's own run reads them: the same numbers, and no note that siblings
    were unknown."""
    import json

    from cotcredit.methods import mc
    from cotcredit.methods.rredcot import RredcotOptions
    from cotcredit.methods.rredcot.probes import NO_SIBLINGS_NOTE

    base = {"prompt": "What do 3 apples cost at 4 each?", "answer": "12", "problem_id": "p1"}
    lines = ["Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12.",
             "There are 3 apples.\nAt 4 each they cost 12.\nThe answer is 12.",
             "Apples cost 4 each.\nSo 3 apples cost 13.\nThe answer is 13."]
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps({**base, "id": f"t{i}", "response": r,
                                        "correct": r.endswith("12.")}) + "\n"
                            for i, r in enumerate(lines)))
    priors = {}

    def recorded(ctx, prior, forcing):
        priors[ctx.trace.id] = mc_prior_credits(ctx, prior, forcing)
        return priors[ctx.trace.id]

    mc_prior_credits = mc.prior_credits
    monkeypatch.setattr(mc, "prior_credits", recorded)
    assert mc.SPEC.reads_siblings(McOptions(**AUTO, prior="rredcot"))
    assert not mc.SPEC.reads_siblings(McOptions(prior="rredcot"))  # fixed mode: no prior
    s = run_analysis(path, scorer, segment_options=SegmentOptions(segments="lines"), methods={
        "mc": McOptions(**AUTO, prior="rredcot"), "rredcot": RredcotOptions()})
    rows = pd.DataFrame(s.rows["rredcot"])
    assert NO_SIBLINGS_NOTE not in s.notes and set(priors) == {"t0", "t1", "t2"}
    for tid, g in rows.groupby("trace_id"):
        assert priors[tid] == pytest.approx(list(g["g_after"] - g["g_before"]))
