"""Monte Carlo replayed on saved rollouts equals a live run: the same rows and the same cost,
for fixed N and for `--rollouts auto` with every first round and prior."""

from __future__ import annotations

import pandas as pd
import pytest

from cotcredit.methods.mc import McOptions, Rollout
from cotcredit.methods.mc_replay import SavedTrace, prompt_len_of_fixed_run, replay
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.pipeline.run import run_analysis
from cotcredit.segmentation import SegmentOptions

POOL = 16  # rollouts saved per boundary: the cap of budget 4
COMMON = dict(max_new_tokens=6, seed=0)
SEGMENTS = SegmentOptions(segments=5)
ROW_COLUMNS = ["score", "value_before", "value_after", "n_rollouts", "n_correct", "n_truncated",
               "interpolated", "score_half_a", "score_half_b", "trace_rollouts"]


def live(scorer, traces_file, tmp_path, name, options, extra=None):
    methods = {"mc": options, **(extra or {})}
    s = run_analysis(traces_file, scorer, methods=methods, segment_options=SEGMENTS)
    return {label: pd.DataFrame(rows) for label, rows in s.rows.items()}


@pytest.fixture
def pool(scorer, traces_file, tmp_path, graded):
    """Every trace's saved rollouts (a fixed run of POOL) as `SavedTrace`s, and the segments."""
    path = tmp_path / "pool.parquet"
    tables = live(scorer, traces_file, tmp_path, "pool",
                  McOptions(rollouts=POOL, save_rollouts=str(path), **COMMON))
    mc, saved = tables["mc"], pd.read_parquet(path)
    out = {}
    for tid, g in saved.groupby("trace_id"):
        tokens = g.groupby("boundary")["token"].first().sort_index().tolist()
        rollouts = {int(k): [Rollout(int(r.boundary), int(r.token), int(r.sample), r.text,
                                     int(r.n_tokens), r.answer, bool(r.correct),
                                     bool(r.truncated))
                             for r in gk.sort_values("sample").itertuples()]
                    for k, gk in g.groupby("boundary")}
        cost = mc.loc[mc["trace_id"] == tid].iloc[0]
        prompt_len = prompt_len_of_fixed_run(int(cost["cost_forward_tokens"]),
                                             int(cost["trace_rollouts"]), tokens[-1])
        out[tid] = SavedTrace(tid, tokens, rollouts, prompt_len)
    return out, tables["segments"]


def check(tables, pool, options, prior=None, prior_tokens=None):
    mc = tables["mc"]
    saved, _ = pool
    for tid, rows in mc.groupby("trace_id"):
        rows = rows.sort_values("segment").reset_index(drop=True)
        cr = None if prior is None else prior[tid]
        spent = 0 if prior_tokens is None else prior_tokens[tid]
        got = replay(saved[tid], options, cr, spent)
        want = pd.DataFrame(got.rows)
        pd.testing.assert_frame_equal(rows[ROW_COLUMNS], want[ROW_COLUMNS], check_dtype=False)
        assert rows["cost_forward_tokens"].iloc[0] == got.forward_tokens
        assert rows["cost_generated_tokens"].iloc[0] == got.generated_tokens


def test_the_fixed_run_is_its_own_replay(pool, scorer, traces_file, tmp_path, graded):
    options = McOptions(rollouts=POOL, **COMMON)
    check(live(scorer, traces_file, tmp_path, "again", options), pool, options)


def test_fewer_rollouts_replay_as_the_first_ones(pool, scorer, traces_file, tmp_path, graded):
    options = McOptions(rollouts=5, **COMMON)
    check(live(scorer, traces_file, tmp_path, "five", options), pool, options)


AUTO = dict(rollouts="auto", rollout_budget=4, round_rollouts=2, precision=0.3, **COMMON)


@pytest.mark.parametrize("first_round,decision", [("all", "interval"), ("ends", "interval"),
                                                   ("ends", "point")])
def test_adaptive_runs_replay_exactly(pool, scorer, traces_file, tmp_path, graded, first_round,
                                      decision):
    options = McOptions(**AUTO, first_round=first_round, decision=decision)
    tables = live(scorer, traces_file, tmp_path, first_round, options)
    check(tables, pool, options)
    if first_round == "ends":  # some boundaries were never sampled, and are interpolated
        assert tables["mc"]["interpolated"].any()


@pytest.mark.parametrize("prior", ["paths", "entropy", "rhat"])
def test_adaptive_runs_with_a_prior_replay_exactly(pool, scorer, traces_file, tmp_path, graded,
                                                   prior):
    options = McOptions(**AUTO, first_round="ends", prior=prior)
    rhat = RredcotOptions(value="rhat")
    tables = live(scorer, traces_file, tmp_path, prior, options, {"rredcot": rhat})
    _, segments = pool
    per_trace = segments.groupby("trace_id")
    if prior == "rhat":  # R̂'s credits and cost, from a run of RREDCoT with --value rhat
        r = tables["rredcot"].sort_values(["trace_id", "segment"])
        credits = {t: (g["g_after"] - g["g_before"]).tolist() for t, g in r.groupby("trace_id")}
        spent = r.groupby("trace_id")["cost_forward_tokens"].first().to_dict()
    elif prior == "entropy":  # minus the mean entropy; the trace pass it reads
        credits = {t: (-g.sort_values("segment")["mean_entropy"]).tolist() for t, g in per_trace}
        spent = per_trace["cost_forward_tokens"].first().to_dict()
    else:  # the string comparison: read from the traces by the live run, text only
        from cotcredit.data.traces import iter_traces
        from cotcredit.methods.mc_prior import paths_credits

        spans = {t: list(zip(g["char_start"], g["char_end"], strict=True)) for t, g in per_trace}
        credits = {t.id: paths_credits(t, spans[t.id]) for t in iter_traces(traces_file)}
        spent = None
        assert any(c is not None for c in credits.values())
    check(tables, pool, options, credits, spent)


def test_replay_refuses_what_it_cannot_replay(pool):
    saved, _ = pool
    trace = next(iter(saved.values()))
    with pytest.raises(ValueError, match="saved"):
        replay(trace, McOptions(rollouts=POOL + 1, **COMMON))
    with pytest.raises(ValueError, match="horizon"):
        replay(trace, McOptions(rollouts=2, horizon=3, **COMMON))
