"""The agreement ceiling and rollout equivalence on simulated Monte Carlo with known values."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from score_tables import trace_rows

from cotcredit.report.rollouts import (
    counts_from_mc,
    counts_from_rollouts,
    rollout_analysis,
    worth,
)
from cotcredit.report.stats import correlate

N_ROLLOUTS = 24
K = 4


def simulated(n_traces: int = 300, seed: int = 0, n_method: int = 4):
    """True values V_0..V_K per trace; Monte Carlo rows from 24 rollouts per boundary; the
    rollouts themselves; a method equal to the true credits and one equal to an independent
    MC with ``n_method`` rollouts per boundary."""
    rng = np.random.default_rng(seed)
    rows, rollouts = [], []
    for t in range(n_traces):
        v = np.clip(0.5 + np.cumsum(rng.normal(0, 0.2, K + 1)), 0.02, 0.98)
        correct = rng.random((K + 1, N_ROLLOUTS)) < v[:, None]
        c = correct.sum(axis=1)
        v_hat = c / N_ROLLOUTS
        small = rng.binomial(n_method, v) / n_method
        tid = f"t{t:03d}"
        part = trace_rows(tid, {"mc": list(np.diff(v_hat)), "truth": list(np.diff(v)),
                                "mcn": list(np.diff(small))})
        for r in part:
            if r["method"] == "mc":
                s = r["segment"]
                r.update(value_before=v_hat[s], value_after=v_hat[s + 1],
                         n_rollouts=N_ROLLOUTS, n_correct=int(c[s + 1]))
        rows += part
        for b in range(K + 1):
            for j in range(N_ROLLOUTS):
                rollouts.append({"trace_id": tid, "boundary": b, "sample": j,
                                 "correct": bool(correct[b, j]), "truncated": False})
    return pd.DataFrame(rows), pd.DataFrame(rollouts)


@pytest.fixture(scope="module")
def analysis():
    scores, rollouts = simulated(600)
    counts = counts_from_rollouts(rollouts)
    ro = rollout_analysis(scores, counts, ["truth", "mcn"], splits=10, n_boot=300, seed=1)
    return scores, rollouts, counts, ro


def test_counts_from_the_mc_table_equal_those_from_the_rollouts(analysis):
    scores, _, counts, _ = analysis
    from_mc = counts_from_mc(scores.loc[scores["method"] == "mc"])
    key = ["trace_id", "boundary"]
    a = counts.sort_values(key).reset_index(drop=True)
    b = from_mc.sort_values(key).reset_index(drop=True)
    np.testing.assert_array_equal(a[["correct", "total"]].to_numpy(),
                                  b[["correct", "total"]].to_numpy())


def test_a_method_equal_to_mc_n_is_worth_n_rollouts(analysis):
    _, _, _, ro = analysis
    assert ro.held_out == 12 and ro.total == 24 and list(ro.curve["rollouts"]) == list(range(1, 13))
    curve = ro.curve["agreement"].to_numpy()
    assert curve[-1] > curve[0]  # more rollouts agree better with held-out ones
    row = ro.equivalence.set_index("method").loc["mcn"]
    assert row["rollouts"] == pytest.approx(4, abs=1.5)
    assert row["rollouts_low"] <= 4 <= row["rollouts_high"]


def test_a_method_equal_to_the_true_values_reaches_the_ceiling(analysis):
    scores, _, _, ro = analysis
    ceiling = ro.ceiling.set_index("rollouts")
    truth = ro.equivalence.set_index("method").loc["truth"]
    # Against the 12 held-out rollouts: the truth's agreement is the ceiling for that N.
    half = ceiling.loc[12]
    assert abs(truth["agreement"] - half["ceiling"]) < 0.05
    assert half["ci_low"] - 0.03 <= truth["agreement"] <= half["ci_high"] + 0.03
    # Against all 24 rollouts (the agreement table's reference), the same.
    corr = correlate(scores.loc[scores["method"].isin(["mc", "truth"])], n_boot=200)
    full = corr.value("truth", "mc", "mean_spearman")
    assert abs(full - ceiling.loc[24, "ceiling"]) < 0.05
    # The truth is worth more rollouts than the held-out half can show.
    assert truth["rollouts"] == np.inf or truth["rollouts"] > 10


def test_worth_interpolates_and_flags_the_ends():
    curve = np.array([0.1, 0.2, 0.4, 0.5])
    assert worth(curve, 0.3) == pytest.approx(2.5)
    assert worth(curve, 0.1) == 1.0
    assert worth(curve, 0.05) == 0.0
    assert worth(curve, 0.6) == np.inf
    assert worth(np.array([0.1, 0.3, 0.25, 0.5]), 0.28) == pytest.approx(1.9)
