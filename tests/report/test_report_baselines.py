"""Credit definitions, text-free baselines and paired differences, against direct computations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from bench_tables import per_trace, synthetic_regime
from scipy import stats
from score_tables import trace_rows

from cotcredit.data import Trace
from cotcredit.errors import UserError
from cotcredit.report.baselines import (
    baseline_scores,
    departures_from_traces,
    entropy_baseline,
    first_departure,
    position_baseline,
    position_length_baseline,
    random_baseline,
    refdiff_baseline,
)
from cotcredit.report.credit import value_credit
from cotcredit.report.stats import Resampler, correlate, mean_interval


def value_tables(n_traces: int = 30, seed: int = 0, ks=(4,)) -> pd.DataFrame:
    """rredcot rows (g columns, rewards with g_0 and the terminal correction as score), mc rows
    (value columns, bare differences as score) and loo rows, on one segmentation."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_traces):
        k = int(ks[t % len(ks)])
        v = np.clip(np.cumsum(rng.normal(0, 0.25, k + 1)) + 0.5, 0, 1)
        g = np.clip(v + rng.normal(0, 0.1, k + 1), 0, 1)
        zeta = float(rng.random() < v[-1])
        reward = np.diff(g)
        reward[0] += g[0]
        reward[-1] += zeta - g[-1]
        tid = f"t{t:02d}"
        part = trace_rows(tid, {"rredcot": list(reward), "mc": list(np.diff(v)),
                                "loo": list(rng.normal(size=k))})
        for r in part:
            s = r["segment"]
            if r["method"] == "rredcot":
                r.update(g_before=g[s], g_after=g[s + 1], outcome=zeta)
            elif r["method"] == "mc":
                r.update(value_before=v[s], value_after=v[s + 1])
        rows += part
    return pd.DataFrame(rows)


def rows_of(df: pd.DataFrame, method: str, tid: str) -> pd.DataFrame:
    return df.loc[(df["method"] == method) & (df["trace_id"] == tid)].sort_values("segment")


def test_credit_definitions_equal_direct_formulas():
    df = value_tables(6)
    diff = value_credit(df, "differences")
    ret = value_credit(df, "return")
    same = value_credit(df, "score")
    pd.testing.assert_frame_equal(same, df)
    for tid in df["trace_id"].unique():
        r = rows_of(df, "rredcot", tid)
        g = np.r_[r["g_before"].iloc[0], r["g_after"].to_numpy()]
        np.testing.assert_allclose(rows_of(diff, "rredcot", tid)["score"], np.diff(g))
        # return: the rewards as rredcot writes them (g_0 first, ζ − g_K last), summing to ζ
        np.testing.assert_allclose(rows_of(ret, "rredcot", tid)["score"], r["score"])
        m = rows_of(df, "mc", tid)
        v = np.r_[m["value_before"].iloc[0], m["value_after"].to_numpy()]
        np.testing.assert_allclose(rows_of(diff, "mc", tid)["score"], np.diff(v))
        expect = np.diff(v)
        expect[0] += v[0]
        expect[-1] += r["outcome"].iloc[0] - v[-1]
        got = rows_of(ret, "mc", tid)["score"].to_numpy()
        np.testing.assert_allclose(got, expect)
        assert got.sum() == pytest.approx(r["outcome"].iloc[0])
        for frame in (diff, ret):  # attributions are never redefined
            np.testing.assert_array_equal(rows_of(frame, "loo", tid)["score"],
                                          rows_of(df, "loo", tid)["score"])
    with pytest.raises(UserError, match="--credit"):
        value_credit(df, "bogus")
    with pytest.raises(UserError, match="no outcome"):
        value_credit(df.drop(columns=["outcome"]), "return")


