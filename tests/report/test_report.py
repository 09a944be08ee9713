"""Tests of cotcredit.report (correlations, figures, report files) and cotcredit.exports."""

from __future__ import annotations

import base64
import json
import math
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import not_installed
from scipy import stats
from score_tables import random_scores, trace_rows

from cotcredit.errors import UserError
from cotcredit.pipeline.export import export_scores
from cotcredit.report import (
    CORRELATION_COLUMNS,
    correlate,
    load_scores,
    strip_filename,
    summary_table,
    write_report,
)

CHROMIUM = "/usr/bin/chromium"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def agg(table: pd.DataFrame, a: str, b: str, statistic: str) -> pd.Series:
    hit = table.loc[
        (table["trace_id"] == "all")
        & (table["method_a"] == a)
        & (table["method_b"] == b)
        & (table["statistic"] == statistic)
    ]
    assert len(hit) == 1, (a, b, statistic)
    return hit.iloc[0]


@pytest.fixture(scope="module")
def three_methods() -> pd.DataFrame:
    return random_scores(25, {"mc": 0.0, "rredcot": 0.7, "loo": 1.5}, seed=1)


@pytest.fixture(scope="module")
def three_corr(three_methods: pd.DataFrame):
    return correlate(three_methods, n_boot=500, seed=0)


# ------------------------------------------------------------------------------- correlations


def test_per_trace_pooled_and_mean_equal_scipy(three_methods, three_corr):
    table = three_corr.table
    assert list(table.columns) == list(CORRELATION_COLUMNS)
    assert three_corr.methods == ["rredcot", "mc", "loo"]
    funcs = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}
    for a, b in [("rredcot", "mc"), ("rredcot", "loo"), ("mc", "loo")]:
        xs, ys = [], []
        for tid, g in three_methods.groupby("trace_id"):
            x = g.loc[g["method"] == a].sort_values("segment")["score"].to_numpy()
            y = g.loc[g["method"] == b].sort_values("segment")["score"].to_numpy()
            xs.append(x)
            ys.append(y)
            for name, func in funcs.items():
                row = table.loc[
                    (table["trace_id"] == tid)
                    & (table["method_a"] == a)
                    & (table["method_b"] == b)
                    & (table["statistic"] == name)
                ]
                assert len(row) == 1
                assert row["value"].iloc[0] == pytest.approx(func(x, y).statistic, abs=1e-12)
                assert row["n"].iloc[0] == len(x)
        x_all, y_all = np.concatenate(xs), np.concatenate(ys)
        for name, func in funcs.items():
            pooled = agg(table, a, b, f"pooled_{name}")
            assert pooled["value"] == pytest.approx(func(x_all, y_all).statistic, abs=1e-12)
            assert pooled["n"] == len(x_all)
            per_trace = table.loc[
                (table["trace_id"] != "all")
                & (table["method_a"] == a)
                & (table["method_b"] == b)
                & (table["statistic"] == name),
                "value",
            ]
            mean = agg(table, a, b, f"mean_{name}")
            assert mean["value"] == pytest.approx(per_trace.mean(), abs=1e-12)
            assert mean["n"] == 25
    # The heatmap matrix is the mean per-trace Spearman, symmetric, 1 on the diagonal.
    m = three_corr.matrix
    assert (
        m.loc["mc", "loo"]
        == m.loc["loo", "mc"]
        == agg(table, "mc", "loo", "mean_spearman")["value"]
    )
    assert all(m.loc[k, k] == 1.0 for k in m.index)


def test_statistics_equal_scipy_with_ties_and_long_traces():
    rng = np.random.default_rng(7)
    rows = []
    for tid, n in (("tied", 15), ("long", 300)):  # 300 > the pairwise-Kendall limit
        rows += trace_rows(
            tid,
            {"mc": list(rng.integers(0, 4, n)), "loo": list(rng.integers(0, 3, n) * 0.5)},
        )
    corr = correlate(pd.DataFrame(rows), n_boot=10)
    df = pd.DataFrame(rows)
    funcs = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}
    for tid in ("tied", "long"):
        x = df.loc[(df["trace_id"] == tid) & (df["method"] == "mc"), "score"].to_numpy()
        y = df.loc[(df["trace_id"] == tid) & (df["method"] == "loo"), "score"].to_numpy()
        for name, func in funcs.items():
            row = corr.table.loc[
                (corr.table["trace_id"] == tid) & (corr.table["statistic"] == name)
            ]
            assert row["value"].iloc[0] == pytest.approx(func(x, y).statistic, abs=1e-12)


