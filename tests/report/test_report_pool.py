"""The rollout pool (Monte Carlo at n rollouts from the first n of a larger run), the bootstrap
over problems, and the string comparisons over several known paths."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cotcredit.data import grading
from cotcredit.methods.mc import McOptions
from cotcredit.pipeline.run import run_analysis
from cotcredit.report.baselines import departure_from_all, departures_from_traces
from cotcredit.report.bootstrap import Resampler, cluster_codes
from cotcredit.report.pool import mc_rows, pack_pool, pool_counts
from cotcredit.report.rollouts import counts_from_rollouts
from cotcredit.segmentation import SegmentOptions


def random_rollouts(seed: int = 0, traces: int = 5, rollouts: int = 32) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(traces):
        for k in range(int(rng.integers(2, 6))):
            p = rng.random()
            for j in range(rollouts):
                rows.append({"trace_id": f"t{t}", "boundary": k, "sample": j,
                             "correct": bool(rng.random() < p),
                             "truncated": bool(rng.random() < 0.1),
                             "n_tokens": int(rng.integers(1, 40))})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n", [None, 1, 4, 16, 32])
@pytest.mark.parametrize("drop", [False, True])
def test_pool_counts_equal_the_counts_of_the_first_n_rollouts(n, drop):
    ro = random_rollouts()
    pool = pack_pool(ro, drop_truncated=drop)
    assert pool["bits"].dtype == np.uint64 and len(pool) == len(ro.groupby(["trace_id",
                                                                            "boundary"]))
    direct = counts_from_rollouts(ro if n is None else ro.loc[ro["sample"] < n], drop)
    got = pool_counts(pool, n)
    key = ["trace_id", "boundary"]
    if drop:  # a boundary whose rollouts were all dropped: no row there, a total of 0 here
        assert (got.loc[got["total"] == 0, "correct"] == 0).all()
        got = got.loc[got["total"] > 0]
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True),
                                  direct.sort_values(key).reset_index(drop=True),
                                  check_dtype=False)
    assert (pool["tokens"].sum(), pool["tokens_4"].sum()) == (
        ro["n_tokens"].sum(), ro.loc[ro["sample"] < 4, "n_tokens"].sum())
    with pytest.raises(ValueError, match="fewer than 64"):
        pool_counts(pool, 64)


def test_mc_rows_are_value_differences_at_the_segment_boundaries():
    ro = random_rollouts(1)
    counts = pool_counts(pack_pool(ro), 8)
    k_of = counts.groupby("trace_id")["boundary"].max()
    seg = pd.DataFrame([{"trace_id": t, "segment": s, "char_start": s, "char_end": s + 1}
                        for t, k in k_of.items() for s in range(k)])
    seg = pd.concat([seg, pd.DataFrame([{"trace_id": "orphan", "segment": 0, "char_start": 0,
                                         "char_end": 1}])])
    rows = mc_rows(seg, counts, "mc-8")
    assert "orphan" not in set(rows["trace_id"])  # no counts: no rows
    value = counts.set_index(["trace_id", "boundary"])
    for r in rows.itertuples():
        before = value.loc[(r.trace_id, r.segment)]
        after = value.loc[(r.trace_id, r.segment + 1)]
        assert r.value_before == before["correct"] / before["total"]
        assert r.score == pytest.approx(after["correct"] / after["total"] - r.value_before)
        assert (r.n_rollouts, r.method) == (8, "mc-8")


def test_the_first_n_rollouts_of_a_larger_run_are_a_run_with_n(scorer, traces_file,
                                                                tmp_path, monkeypatch):
    """Rollout j of a boundary is drawn from its own stream: a run with 2 rollouts draws
    exactly the first 2 of a run with 5, and the pool gives its values."""
    monkeypatch.setattr(grading, "grade_completion", lambda text, ref, **kw: grading.GradeResult(
        answer=text, correct=len(text) % 2 == 0))
    runs = {}
    for n in (2, 5):
        path = tmp_path / f"ro{n}.parquet"
        s = run_analysis(traces_file, scorer, methods={"mc": McOptions(
            rollouts=n, max_new_tokens=5, seed=3, save_rollouts=str(path))},
            segment_options=SegmentOptions(segments=3))
        runs[n] = (pd.DataFrame(s.rows["mc"]), pd.read_parquet(path))
    small, large = runs[2][1], runs[5][1]
    key = ["trace_id", "boundary", "sample"]
    first = large.loc[large["sample"] < 2].sort_values(key).reset_index(drop=True)
    small = small.sort_values(key).reset_index(drop=True)
    for col in ("text", "n_tokens", "correct", "truncated"):
        assert first[col].tolist() == small[col].tolist(), col
    rows = mc_rows(runs[2][0], pool_counts(pack_pool(large), 2), "mc")
    mine = runs[2][0].sort_values(["trace_id", "segment"]).reset_index(drop=True)
    rows = rows.sort_values(["trace_id", "segment"]).reset_index(drop=True)
    np.testing.assert_allclose(rows["value_after"], mine["value_after"])
    np.testing.assert_allclose(rows["score"], mine["value_after"] - mine["value_before"])


# ----------------------------------------------------------------------------- the bootstrap


def test_resampling_problems_draws_all_samples_of_a_problem_together():
    clusters = np.repeat(np.arange(6), 4)
    boot = Resampler(24, 300, 0, clusters[::-1])  # codes in any order
    counts = boot.counts()
    for c in range(6):
        own = counts[:, clusters[::-1] == c]
        assert (own == own[:, :1]).all()
    assert (counts.sum(axis=1) == 24).all()  # 6 problems drawn, 4 samples each
    # one cluster per trace is the trace bootstrap, draw for draw
    np.testing.assert_array_equal(Resampler(24, 50, 1, np.arange(24)).counts(),
                                  Resampler(24, 50, 1).counts())


def test_intervals_by_problem_are_wider_where_samples_resemble_each_other():
    rng = np.random.default_rng(0)
    problem = rng.normal(size=40)
    values = np.repeat(problem, 8) + rng.normal(scale=0.1, size=320)
    clusters = np.repeat(np.arange(40), 8)
    lo_t, hi_t = Resampler(320, 2000, 0).intervals(values)
    lo_p, hi_p = Resampler(320, 2000, 0, clusters).intervals(values)
    assert (hi_p - lo_p)[0] > 2 * (hi_t - lo_t)[0]
    # the standard error of a mean of 40 independent problems, about 0.16: a 95% width near 0.6
    assert 0.4 < (hi_p - lo_p)[0] < 0.9


def test_cluster_codes_map_problems_and_leave_unknown_traces_alone():
    codes = cluster_codes(["a", "b", "c", "d"], {"a": "p1", "b": "p1", "c": "p2"})
    assert codes[0] == codes[1] and len(set(codes)) == 3
    assert cluster_codes(["a"], None) is None


# ----------------------------------------------------------------------------- known paths


def test_departure_from_every_path_is_the_latest():
    ref_a = "a = 1\nb = 2\nc = 3\nThe answer is 3."
    ref_b = "a = 1\nx = 2\nc = 3\nThe answer is 3."
    mine = "a = 1\nb = 2\nz = 9\nThe answer is 9."
    assert departure_from_all(mine, [ref_a]) == mine.index("z")
    assert departure_from_all(mine, [ref_b]) == mine.index("b")
    assert departure_from_all(mine, [ref_a, ref_b]) == mine.index("z")
    assert departure_from_all(ref_b, [ref_a, ref_b]) == -1  # follows one path throughout


def test_departures_over_solutions_and_right_siblings():
    sol = "a = 1\nb = 2\nThe answer is 2."
    alt = "b = 2\na = 1\nThe answer is 2."
    sib = "c = 0\nb = 2\nThe answer is 2."
    records = [
        {"id": "x", "problem_id": "p", "response": "c = 0\nd = 5\nThe answer is 5.",
         "solution": sol, "solutions": [sol, alt], "correct": False},
        {"id": "s", "problem_id": "p", "response": sib, "solution": sol, "correct": True},
        {"id": "w", "problem_id": "p", "response": "c = 0\nd = 5\nThe answer is 7.",
         "solution": sol, "correct": False},
        {"id": "y", "problem_id": "q", "response": sib, "solution": sol, "correct": True},
    ]
    one = departures_from_traces(records)
    listed = departures_from_traces(records, "solutions")
    siblings = departures_from_traces(records, "siblings")
    x = records[0]["response"]
    assert one["x"] == listed["x"] == 0  # leaves both listed solutions at its first line
    assert siblings["x"] == x.index("d")  # follows the right sibling one line further
    assert siblings["s"] == 0  # its own response is no sibling; the wrong one is none either
    assert siblings["y"] == 0  # another problem's right response is no sibling
    with pytest.raises(ValueError):
        departures_from_traces(records, "everything")