def naive_position(df: pd.DataFrame, reference: str, tid: str) -> np.ndarray:
    """The position baseline of one trace, by loops: leave-one-trace-out mean reference credit
    per relative-position bin among traces with the same outcome."""
    ks = df.loc[df["method"] == reference].groupby("trace_id").size()
    n_bins = int(ks.mode().max())
    outcome = df.dropna(subset=["outcome"]).groupby("trace_id")["outcome"].first()

    def bins(k: int) -> list[int]:
        return [min(n_bins - 1, int((s + 0.5) * n_bins // k)) for s in range(k)]

    mine = bins(int(ks[tid]))
    out = []
    for b in mine:
        same, anyo = [], []
        for other, k in ks.items():
            if other == tid:
                continue
            credit = rows_of(df, reference, other)["score"].to_numpy()
            for s, bo in enumerate(bins(int(k))):
                if bo == b:
                    anyo.append(credit[s])
                    if outcome[other] == outcome[tid]:
                        same.append(credit[s])
        out.append(np.mean(same) if same else np.mean(anyo) if anyo else 0.0)
    return np.asarray(out)


def test_position_baseline_equals_leave_one_trace_out_means_with_binning():
    df = value_credit(value_tables(24, seed=1, ks=(4, 4, 6, 3)), "differences")
    base = position_baseline(df, "mc")
    for tid in df["trace_id"].unique():
        got = base.loc[base["trace_id"] == tid].sort_values("segment")["score"].to_numpy()
        np.testing.assert_allclose(got, naive_position(df, "mc", tid), atol=1e-12)
    with pytest.raises(UserError, match="baseline's name"):
        baseline_scores(df.assign(method=df["method"].replace("loo", "position")),
                        ["position"], "mc")
    _, added, notes = baseline_scores(df, ["position"], "shapley")
    assert added == [] and "omitted" in notes[0]


def test_a_position_only_method_equals_the_position_baseline():
    df = value_credit(value_tables(30, seed=2), "differences")
    copy = position_baseline(df, "mc").assign(method="posonly")
    scores, added, _ = baseline_scores(pd.concat([df, copy], ignore_index=True),
                                       ["position", "uniform"], "mc")
    corr = correlate(scores, n_boot=200, baselines=added)
    assert corr.methods[-2:] == ["position", "uniform"] and corr.baselines == added
    for stat in ("mean_spearman", "mean_pearson", "top1_agreement"):
        assert corr.value("posonly", "mc", stat) == pytest.approx(
            corr.value("position", "mc", stat), abs=1e-12)
    p = corr.paired.set_index(["method", "versus", "statistic"])
    row = p.loc[("posonly", "position", "mean_spearman")]
    assert row["difference"] == 0 and row["ci_low"] == 0 and row["ci_high"] == 0


def test_paired_differences_equal_naive_per_trace_means():
    df = value_credit(value_tables(40, seed=3), "differences")
    scores, added, _ = baseline_scores(df, ["position", "uniform"], "mc")
    corr = correlate(scores, n_boot=500, baselines=added)
    per = corr.per_trace()
    for a, b in (("rredcot", "loo"), ("rredcot", "position"), ("loo", "uniform")):
        diffs = []
        for tid in df["trace_id"].unique():
            def rho(m: str, tid: str = tid) -> float:
                x = rows_of(scores, m, tid)["score"].to_numpy()
                y = rows_of(scores, "mc", tid)["score"].to_numpy()
                if np.ptp(y) == 0:
                    return np.nan
                return 0.0 if np.ptp(x) == 0 else stats.spearmanr(x, y).statistic
            diffs.append(rho(a) - rho(b))
        diffs = np.asarray(diffs)
        row = corr.paired.set_index(["method", "versus", "statistic"]).loc[(a, b, "mean_spearman")]
        assert row["difference"] == pytest.approx(np.nanmean(diffs), abs=1e-12)
        assert row["n"] == np.isfinite(diffs).sum()
        assert row["ci_low"] <= row["difference"] <= row["ci_high"]
        assert 0 <= row["p_boot"] <= 1
    # The uniform baseline orders nothing: correlation 0 on every trace, top-1 at chance 1/K.
    uni = per.loc[(per["method_a"] == "mc") & (per["method_b"] == "uniform")]
    assert (uni["value"] == 0).all() and len(uni)
    assert corr.value("uniform", "mc", "top1_agreement") == pytest.approx(0.25)
    # The means reported in the table are the same as the naive ones.
    mean = corr.value("rredcot", "mc", "mean_spearman")
    naive = np.nanmean([stats.spearmanr(rows_of(scores, "rredcot", t)["score"],
                                        rows_of(scores, "mc", t)["score"]).statistic
                        for t in df["trace_id"].unique()
                        if np.ptp(rows_of(scores, "mc", t)["score"]) > 0])
    assert mean == pytest.approx(naive, abs=1e-12)


def test_mean_interval_equals_a_naive_bootstrap_and_depends_on_its_values_alone():
    rng = np.random.default_rng(5)
    values = rng.normal(0.3, 1.0, 60)
    values[[3, 17, 40]] = np.nan  # undefined on three traces: left out of every mean
    mean, low, high = mean_interval(values, n_boot=400, seed=7)
    assert mean == pytest.approx(np.nanmean(values), abs=1e-12)
    # Naive: each resample's mean over the traces it drew (with multiplicity) that are defined.
    counts = Resampler(len(values), 400, 7).counts()
    defined = np.isfinite(values)
    naive = [np.repeat(values[defined], c[defined]).mean() for c in counts]
    assert (low, high) == pytest.approx(tuple(np.percentile(naive, [2.5, 97.5])), abs=1e-12)
    assert low < mean < high
    # The same call gives the same interval whatever was drawn before it (no shared stream).
    mean_interval(rng.normal(size=60), n_boot=400, seed=7)
    assert mean_interval(values, n_boot=400, seed=7) == (mean, low, high)
    assert np.isnan(mean_interval([np.nan, np.nan])[0])


def test_compare_checks_report_options_before_running_anything(tmp_path):
    import cotcredit
    from cotcredit.report.compare import ReportOptions

    missing = tmp_path / "no-such-traces.jsonl"  # never read: the options fail first
    for bad, match in ((ReportOptions(credit="values"), "--credit"),
                       (ReportOptions(baselines="position,oracle"), "--baselines"),
                       (ReportOptions(splits=0), "--splits")):
        with pytest.raises(UserError, match=match):
            cotcredit.compare(missing, methods="rredcot,mc", report=bad)


# ----------------------------------------------------------------------------- cheap baselines


def test_first_departure_aligns_non_blank_normalised_reasoning_lines():
    ref = "a = 1\nb = 2\nThe answer is 2."
    assert first_departure(ref, ref) == -1
    assert first_departure("a  =  1 \n\nb = 2\n The answer is 2.", ref) == -1
    assert first_departure("a = 1\nb = 2\nThe answer is 3.", ref) == -1  # answers not compared
    assert first_departure("a = 1\nc = 3\nThe answer is 3.", ref) == len("a = 1\n")
    assert first_departure("x\n", ref) == 0
    short = "a = 1\nThe answer is 1."
    assert first_departure(short, ref) == len("a = 1\n")  # runs out first: its reasoning end
    longer = "a = 1\nb = 2\nc = 3\nThe answer is 3."
    assert first_departure(longer, ref) == len("a = 1\nb = 2\n")
    traces = [Trace(id="a", prompt="p", response="a = 1\nc = 3", answer="2", solution=ref),
              Trace(id="b", prompt="p", response="r", answer="2")]
    deps = departures_from_traces(traces)
    assert deps.to_dict() == {"a": 6}


def test_refdiff_entropy_random_rows_equal_direct_values():
    scores, labels, deps = synthetic_regime(20)
    ref = refdiff_baseline(scores, deps.drop("t001"))
    for tid, g in per_trace(scores, "oracle").items():
        mine = ref.loc[ref["trace_id"] == tid].sort_values("segment")["score"].to_numpy()
        if tid == "t001":
            assert np.isnan(mine).all()
            continue
        d = deps[tid]
        expect = np.where((g["char_start"] <= d) & (d < g["char_end"]), -1.0, 0.0)
        np.testing.assert_array_equal(mine, expect)
    ent = entropy_baseline(scores)
    for tid, g in per_trace(scores, "mc").items():
        mine = ent.loc[ent["trace_id"] == tid].sort_values("segment")["score"].to_numpy()
        np.testing.assert_array_equal(mine, -g["mean_entropy"].to_numpy())
    with pytest.raises(UserError, match="mean_entropy"):
        entropy_baseline(scores.drop(columns="mean_entropy"))
    rnd = random_baseline(scores, seed=3)
    alone = random_baseline(scores.loc[scores["trace_id"] == "t005"], seed=3)
    np.testing.assert_array_equal(rnd.loc[rnd["trace_id"] == "t005", "score"], alone["score"])
    other = random_baseline(scores, seed=4)
    assert not np.allclose(rnd["score"], other["score"])


def naive_position_length(scores: pd.DataFrame, reference: str, tid: str) -> np.ndarray:
    ref = per_trace(scores, reference)
    outcome = scores.dropna(subset=["outcome"]).groupby("trace_id")["outcome"].first()
    k = len(ref[tid])
    out = []
    for s in range(k):
        same = [g["score"].iloc[s] for o, g in ref.items()
                if o != tid and len(g) == k and outcome[o] == outcome[tid]]
        anyo = [g["score"].iloc[s] for o, g in ref.items() if o != tid and len(g) == k]
        out.append(np.mean(same) if same else np.mean(anyo) if anyo else np.nan)
    return np.asarray(out)


def test_position_length_equals_leave_one_trace_out_means_per_length():
    scores, _, _ = synthetic_regime(40, seed=1, ks=(3, 4, 4, 5, 7))
    scores["outcome"] = scores["trace_id"].map(
        scores.dropna(subset=["outcome"]).groupby("trace_id")["outcome"].first())
    base = position_length_baseline(scores, "mc")
    for tid in scores["trace_id"].unique():
        got = base.loc[base["trace_id"] == tid].sort_values("segment")["score"].to_numpy()
        expect = naive_position_length(scores, "mc", tid)
        known = np.isfinite(expect)
        np.testing.assert_allclose(got[known], expect[known], atol=1e-12)
    # the only trace with 7 segments falls back to the relative-position baseline
    assert np.isfinite(base["score"]).all()


def test_compare_reports_every_cheap_baseline_as_a_row(tmp_path):
    from cotcredit.report.compare import analyse

    scores, labels, deps = synthetic_regime(40, seed=5)
    scores = scores.assign(outcome=scores["trace_id"].map(
        labels.set_index("trace_id")["correct"].astype(float)))
    result = analyse(scores, baselines="position,position-length,entropy,random", n_boot=100)
    assert result.correlations.baselines == ["position", "position-length", "entropy", "random"]
    loc = result.localization
    offsets = labels.set_index("trace_id")["error_char"]
    for name, rows in (("entropy", entropy_baseline(scores)),
                       ("random", random_baseline(scores, 0))):
        hits = []
        for tid, g in rows.groupby("trace_id"):
            off = offsets[tid]
            if off < 0:
                continue
            g = g.sort_values("segment")
            inside = ((g["char_start"] <= off) & (off < g["char_end"])).to_numpy()
            low = (g["score"] == g["score"].min()).to_numpy()
            hits.append(float(low[inside][0]) / low.sum())
        assert loc.value(name, "top1") == pytest.approx(np.mean(hits))
    with pytest.raises(UserError, match="refdiff: needs the traces"):
        analyse(scores, baselines="refdiff", n_boot=10)


def test_compare_refdiff_and_entropy_from_the_traces_file(tmp_path, capsys):
    import json

    from conftest import run_cli

    scores, labels, _ = synthetic_regime(10, seed=6)  # a report per trace: kept small
    scores = scores.loc[scores["method"].isin(["rredcot", "mc"])]
    table = tmp_path / "scores.parquet"
    scores.to_parquet(table)
    lines = []
    for tid, g in scores.loc[scores["method"] == "mc"].groupby("trace_id"):
        response = "".join(g.sort_values("segment")["text"]) + "The answer is 1."
        solution = "".join(f"step {i}\n" for i in range(len(g))) + "The answer is 1."
        lines.append({"id": tid, "prompt": "p", "response": response, "answer": "1",
                      "solution": solution})
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "report"
    code, _, err = run_cli(["compare", "--scores", table, "--baselines", "refdiff,entropy",
                            "--explorer-traces", traces, "--bootstrap", "50", "-o", out,
                            "--no-explorer", "-q"], capsys)
    assert code == 0, err
    loc = pd.read_parquet(out / "localization.parquet").set_index(["method", "statistic"])
    offsets = labels.set_index("trace_id")["error_char"]
    direct = {"refdiff": [], "entropy": []}
    for x in lines:
        off = offsets[x["id"]]
        if off < 0:
            continue
        dep = first_departure(x["response"], x["solution"])
        g = scores.loc[(scores["method"] == "mc") & (scores["trace_id"] == x["id"])]
        g = g.sort_values("segment")
        inside = ((g["char_start"] <= off) & (off < g["char_end"])).to_numpy()
        for name, score in (("refdiff", np.where((g["char_start"] <= dep) & (dep < g["char_end"]),
                                                  -1.0, 0.0)),
                            ("entropy", -g["mean_entropy"].to_numpy())):
            low = score == score.min()
            direct[name].append(float(low[inside][0]) / low.sum())
    for name, hits in direct.items():
        assert loc.loc[(name, "top1"), "value"] == pytest.approx(np.mean(hits))
    assert loc.loc[("refdiff", "top1"), "value"] == 1.0  # every error departs from the reference
    code, _, err = run_cli(["compare", "--scores", table, "--baselines", "refdiff", "-o", out,
                            "-q"], capsys)
    assert code == 2 and "refdiff: needs the traces" in err and len(err.strip().splitlines()) == 1