def test_bootstrap_ci_contains_mean_and_narrows_with_more_traces():
    methods = {"mc": 0.0, "loo": 1.0}
    small = correlate(random_scores(8, methods, seed=2), n_boot=1000, seed=0)
    large = correlate(random_scores(200, methods, seed=3), n_boot=1000, seed=0)
    widths = []
    for corr, n in ((small, 8), (large, 200)):
        for s in ("pearson", "spearman", "kendall"):
            row = agg(corr.table, "mc", "loo", f"mean_{s}")
            assert row["ci_low"] <= row["value"] <= row["ci_high"]
            assert row["n"] == n
            widths.append((n, s, row["ci_high"] - row["ci_low"]))
    for s in ("pearson", "spearman", "kendall"):
        w_small = next(w for n, name, w in widths if n == 8 and name == s)
        w_large = next(w for n, name, w in widths if n == 200 and name == s)
        assert w_large < w_small
    # Same seed, same intervals.
    again = correlate(random_scores(8, methods, seed=2), n_boot=1000, seed=0)
    pd.testing.assert_frame_equal(again.table, small.table)


def test_short_constant_nan_traces_are_counted_not_averaged():
    rows = []
    rows += trace_rows("good1", {"mc": [0, 1, 2, 3], "loo": [0, 2, 1, 3]})
    rows += trace_rows("good2", {"mc": [3, 1, 2, 0], "loo": [2, 1, 3, 0]})
    rows += trace_rows("short", {"mc": [0, 1], "loo": [1, 0]})
    rows += trace_rows("const", {"mc": [0, 1, 2, 3], "loo": [1, 1, 1, 1]})
    rows += trace_rows("nan", {"mc": [0, 1, 2, 3], "loo": [0, math.nan, 1, 2]})
    rows += trace_rows("only_mc", {"mc": [0, 1, 2, 3]})
    corr = correlate(pd.DataFrame(rows), n_boot=200)
    skipped = corr.skipped.set_index("reason")["n_traces"]
    assert skipped["fewer than 3 segments"] == 1
    assert skipped["constant scores"] == 1
    assert skipped["NaN or infinite score"] == 1
    assert skipped["scored by only one of the two methods"] == 1
    assert set(corr.skipped["method_a"]) == {"mc"} and set(corr.skipped["method_b"]) == {"loo"}
    aggregates = corr.aggregates()
    assert not aggregates["value"].isna().any()
    assert agg(corr.table, "mc", "loo", "mean_spearman")["n"] == 2
    assert agg(corr.table, "mc", "loo", "pooled_pearson")["n"] == 8
    per_trace = set(corr.per_trace()["trace_id"])
    assert per_trace == {"good1", "good2"}


def test_no_usable_trace_gives_no_aggregate_and_min_segments_is_checked():
    rows = trace_rows("c1", {"mc": [1, 1, 1], "loo": [0, 1, 2]})
    corr = correlate(pd.DataFrame(rows))
    assert corr.aggregates().empty
    assert math.isnan(corr.matrix.loc["mc", "loo"])
    assert corr.skipped["n_traces"].tolist() == [1]
    with pytest.raises(UserError, match="min_segments"):
        correlate(pd.DataFrame(rows), min_segments=1)


def test_top1_agreement_and_ties():
    rows = []
    rows += trace_rows("a", {"mc": [0, 5, 1, 2], "loo": [0, 9, 1, 2]})  # agree (segment 1)
    rows += trace_rows("b", {"mc": [7, 1, 1, 2], "loo": [3, 1, 0, 2]})  # agree (segment 0)
    rows += trace_rows("c", {"mc": [0, 1, 2, 6], "loo": [0, 1, 2, 5]})  # agree (segment 3)
    rows += trace_rows("d", {"mc": [0, 8, 1, 2], "loo": [4, 1, 2, 3]})  # disagree
    rows += trace_rows("e", {"mc": [0, 3, 3, 1], "loo": [1, 2, 3, 4]})  # tie in the reference
    corr = correlate(pd.DataFrame(rows), n_boot=300, reference="mc")
    assert corr.reference == "mc"
    top1 = agg(corr.table, "loo", "mc", "top1_agreement")
    assert top1["value"] == pytest.approx(0.75)
    assert top1["n"] == 4
    assert top1["ci_low"] <= 0.75 <= top1["ci_high"]
    ties = corr.skipped.loc[corr.skipped["reason"].str.startswith("tied maximum")]
    assert ties["n_traces"].tolist() == [1]
    # Absent reference: no reference rows, no error.
    other = correlate(pd.DataFrame(rows), reference="shapley")
    assert other.reference is None
    assert not other.table["statistic"].str.contains("top1|early|late").any()


