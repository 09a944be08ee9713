"""The benchmark's metrics and leaderboard on synthetic tables, against direct computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from bench_tables import per_trace, synthetic_regime
from scipy import stats

from cotcredit.bench.metrics import regime_metrics, target_offsets


def direct_hits(scores: pd.DataFrame, method: str, offsets: pd.Series) -> dict[str, float]:
    """Per trace of ``offsets``: 1/m when the offset's segment is among the m lowest."""
    out = {}
    for tid, g in per_trace(scores, method).items():
        if tid not in offsets.index:
            continue
        off = int(offsets[tid])
        x = g["score"].to_numpy()
        seg = np.flatnonzero((g["char_start"] <= off).to_numpy() & (off < g["char_end"]).to_numpy())
        if not len(seg):
            continue
        low = np.flatnonzero(x == x.min())
        out[tid] = float(seg[0] in low) / len(low)
    return out


# ----------------------------------------------------------------------------- the metrics


def test_trace_sets_follow_the_labels():
    _, labels, _ = synthetic_regime(25)
    sets = target_offsets(labels)
    lab = labels.set_index("trace_id")
    assert set(sets["localization"].index) == set(
        lab.index[(lab.error_char >= 0) & ~lab.correct])
    assert set(sets["blame_wrong_step"].index) == set(
        lab.index[(lab.error_char >= 0) & lab.correct])
    assert set(sets["blame_departure"].index) == set(lab.index[lab.valid_departure])
    assert (sets["blame_departure"] == lab.loc[sets["blame_departure"].index,
                                                 "departure_char"]).all()


@pytest.fixture(scope="module")
def computed():
    scores, labels, deps = synthetic_regime(80, seed=2)
    return scores, labels, deps, regime_metrics(scores, labels, departures=deps, n_boot=300)


def test_locating_rates_equal_direct_hit_counts(computed):
    scores, labels, deps, m = computed
    sets = target_offsets(labels)
    from cotcredit.report.credit import value_credit

    credited = value_credit(scores, "differences")
    for metric, offsets in sets.items():
        for method in ("oracle", "noisy", "rredcot", "mc"):
            hits = direct_hits(credited, method, offsets)
            assert m.value(metric, method, "top1") == pytest.approx(np.mean(list(hits.values())))
        ks = [len(g) for t, g in per_trace(scores, "mc").items() if t in offsets.index]
        assert m.value(metric, "noisy", "chance_top1") == pytest.approx(np.mean(1 / np.array(ks)))
    assert m.value("localization", "oracle", "top1") == 1.0
    # refdiff blames every departing segment: the error in wrong traces, the valid path too
    assert m.value("localization", "refdiff", "top1") == 1.0
    assert m.value("blame_departure", "refdiff", "top1") == 1.0
    assert m.value("blame_wrong_step", "refdiff", "top1") == 1.0
    # the paired difference is the mean per-trace difference
    a = direct_hits(credited, "oracle", sets["localization"])
    b = direct_hits(credited, "noisy", sets["localization"])
    diff = np.mean([a[t] - b[t] for t in a])
    assert m.value("localization", "oracle", "top1_minus_noisy") == pytest.approx(diff)
    row = m.table.set_index(["metric", "method", "statistic"]).loc[
        ("localization", "oracle", "top1_minus_noisy")]
    assert row["ci_low"] <= diff <= row["ci_high"] and row["n"] == len(a)


def test_text_free_baselines_fit_the_first_error_positions(computed):
    scores, labels, _, m = computed
    offsets = target_offsets(labels)["localization"]
    mc = per_trace(scores, "mc")
    where = {}
    for tid, off in offsets.items():
        g = mc[tid]
        where[tid] = (len(g), int(np.flatnonzero((g["char_start"] <= off).to_numpy()
                                                 & (off < g["char_end"]).to_numpy())[0]))
    hits = []
    for tid, (k, e) in where.items():
        # minus the leave-one-out rate of first errors at each index among length-k traces
        others = [s for t, (kk, s) in where.items() if t != tid and kk == k]
        rate = np.array([np.mean([s == i for s in others]) for i in range(k)])
        low = np.flatnonzero(rate == rate.max())
        hits.append(float(e in low) / len(low))
    assert m.value("localization", "position-length", "top1") == pytest.approx(np.mean(hits))


def test_mc_tracking_equals_direct_spearman_means(computed):
    scores, labels, _, m = computed
    from cotcredit.report.credit import value_credit

    credited = value_credit(scores, "differences")
    mc, rr, noisy = (per_trace(credited, x) for x in ("mc", "rredcot", "noisy"))
    rho_r, rho_n = [], []
    for tid, g in mc.items():
        y = g["score"].to_numpy()
        if len(y) < 3 or np.ptp(y) == 0:
            continue
        rho_r.append(stats.spearmanr(rr[tid]["score"], y).statistic)
        rho_n.append(stats.spearmanr(noisy[tid]["score"], y).statistic)
    assert m.value("mc_tracking", "rredcot", "spearman") == pytest.approx(np.mean(rho_r))
    assert m.value("mc_tracking", "rredcot", "spearman_minus_noisy") == pytest.approx(
        np.mean(np.subtract(rho_r, rho_n)))
    assert m.value("mc_tracking", "noisy", "spearman_minus_rredcot") == pytest.approx(
        -np.mean(np.subtract(rho_r, rho_n)))
    assert np.isnan(m.value("mc_tracking", "mc", "spearman"))
    for name in ("refdiff", "entropy", "position", "position-length", "random", "oracle"):
        assert np.isfinite(m.value("mc_tracking", name, "spearman"))


