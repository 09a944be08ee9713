"""First-error localization against direct computations, and its input checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli
from score_tables import trace_rows, write_table

from cotcredit.errors import UserError
from cotcredit.report.localization import error_offsets, localize


def traces_with_errors(n: int = 40, seed: int = 0) -> pd.DataFrame:
    """Two methods on traces of 4-6 segments; most traces have an error offset inside one
    segment, some none (-1), one unknown (null), one after the reasoning."""
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n):
        k = int(rng.integers(4, 7))
        good = rng.normal(size=k)
        part = trace_rows(f"t{t:02d}", {"mc": list(good), "loo": list(rng.normal(size=k)),
                                         "flat": [1.0] * k})
        ends = sorted({r["char_end"] for r in part})
        starts = sorted({r["char_start"] for r in part})
        if t % 10 == 0:
            offset = -1
        elif t % 10 == 1:
            offset = None
        elif t == 2:
            offset = ends[-1] + 3  # in the final answer
        else:
            seg = int(rng.integers(0, k))
            offset = int(rng.integers(starts[seg], ends[seg]))
            # make mc usually find it: lowest credit on the erroneous segment
            if rng.random() < 0.7:
                for r in part:
                    if r["method"] == "mc" and r["segment"] == seg:
                        r["score"] = -10.0
        for r in part:
            r["error_char"] = offset
            r["outcome"] = 1.0 if offset == -1 else 0.0
        rows += part
    df = pd.DataFrame(rows)
    df["error_char"] = df["error_char"].astype("Int64")
    return df


def naive(df: pd.DataFrame, method: str) -> tuple[list[float], list[float], list[float]]:
    top1, ranks, chance = [], [], []
    for _, g in df.groupby("trace_id"):
        e = g["error_char"].iloc[0]
        if pd.isna(e) or e < 0:
            continue
        own = g.loc[g["method"] == method].sort_values("segment")
        inside = own.loc[(own["char_start"] <= e) & (e < own["char_end"])]
        if inside.empty:
            continue
        x = own["score"].to_numpy()
        j = int(np.flatnonzero(own["segment"].to_numpy() == inside["segment"].iloc[0])[0])
        lows = np.flatnonzero(x == x.min())
        top1.append(1 / len(lows) if j in lows else 0.0)
        ranks.append(pd.Series(x).rank(method="average").iloc[j])
        chance.append(1 / len(x))
    return top1, ranks, chance


def test_localization_equals_naive_counts_and_chance():
    df = traces_with_errors()
    offsets = error_offsets(df)
    loc = localize(df, offsets, ["mc", "loo", "flat"], baselines=["flat"], n_boot=300)
    for method in ("mc", "loo", "flat"):
        top1, ranks, chance = naive(df, method)
        assert loc.value(method, "top1") == pytest.approx(np.mean(top1), abs=1e-12)
        assert loc.value(method, "mean_rank") == pytest.approx(np.mean(ranks), abs=1e-12)
        assert loc.value(method, "chance_top1") == pytest.approx(np.mean(chance), abs=1e-12)
        row = loc.table.set_index(["method", "statistic"]).loc[(method, "top1")]
        assert row["n"] == len(top1) and row["ci_low"] <= row["value"] <= row["ci_high"]
    # A method that orders nothing is at chance exactly; mc, built to find errors, is above it.
    assert loc.value("flat", "top1") == pytest.approx(loc.value("flat", "chance_top1"))
    assert loc.value("flat", "top1_minus_chance") == pytest.approx(0, abs=1e-12)
    lo = loc.table.set_index(["method", "statistic"]).loc[("mc", "top1_minus_flat"), "ci_low"]
    assert lo > 0
    assert loc.counts == {"no_error": 4, "unknown": 4, "after_reasoning": 1,
                          "outside_segments": 0, "erroneous": 31}


def test_bad_offsets_are_one_line_errors():
    df = traces_with_errors(6)
    clash = df.copy()
    clash.loc[(clash["trace_id"] == "t03") & (clash["method"] == "loo"), "error_char"] = 1
    with pytest.raises(UserError, match=r"trace 't03': field 'error_char' is 1 but \d+") as e:
        error_offsets(clash, sources={"loo": "attr.parquet", "mc": "mc.parquet"})
    assert "\n" not in str(e.value) and "attr.parquet" in str(e.value)
    frac = df.astype({"error_char": "float64"})
    frac.loc[frac["trace_id"] == "t04", "error_char"] = 2.5
    with pytest.raises(UserError, match="expected an integer"):
        error_offsets(frac)
    low = df.copy()
    low.loc[low["trace_id"] == "t04", "error_char"] = -3
    with pytest.raises(UserError, match="'t04'.*-3"):
        error_offsets(low)
    assert error_offsets(df.drop(columns=["error_char"])) is None


def test_compare_writes_the_localization_table(tmp_path, capsys):
    df = traces_with_errors(20).rename(columns={"error_char": "first_error"})
    write_table(df.loc[df["method"] == "mc"], tmp_path / "mc.parquet")
    write_table(df.loc[df["method"] == "loo"], tmp_path / "attr.parquet")
    code, _, err = run_cli(["compare", "--methods", "mc,loo", "--dir", tmp_path, "--bootstrap",
                            "50", "--error-column", "first_error", "--baselines",
                            "position,uniform"], capsys)
    assert code == 0, err
    table = pd.read_parquet(tmp_path / "report" / "localization.parquet")
    assert {"mc", "loo", "position", "uniform"} <= set(table["method"])
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## First-error localization" in md
    bad = df.astype({"first_error": "float64"})
    bad.loc[bad["trace_id"] == "t03", "first_error"] = 2.5
    write_table(bad.loc[bad["method"] == "mc"], tmp_path / "mc.parquet")
    code, _, err = run_cli(["compare", "--methods", "mc,loo", "--dir", tmp_path, "--bootstrap",
                            "50", "--error-column", "first_error"], capsys)
    assert code == 2 and "mc.parquet: trace 't03': field 'first_error'" in err
    assert "Traceback" not in err