def test_position_analysis_equals_scipy_on_halves(three_methods, three_corr):
    for method in ("rredcot", "loo"):
        early_x, early_y, late_x, late_y = [], [], [], []
        for _, g in three_methods.groupby("trace_id"):
            x = g.loc[g["method"] == method].sort_values("segment")["score"].to_numpy()
            y = g.loc[g["method"] == "mc"].sort_values("segment")["score"].to_numpy()
            early = np.arange(len(x)) / len(x) < 0.5
            early_x.append(x[early])
            early_y.append(y[early])
            late_x.append(x[~early])
            late_y.append(y[~early])
        for half, xs, ys in (("early", early_x, early_y), ("late", late_x, late_y)):
            x, y = np.concatenate(xs), np.concatenate(ys)
            row = agg(three_corr.table, method, "mc", f"{half}_spearman")
            assert row["value"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
            assert row["n"] == len(x)
            row = agg(three_corr.table, method, "mc", f"{half}_pearson")
            assert row["value"] == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)


# ------------------------------------------------------------------------------- load_scores


def write_methods(tmp_path: Path, df: pd.DataFrame, groups: dict[str, list[str]]) -> list[Path]:
    paths = []
    for name, methods in groups.items():
        path = tmp_path / f"{name}.parquet"
        df.loc[df["method"].isin(methods)].to_parquet(path, index=False)
        paths.append(path)
    return paths


def test_load_scores_concatenates(tmp_path, three_methods):
    paths = write_methods(tmp_path, three_methods, {"a": ["mc"], "b": ["rredcot", "loo"]})
    loaded = load_scores(paths)
    assert len(loaded) == len(three_methods)
    assert set(loaded["method"]) == {"mc", "rredcot", "loo"}


def test_load_scores_holds_each_text_once_and_reads_only_asked_columns(tmp_path, three_methods):
    """Texts come from the first table holding a trace and are shared by every method's rows
    (one categorical); with `columns`, a table's other columns are not read."""
    df = three_methods.assign(extra=1.0, wide="x")
    df.loc[df["segment"] == 0, "text"] = "same text"  # one text at many segments
    paths = write_methods(tmp_path, df.loc[df["trace_id"] != "t1"],
                          {"a": ["mc"], "b": ["rredcot", "loo"]})
    only_b = tmp_path / "c.parquet"  # a trace only the last table holds
    df.loc[(df["trace_id"] == "t1") & (df["method"] == "mc")].assign(method="x").to_parquet(
        only_b, index=False)
    loaded = load_scores([*paths, only_b], columns=["extra", "absent"])
    assert isinstance(loaded["text"].dtype, pd.CategoricalDtype)
    assert len(loaded["text"].cat.categories) == df["text"].nunique()
    texts = df.drop_duplicates(["trace_id", "segment"])[["trace_id", "segment", "text"]]
    merged = loaded.merge(texts, on=["trace_id", "segment"], suffixes=("", "_table"))
    assert len(merged) == len(loaded) == len(df) - 2 * (df["trace_id"] == "t1").sum() // 3
    assert (merged["text"].astype(str) == merged["text_table"]).all()
    assert "extra" in loaded.columns and "wide" not in loaded.columns
    assert "wide" in load_scores(paths).columns  # all columns without `columns`


def test_load_scores_refuses_duplicate_method(tmp_path, three_methods):
    paths = write_methods(tmp_path, three_methods, {"a": ["mc", "loo"], "b": ["loo"]})
    with pytest.raises(UserError, match="'loo'") as info:
        load_scores(paths)
    message = str(info.value)
    assert "a.parquet" in message and "b.parquet" in message and "\n" not in message


def test_load_scores_refuses_segmentation_mismatch(tmp_path, three_methods):
    df = three_methods.copy()
    target = (df["method"] == "loo") & (df["trace_id"] == "t3") & (df["segment"] == 1)
    df.loc[target, "char_end"] += 1
    paths = write_methods(tmp_path, df, {"mc": ["mc"], "loo": ["loo"]})
    with pytest.raises(UserError) as info:
        load_scores(paths)
    message = str(info.value)
    assert "'t3'" in message and "mc.parquet" in message and "loo.parquet" in message
    assert "segment 1" in message and "\n" not in message

    df = three_methods.loc[
        ~(
            (three_methods["method"] == "loo")
            & (three_methods["trace_id"] == "t5")
            & (three_methods["segment"] == 0)
        )
    ]
    paths = write_methods(tmp_path, df, {"mc": ["mc"], "loo": ["loo"]})
    with pytest.raises(UserError, match=r"trace 't5'.*segments") as info:
        load_scores(paths)
    assert "\n" not in str(info.value)