def test_ceiling_and_costs(computed):
    scores, labels, _, _ = computed
    from cotcredit.report.rollouts import counts_from_mc

    counts = counts_from_mc(scores.loc[scores["method"] == "mc"])
    m = regime_metrics(scores, labels, counts=counts, n_boot=100, splits=4)
    ceiling = m.value("mc_tracking", "mc", "ceiling")
    assert 0 < ceiling <= 1
    assert m.value("mc_tracking", "rredcot", "rollouts") >= 0
    assert m.value("cost", "mc", "generated_tokens") == 2000.0
    assert m.value("cost", "rredcot", "seconds") == 0.5
    assert m.value("cost", "refdiff", "forward_tokens") == 0.0 or "refdiff" not in m.baselines
    assert "refdiff" not in m.baselines and "left out: no reference solutions" in m.notes[0]


def test_counts_name_each_set(computed):
    _, labels, _, m = computed
    sets = target_offsets(labels)
    for metric in ("localization", "blame_departure", "blame_wrong_step"):
        assert m.counts[metric]["erroneous"] == len(sets[metric])


# ----------------------------------------------------------------------------- the leaderboard


def test_leaderboard_pairs_each_row_with_the_best_baseline_reading_no_more(tmp_path):
    from cotcredit.bench.leaderboard import leaderboard, write_leaderboard
    from cotcredit.bench.metrics import BASELINES
    from cotcredit.bench.pairing import best_baselines, eligible

    parts = []
    for regime, seed in (("one", 3), ("two", 4)):
        for split, offset in (("dev", 0), ("test", 10)):
            scores, labels, deps = synthetic_regime(50, seed=seed + offset)
            m = regime_metrics(scores, labels, departures=deps, n_boot=200)
            parts.append(m.table.assign(regime=regime, split=split))
    results = pd.concat(parts, ignore_index=True)
    reads = {"oracle": "siblings", "noisy": "none", "rredcot": "solution"}
    best = best_baselines(results, BASELINES)
    present = ["refdiff", "entropy", "position", "position-length", "random"]
    for regime in ("one", "two"):
        dev = results.loc[(results.regime == regime) & (results.split == "dev")
                          & (results.metric == "localization") & (results.statistic == "top1")]
        for klass in ("none", "solution"):
            pool = dev.loc[dev.method.isin(eligible(klass, BASELINES))]
            top = set(pool.loc[pool["value"] == pool["value"].max(), "method"])
            got = best.loc[(best.regime == regime) & (best.metric == "localization")
                           & (best.reads == klass), "baseline"].iloc[0]
            assert got == [b for b in BASELINES if b in top][0]
            assert klass == "solution" or got != "refdiff"  # never one that reads more
    board = leaderboard(results, ["oracle", "noisy", "rredcot"], BASELINES, reads=reads)
    assert list(board.loc[board.regime == "one", "method"]) == [
        "oracle", "noisy", "rredcot", "mc", *present]
    test = results.loc[(results.regime == "two") & (results.split == "test")].set_index(
        ["metric", "method", "statistic"])
    for method, klass in reads.items():
        row = board.loc[(board.regime == "two") & (board.method == method)].iloc[0]
        assert row["reads"] == klass and row["loc_best"] in eligible(klass, BASELINES)
        cell = test.loc[("localization", method, f"top1_minus_{row['loc_best']}")]
        assert row["loc_vs_best"] == pytest.approx(cell["value"])
        assert row["loc_vs_best_n"] == cell["n"]
        assert row["blame_departure_best"] == row["loc_best"]
    row = board.loc[(board.regime == "two") & (board.method == "rredcot")].iloc[0]
    assert row["loc_top1"] == test.loc[("localization", "rredcot", "top1"), "value"]
    assert row["blame_departure_chance"] == test.loc[("blame_departure", "rredcot",
                                                      "chance_top1"), "value"]
    assert board.loc[board.kind == "baseline", "loc_best"].eq("").all()  # baselines: unpaired
    paths = write_leaderboard(board, results, tmp_path / "board", reads=reads,
                              baselines=BASELINES)
    text = paths["markdown"].read_text()
    assert "## one" in text and "rredcot [solution]" in text and "refdiff (baseline)" in text
    assert "bootstrap over problems" in text
    back = pd.read_csv(paths["csv"])
    assert len(back) == len(board)
    comp = pd.read_csv(paths["comparisons_csv"])
    noisy = comp.loc[(comp.regime == "one") & (comp.method == "noisy")
                     & (comp.metric == "localization")]
    assert {"refdiff", "entropy"} <= set(noisy.versus)  # the fixed pairings, whatever it reads
    assert noisy.loc[noisy.role == "best", "versus"].iloc[0] != "refdiff"
