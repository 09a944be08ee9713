"""The compact split tables: what the metrics read, written small and read back exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from bench_tables import synthetic_regime

from cotcredit.bench.compact import read_split, write_split
from cotcredit.bench.splits import SplitData, split_metrics
from cotcredit.report.credit import value_credit
from cotcredit.report.pool import pack_pool


def synthetic_split(seed: int = 0) -> SplitData:
    """A made-up split: its credits float32 already (what the compact form keeps), a pool of
    32 rollouts per boundary, two rows with equal credits (stored once)."""
    scores, labels, deps = synthetic_regime(40, seed=seed)
    rng = np.random.default_rng(seed)
    labels = labels.assign(problem=[f"p{i // 4}" for i in range(len(labels))])
    seg = scores.drop_duplicates(["trace_id", "segment"])[
        ["trace_id", "segment", "char_start", "char_end", "mean_entropy"]].reset_index(drop=True)
    credited = value_credit(scores.loc[scores["method"] != "mc"], "differences")
    credits = credited[["trace_id", "segment", "method", "score"]].copy()
    credits["score"] = credits["score"].astype("float32").astype("float64")
    twin = credits.loc[credits["method"] == "noisy"].assign(method="noisy-twin")
    credits = pd.concat([credits, twin], ignore_index=True)
    costs = scores.groupby(["trace_id", "method"], sort=False)[
        ["cost_seconds", "cost_forward_tokens", "cost_generated_tokens"]].first().reset_index()
    costs["cost_seconds"] = costs["cost_seconds"].astype("float32").astype("float64")
    rows = []
    for tid, k in seg.groupby("trace_id").size().items():
        for b in range(k + 1):
            p = rng.random()
            rows += [{"trace_id": tid, "boundary": b, "sample": j, "correct": rng.random() < p,
                      "truncated": False, "n_tokens": int(rng.integers(1, 9))}
                     for j in range(32)]
    seg["mean_entropy"] = seg["mean_entropy"].astype("float32").astype("float64")
    return SplitData(seg, credits, costs, labels, {"refdiff": deps}, pack_pool(pd.DataFrame(rows)),
                     pd.Series(100.0, index=pd.Index(seg["trace_id"].unique(), name="trace_id")))


def test_a_split_reads_back_exactly_and_gives_the_same_metrics(tmp_path):
    data = synthetic_split()
    paths = write_split(data, tmp_path / "one" / "test")
    back = read_split(tmp_path / "one" / "test")
    assert back.row_labels() == data.row_labels()
    first = split_metrics(data, n_boot=100, splits=2).table
    again = split_metrics(back, n_boot=100, splits=2).table
    pd.testing.assert_frame_equal(first, again)
    assert "score:noisy-twin" not in pd.read_parquet(paths["segments"]).columns  # stored once
    assert sum(p.stat().st_size for p in paths.values()) < 60_000


def test_a_development_split_keeps_what_the_choice_of_baselines_reads(tmp_path):
    data = synthetic_split(1)
    write_split(data, tmp_path / "dev", credits=False)
    back = read_split(tmp_path / "dev")
    assert back.row_labels() == ["mc", "mc-4", "mc-8", "mc-16"] and back.credits.empty
    m = split_metrics(back, n_boot=50, splits=2)
    full = split_metrics(data, n_boot=50, splits=2)
    for b in ("refdiff", "entropy", "position", "random"):
        assert m.value("localization", b, "top1") == pytest.approx(
            full.value("localization", b, "top1"))
    assert m.value("mc_tracking", "position", "spearman") == pytest.approx(
        full.value("mc_tracking", "position", "spearman"))