def test_load_scores_reports_bad_files(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_scores([tmp_path / "missing.parquet"])
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(UserError, match="Parquet"):
        load_scores([bad])
    incomplete = tmp_path / "incomplete.parquet"
    pd.DataFrame({"trace_id": ["a"], "score": [1.0]}).to_parquet(incomplete)
    with pytest.raises(UserError, match="missing column"):
        load_scores([incomplete])


# ------------------------------------------------------------------------------- report files


def report_scores() -> pd.DataFrame:
    """Four methods; trace ids that need sanitizing; one text with '$' and a long word."""
    df = random_scores(6, {"mc": 0.0, "rredcot": 0.5, "loo": 1.0, "gradient-ig": 2.0}, seed=4)
    df["trace_id"] = df["trace_id"].map(lambda t: f"set/{t} ünï")
    odd = df["trace_id"] == df["trace_id"].iloc[0]
    df.loc[odd & (df["segment"] == 0), "text"] = "Cost is $5 and $6.\n"
    df.loc[odd & (df["segment"] == 1), "text"] = "x" * 250 + "\n"
    for _, idx in df.loc[odd].groupby("method").groups.items():
        lengths = df.loc[idx].sort_values("segment")["text"].str.len()
        ends = lengths.cumsum()
        df.loc[lengths.index, "char_end"] = ends
        df.loc[lengths.index, "char_start"] = ends - lengths
    return df


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory) -> tuple[Path, object, pd.DataFrame]:
    scores = report_scores()
    corr = correlate(scores, n_boot=200)
    out = tmp_path_factory.mktemp("report")
    files = write_report(
        scores, corr, out, title="Test <report>", notes={"model": "tiny", "n": 3}, max_strips=3
    )
    return out, files, scores


def test_write_report_files(report_dir):
    out, files, scores = report_dir
    names = {p.name for p in files.all()}
    assert {
        "correlations.parquet",
        "report.md",
        "report.html",
        "report.tex",
        "heatmap.png",
        "heatmap.pdf",
        "scatter_matrix.png",
        "scatter_matrix.pdf",
    } <= names
    assert files.costs is None  # no cost columns in these tables
    assert len(files.strips) == 3
    first_ids = list(pd.unique(scores["trace_id"]))[:3]
    assert [p.name for p in files.strips] == [strip_filename(t) for t in first_ids]
    for path in files.all():
        assert path.exists() and path.stat().st_size > 0
        assert path.parent == out
    for path in [files.heatmap, files.scatter, *files.strips]:
        assert path.read_bytes().startswith(PNG_MAGIC)
        assert re.fullmatch(r"[A-Za-z0-9._-]+", path.name)
        assert path.with_suffix(".pdf").read_bytes().startswith(b"%PDF-")
    table = pd.read_parquet(files.correlations)
    assert list(table.columns) == list(CORRELATION_COLUMNS)
    assert len(table) > 0
    md = files.markdown.read_text()
    for path in [files.heatmap, files.scatter, *files.strips]:
        assert f"]({path.name})" in md
    assert "Top-1 agreement with mc" in md and "Skipped traces" in md


def test_report_html_is_self_contained(report_dir):
    _, files, _ = report_dir
    text = files.html.read_text()
    assert 'src="http' not in text and "src='http" not in text
    assert 'href="http' not in text and "<link" not in text and "@import" not in text
    assert "url(" not in text
    assert "<script" not in text
    assert "&lt;report&gt;" in text  # the title is escaped
    srcs = re.findall(r"<img\b[^>]*\bsrc=\"([^\"]*)\"", text)
    assert len(srcs) == 2 + len(files.strips)
    for src in srcs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(PNG_MAGIC)


def test_summary_table_has_one_row_per_pair(report_dir):
    from rich.console import Console

    _, _, scores = report_dir
    corr = correlate(scores, n_boot=50)
    table = summary_table(corr)
    assert table.row_count == 6
    console = Console(width=200, record=True)
    console.print(table)
    assert "gradient-ig" in console.export_text()


def test_single_method_report(tmp_path):
    scores = random_scores(2, {"mc": 0.0}, seed=5)
    corr = correlate(scores, n_boot=10)
    assert corr.table.empty
    files = write_report(scores, corr, tmp_path / "r", max_strips=1)
    assert files.heatmap is None and files.scatter is None and len(files.strips) == 1
    assert "nothing to correlate" in files.markdown.read_text()


