"""The seeded comparison of training runs: intervals, paired differences, steps to a target."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from studies.seed_runs import (
    first_step_reaching,
    format_interval,
    interval_cell,
    mean_interval,
    seed_run_summary,
    seed_summary_markdown,
)


def make_run(folder, rewards, before, after, seconds, rredcot_seconds=0.0):
    folder.mkdir(parents=True)
    with open(folder / "metrics.jsonl", "w") as fh:
        for step, r in enumerate(rewards, 1):
            fh.write(json.dumps({"step": step, "reward": r, "step_seconds": seconds,
                                 "rredcot_seconds": rredcot_seconds}) + "\n")
    (folder / "eval.json").write_text(json.dumps(
        {"before": {"accuracy": before}, "after": {"accuracy": after, "step": len(rewards)}}))
    return folder


def test_mean_interval_is_the_student_t_interval():
    x = [0.2, 0.5, 0.3, 0.6]
    mean, low, high = mean_interval(x)
    half = stats.t.ppf(0.975, 3) * np.std(x, ddof=1) / 2
    assert (mean, low, high) == pytest.approx((0.4, 0.4 - half, 0.4 + half))
    assert mean_interval([0.7])[0] == 0.7 and math.isnan(mean_interval([0.7])[1])
    assert all(math.isnan(v) for v in mean_interval([]))


def test_first_step_reaching_uses_the_trailing_moving_average():
    rows = [{"step": s, "reward": r} for s, r in enumerate([0, 1, 1, 1], 1)]
    assert first_step_reaching(rows, 0.5, window=2) == 2  # (0 + 1) / 2
    assert first_step_reaching(rows, 0.7, window=2) == 3
    assert first_step_reaching(rows, 1.1, window=2) is None


def test_seed_summary_pairs_seeds_and_reports_costs(tmp_path):
    groups = {"grpo": [], "rredcot": []}
    afters = {"grpo": [0.3, 0.4, 0.5], "rredcot": [0.4, 0.4, 0.7]}
    for mode in groups:
        for seed, after in enumerate(afters[mode]):
            rewards = [0.1 * seed] * 5 + [0.6] * 5
            groups[mode].append(make_run(tmp_path / f"{mode}-seed{seed}", rewards, 0.3, after,
                                         2.0 if mode == "grpo" else 3.0,
                                         1.0 if mode == "rredcot" else 0.0))
    table = seed_run_summary(groups, target=0.5, window=5).set_index("mode")
    r = table.loc["rredcot"]
    assert r["seeds"] == 3 and r["eval_after"] == pytest.approx(0.5)
    assert r["eval_gain"] == pytest.approx(0.2)
    diff = mean_interval([0.1, 0.0, 0.2])
    assert (r["paired_diff"], r["paired_diff_low"], r["paired_diff_high"]) == pytest.approx(diff)
    assert table.loc["grpo", "paired_diff"] == 0.0
    assert r["seconds_ratio"] == pytest.approx(1.5) and r["rredcot_seconds"] == 1.0
    expected = [first_step_reaching([{"step": s, "reward": v} for s, v in
                                     enumerate([0.1 * seed] * 5 + [0.6] * 5, 1)], 0.5, 5)
                for seed in range(3)]
    assert r["steps_to_target"] == pytest.approx(np.mean(expected)) and r["reached"] == 3
    text = seed_summary_markdown(table.reset_index(), target=0.5, steps=10)
    assert "| rredcot | 3 | 0.300 [0.300, 0.300] | 0.500 [" in text
    header, rule = text.splitlines()[:2]
    assert header.count("|") == rule.count("|")


def test_interval_cells_sign_differences_and_shares_only():
    """One formatter serves every seed-run table: plain values unsigned, differences and the
    oracle's share signed, a value without an interval alone, a missing one as a dash."""
    import pandas as pd

    row = {"online": 0.5, "online_low": 0.4, "online_high": 0.6,
           "online_vs_grpo": 0.012, "online_vs_grpo_low": -0.003, "online_vs_grpo_high": 0.027,
           "recovered": 0.45, "recovered_low": math.nan, "recovered_high": math.nan,
           "final": math.nan, "final_low": 0.1, "final_high": 0.2}
    assert interval_cell(row, "online") == "0.500 [0.400, 0.600]"
    assert interval_cell(row, "online_vs_grpo") == "+0.012 [-0.003, +0.027]"
    assert interval_cell(row, "recovered", 2) == "+0.45"
    assert interval_cell(row, "final") == "–"
    assert interval_cell(row, "final_vs_oracle") == "–"  # no such key
    assert format_interval(row, "online_vs_grpo") == "0.012 [-0.003, 0.027]"
    assert format_interval(pd.Series(row), "online", 2, signed=True) == "+0.50 [+0.40, +0.60]"