@pytest.mark.subprocess
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=not_installed(CHROMIUM, "chromium"))
def test_report_html_renders_in_headless_chromium(report_dir, tmp_path):
    _, files, _ = report_dir
    probe = files.html.read_text().replace(
        "</body>",
        "<script>window.addEventListener('load', () => {"
        " const imgs = Array.from(document.images);"
        " const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;"
        " document.title = 'IMGCHECK ' + ok + '/' + imgs.length; });</script></body>",
    )
    probe_path = tmp_path / "probe.html"
    probe_path.write_text(probe)
    common = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND",  # any external fetch would fail
    ]
    dom = subprocess.run(
        [
            *common,
            f"--user-data-dir={tmp_path / 'profile1'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe_path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r"IMGCHECK (\d+)/(\d+)", dom.stdout)
    assert match, f"no result from chromium: {dom.stderr[-2000:]}"
    ok, total = int(match.group(1)), int(match.group(2))
    assert total == 2 + len(files.strips) and ok == total

    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            *common,
            f"--user-data-dir={tmp_path / 'profile2'}",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            files.html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 20_000
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)
    assert pixels.shape[0] == 2000 and pixels.shape[1] == 1200
    assert pixels[..., :3].std() > 0.05  # not a blank page


# ------------------------------------------------------------------------------- export


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_export_processbench_round_trip(tmp_path):
    rows = []
    rows += trace_rows("p1", {"mc": [0.5, -0.2, 0.0, 0.9]}, ["A. ", "B. ", "C. ", "D."])
    rows += trace_rows("p2", {"mc": [-1.0, 2.0, 0.3]}, ["x\n", "y\n", "z"])
    rows += trace_rows("p3", {"mc": [1.0, math.nan, 0.3]})
    df = pd.DataFrame(rows).sample(frac=1, random_state=0)  # segment order must be restored
    prompts = {"p1": "What is A?", "p2": "Solve y.", "p3": "Never exported."}
    out = tmp_path / "sub" / "prm.jsonl"
    result = export_scores(df, prompts, out, format="processbench", threshold=0.25)
    assert result.n_written == 2 and result.skipped_nan == ["p3"] and result.method == "mc"
    records = read_jsonl(out)
    assert [set(r) for r in records] == [
        {"id", "problem", "steps", "label", "final_answer_correct"}] * 2
    by_prompt = {r["problem"]: r for r in records}
    assert by_prompt["What is A?"]["steps"] == ["A.", "B.", "C.", "D."]
    assert by_prompt["What is A?"]["label"] == 1  # first score not above 0.25
    assert by_prompt["Solve y."]["steps"] == ["x", "y", "z"]
    assert by_prompt["Solve y."]["label"] == 0


def test_export_jsonl_round_trip_and_method_choice(tmp_path):
    rows = trace_rows("q1", {"mc": [0.1, math.nan, 0.3], "loo": [1.0, 2.0, 3.0]})
    df = pd.DataFrame(rows)
    df["r_hat"] = np.where(df["method"] == "mc", 0.5, np.nan)
    with pytest.raises(UserError, match="--method"):
        export_scores(df, {"q1": "Q"}, tmp_path / "x.jsonl", format="jsonl")
    with pytest.raises(UserError, match="--method"):
        export_scores(df, {"q1": "Q"}, tmp_path / "x.jsonl", method="shapley")
    with pytest.raises(UserError, match="format"):
        export_scores(df, {"q1": "Q"}, tmp_path / "x.jsonl", format="csv", method="mc")
    with pytest.raises(UserError, match="no prompt"):
        export_scores(df, {}, tmp_path / "x.jsonl", method="mc")

    out = tmp_path / "mc.jsonl"
    export_scores(df, {"q1": "Q"}, out, format="jsonl", method="mc")
    (record,) = read_jsonl(out)
    assert record["trace_id"] == "q1" and record["method"] == "mc" and record["prompt"] == "Q"
    assert record["run_id"] == "run-mc"
    segs = record["segments"]
    assert [s["segment"] for s in segs] == [0, 1, 2]
    assert [s["score"] for s in segs] == [0.1, None, 0.3]
    assert [s["text"] for s in segs] == [f"seg {k} of q1. " for k in range(3)]
    assert all(s["r_hat"] == 0.5 for s in segs)
    assert {"char_start", "char_end", "token_start", "token_end", "n_tokens"} <= set(segs[0])

    out = tmp_path / "loo.jsonl"
    export_scores(df, {"q1": "Q"}, out, format="jsonl", method="loo")
    (record,) = read_jsonl(out)
    assert "r_hat" not in record["segments"][0]  # columns empty for this method are dropped
