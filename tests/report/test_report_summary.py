"""The report's summary for papers: split-half reliability, costs, LaTeX tables, PDF figures."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import not_installed
from rich.console import Console
from scipy import stats
from score_tables import add_costs, random_scores, split_halves, trace_rows

from cotcredit.report import (
    CORRELATION_COLUMNS,
    COST_SUMMARY_COLUMNS,
    correlate,
    cost_summary,
    cost_table,
    summary_table,
    write_report,
)

SCIPY = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}
COSTS = {  # seconds, forward tokens, generated tokens per trace
    "rredcot": (0.5, 1000, 0),
    "mc": (30.0, 8000, 24000),
    "loo": (2.0, 5000, 0),
}


def study_scores(n_traces: int = 20) -> pd.DataFrame:
    """rredcot, mc (with split halves) and loo on a shared signal, with per-trace costs."""
    df = random_scores(n_traces, {"mc": 0.2, "rredcot": 0.7, "loo": 1.2}, seed=11)
    return add_costs(split_halves(df, "mc", noise=0.6, seed=3), COSTS, seed=5)


def aggregate(table: pd.DataFrame, a: str, b: str, statistic: str) -> pd.Series:
    hit = table.loc[
        (table["trace_id"] == "all")
        & (table["method_a"] == a)
        & (table["method_b"] == b)
        & (table["statistic"] == statistic)
    ]
    assert len(hit) == 1, (a, b, statistic)
    return hit.iloc[0]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    scores = study_scores()
    corr = correlate(scores, n_boot=300, seed=0)
    out = tmp_path_factory.mktemp("study-report")
    files = write_report(scores, corr, out, max_strips=2)
    return scores, corr, files


# ------------------------------------------------------------------------------- split-half


def test_split_half_equals_naive_scipy(study):
    scores, corr, files = study
    table = pd.read_parquet(files.correlations)
    assert list(table.columns) == list(CORRELATION_COLUMNS)
    mc = scores.loc[scores["method"] == "mc"].sort_values(["trace_id", "segment"])
    per_trace = {name: [] for name in SCIPY}
    for tid, g in mc.groupby("trace_id"):
        a, b = g["score_half_a"].to_numpy(), g["score_half_b"].to_numpy()
        for name, func in SCIPY.items():
            naive = func(a, b).statistic
            per_trace[name].append(naive)
            row = table.loc[
                (table["trace_id"] == tid) & (table["statistic"] == f"split_half_{name}")
            ]
            assert row[["method_a", "method_b"]].values.tolist() == [["mc", "mc"]]
            assert row["value"].iloc[0] == pytest.approx(naive, abs=1e-12)
            assert row["n"].iloc[0] == len(g)
    for name, values in per_trace.items():
        mean = aggregate(table, "mc", "mc", f"mean_split_half_{name}")
        assert mean["value"] == pytest.approx(np.mean(values), abs=1e-12)
        assert mean["n"] == 20
        assert mean["ci_low"] <= mean["value"] <= mean["ci_high"]
    # No Spearman-Brown step-up of a mean of per-trace rank correlations.
    assert not table["statistic"].str.contains("spearman_brown").any()
    # Only mc has halves: no split-half rows for the other methods.
    halves = table.loc[table["statistic"].str.contains("split_half|spearman_brown")]
    assert set(halves["method_a"]) == set(halves["method_b"]) == {"mc"}
    assert corr.split_half_methods() == ["mc"]
    # The pairs' statistics do not change when the half columns are there.
    plain = correlate(scores.drop(columns=["score_half_a", "score_half_b"]), n_boot=300, seed=0)
    pairs = table.loc[~table["statistic"].str.contains("split_half|spearman_brown")]
    pd.testing.assert_frame_equal(pairs.reset_index(drop=True), plain.table)


def test_split_half_skips_unusable_traces_and_is_silent_without_columns():
    rows = []
    rows += trace_rows("good1", {"mc": [0, 1, 2, 3], "loo": [0, 2, 1, 3]})
    rows += trace_rows("good2", {"mc": [3, 1, 2, 0], "loo": [2, 1, 3, 0]})
    rows += trace_rows("nan", {"mc": [0, 1, 2, 3], "loo": [1, 0, 2, 3]})
    rows += trace_rows("flat", {"mc": [0, 1, 2, 3], "loo": [1, 0, 3, 2]})
    df = pd.DataFrame(rows)
    halves = {
        "good1": ([0, 1, 3, 2], [0, 2, 1, 3]),
        "good2": ([3, 2, 1, 0], [2, 1, 3, 0]),
        "nan": ([0, math.nan, 1, 2], [0, 1, 2, 3]),
        "flat": ([1, 1, 1, 1], [0, 1, 2, 3]),
    }
    for col, side in (("score_half_a", 0), ("score_half_b", 1)):
        df[col] = np.nan
        for tid, pair in halves.items():
            df.loc[(df["trace_id"] == tid) & (df["method"] == "mc"), col] = pair[side]
    corr = correlate(df, n_boot=50)
    mean = aggregate(corr.table, "mc", "mc", "mean_split_half_spearman")
    naive = [stats.spearmanr(*halves[t]).statistic for t in ("good1", "good2")]
    assert mean["n"] == 2 and mean["value"] == pytest.approx(np.mean(naive))
    skipped = corr.skipped.loc[corr.skipped["method_a"] == corr.skipped["method_b"]]
    assert dict(zip(skipped["reason"], skipped["n_traces"])) == {
        "NaN or infinite half score (split-half only)": 1,
        "constant half scores (split-half only)": 1,
    }
    # The pair's own statistics are untouched by the halves' skips.
    assert aggregate(corr.table, "mc", "loo", "mean_spearman")["n"] == 4

    without = correlate(df.drop(columns=["score_half_a", "score_half_b"]), n_boot=50)
    assert not without.table["statistic"].str.contains("split_half").any()
    assert without.split_half_methods() == []
    assert (without.skipped["method_a"] != without.skipped["method_b"]).all()


def test_terminal_summary_shows_the_split_half(study):
    _, corr, _ = study
    console = Console(width=250, record=True)
    console.print(summary_table(corr))
    text = console.export_text()
    r = corr.value("mc", "mc", "mean_split_half_spearman")
    assert re.search(rf"mc split-half .*{r:.3f}", text)
    assert "Spearman–Brown" not in text


# ------------------------------------------------------------------------------- costs


def test_cost_summary_equals_naive_means_and_ratios():
    scores = study_scores()
    # loo did not record a cost for one trace: every method is averaged over the other 19.
    scores.loc[(scores["method"] == "loo") & (scores["trace_id"] == "t0"), "cost_seconds"] = np.nan
    scores.loc[
        (scores["method"] == "loo") & (scores["trace_id"] == "t0"), "cost_forward_tokens"
    ] = np.nan
    scores.loc[
        (scores["method"] == "loo") & (scores["trace_id"] == "t0"), "cost_generated_tokens"
    ] = np.nan
    costs = cost_summary(scores)
    assert list(costs.columns) == list(COST_SUMMARY_COLUMNS)
    assert costs["method"].tolist() == ["rredcot", "mc", "loo"]
    shared = scores.loc[scores["trace_id"] != "t0"]
    per_trace = shared.groupby(["method", "trace_id"]).first()
    means = per_trace.groupby("method")[
        ["cost_seconds", "cost_forward_tokens", "cost_generated_tokens"]
    ].mean()
    tokens = means["cost_forward_tokens"] + means["cost_generated_tokens"]
    got = costs.set_index("method")
    assert (got["traces"] == 19).all()
    for m in ("rredcot", "mc", "loo"):
        assert got.loc[m, "seconds"] == pytest.approx(means.loc[m, "cost_seconds"])
        assert got.loc[m, "forward_tokens"] == pytest.approx(means.loc[m, "cost_forward_tokens"])
        assert got.loc[m, "generated_tokens"] == pytest.approx(
            means.loc[m, "cost_generated_tokens"]
        )
        assert got.loc[m, "tokens"] == pytest.approx(tokens[m])
        assert got.loc[m, "seconds_ratio"] == pytest.approx(
            means.loc[m, "cost_seconds"] / means.loc["rredcot", "cost_seconds"]
        )
        assert got.loc[m, "tokens_ratio"] == pytest.approx(tokens[m] / tokens["rredcot"])
    assert got.loc["rredcot", "seconds_ratio"] == 1.0

    assert (
        cost_summary(
            scores.drop(columns=["cost_seconds", "cost_forward_tokens", "cost_generated_tokens"])
        )
        is None
    )
    no_baseline = cost_summary(scores.loc[scores["method"] != "rredcot"])
    assert no_baseline["seconds_ratio"].isna().all() and no_baseline["seconds"].notna().all()


def test_cost_table_in_report_files_and_terminal(study):
    scores, _, files = study
    on_disk = pd.read_parquet(files.costs)
    pd.testing.assert_frame_equal(on_disk, cost_summary(scores))
    md = files.markdown.read_text()
    assert "## Cost" in md
    mc = on_disk.set_index("method").loc["mc"]
    assert f"| mc | 20 | {mc['seconds']:.3g} |" in md
    console = Console(width=200, record=True)
    console.print(cost_table(on_disk))
    assert f"{mc['tokens_ratio']:.3g}" in console.export_text()


# ------------------------------------------------------------------------------- LaTeX


def latex_tables(text: str) -> list[list[list[str]]]:
    """The body rows of each booktabs tabular, as lists of cells; checks the rule order."""
    tables = []
    for body in re.findall(r"\\begin\{tabular\}\{[lr]+\}\n(.*?)\\end\{tabular\}", text, re.S):
        lines = body.strip().splitlines()
        assert lines[0] == r"\toprule" and lines[2] == r"\midrule" and lines[-1] == r"\bottomrule"
        assert sum(line.endswith("rule") for line in lines) == 3
        rows = [line.removesuffix(r" \\").split(" & ") for line in [lines[1], *lines[3:-1]]]
        assert len({len(r) for r in rows}) == 1  # every row has the header's cells
        tables.append(rows)
    return tables


def cell(value: float, low: float, high: float) -> str:
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def test_latex_agreement_table_matches_correlations(study):
    _, corr, files = study
    text = files.latex.read_text()
    agreement, _paired, costs = latex_tables(text)  # agreement, paired differences, costs
    header, *rows = agreement
    assert header[0] == "comparison" and header[1] == r"Spearman [95\% CI]"
    by_label = {r[0]: r[1:] for r in rows}
    assert list(by_label) == [
        "rredcot vs mc",
        "loo vs mc",
        "mc split-half (half vs half)",
    ]
    table = pd.read_parquet(files.correlations)

    def expect(a: str, b: str, statistic: str) -> str:
        row = aggregate(table, a, b, statistic)
        return cell(row["value"], row["ci_low"], row["ci_high"])

    for method in ("rredcot", "loo"):
        spearman, pearson, kendall, top1, traces = by_label[f"{method} vs mc"]
        a, b = ("rredcot", "mc") if method == "rredcot" else ("mc", "loo")  # display order
        assert spearman == expect(a, b, "mean_spearman")
        assert pearson == expect(a, b, "mean_pearson")
        assert kendall == expect(a, b, "mean_kendall")
        assert top1 == expect(method, "mc", "top1_agreement")
        assert traces == str(aggregate(table, a, b, "mean_spearman")["n"])
    for label, prefix in (("mc split-half (half vs half)", "mean_split_half"),):
        spearman, pearson, kendall, top1, _ = by_label[label]
        assert [spearman, pearson, kendall] == [
            expect("mc", "mc", f"{prefix}_{s}") for s in ("spearman", "pearson", "kendall")
        ]
        assert top1 == "--"
    assert r"\label{tab:cotcredit-agreement}" in text and r"\caption{" in text
    assert [r[0] for r in costs[1:]] == ["rredcot", "mc", "loo"]


def test_latex_without_reference_lists_pairs(tmp_path):
    scores = random_scores(6, {"rredcot": 0.0, "loo": 0.5, "shapley": 1.0}, seed=2)
    corr = correlate(scores, n_boot=50)
    files = write_report(scores, corr, tmp_path, max_strips=0)
    (agreement,) = latex_tables(files.latex.read_text())
    assert [r[0] for r in agreement[1:]] == [
        "rredcot vs loo",
        "rredcot vs shapley",
        "loo vs shapley",
    ]
    assert files.costs is None and files.strips == []


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("pdflatex") is None,
                    reason=not_installed("pdflatex", "texlive-latex-recommended"))
def test_latex_compiles_with_booktabs(study, tmp_path):
    _, _, files = study
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\usepackage[margin=1cm]{geometry}\n"
        f"\\begin{{document}}\n\\input{{{files.latex.as_posix()}}}\n\\end{{document}}\n"
    )
    run = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    assert (tmp_path / "doc.pdf").read_bytes().startswith(b"%PDF-")


# ------------------------------------------------------------------------------- PDF figures


def test_every_figure_is_also_a_vector_pdf(study):
    _, _, files = study
    pngs = files.figures()
    assert len(pngs) == 2 + 2  # heatmap, scatter matrix, two strips
    assert [p.with_suffix(".pdf") for p in pngs] == files.pdfs()
    for pdf in files.pdfs():
        data = pdf.read_bytes()
        assert data.startswith(b"%PDF-") and pdf in files.all()
        assert b"/FontFile2" in data  # TrueType fonts embedded: text stays text
    md = files.markdown.read_text()
    assert "heatmap.pdf" in md


def test_report_sections_show_ceiling_next_to_agreement(study):
    _, corr, files = study
    md = files.markdown.read_text()
    summary = md[md.index("## Agreement summary") : md.index("## Mean per-trace")]
    r = corr.value("mc", "mc", "mean_split_half_spearman")
    assert "| rredcot vs mc |" in summary
    assert f"| mc split-half (half vs half) | {r:.3f}" in summary
    assert "## Split-half agreement" in md
    html = files.html.read_text()
    assert "Spearman–Brown" not in html.replace("Spearman–Brown applies", "")


def test_report_of_a_folder_table(tmp_path):
    """A score table stored as a folder of Parquet files reads like one file."""
    from cotcredit.report import load_scores

    scores = study_scores(6)
    folder = tmp_path / "mc.parquet"
    folder.mkdir()
    mc = scores.loc[scores["method"] == "mc"]
    mc.iloc[: len(mc) // 2].to_parquet(folder / "part-0.parquet", index=False)
    mc.iloc[len(mc) // 2 :].to_parquet(folder / "part-1.parquet", index=False)
    other = tmp_path / "rredcot.parquet"
    scores.loc[scores["method"] == "rredcot"].to_parquet(other, index=False)
    loaded = load_scores([folder, other])
    assert len(loaded) == len(mc) + int((scores["method"] == "rredcot").sum())
    assert Path(folder).is_dir()


def test_numbers_that_round_to_zero_are_written_without_a_sign():
    from cotcredit.report.format import EMPTY, fmt, fmt_ci

    assert fmt(-1e-9) == "0.000" and fmt(-0.0004) == "0.000" and fmt(-0.0005001) == "-0.001"
    assert fmt_ci(-0.0, -1e-12, 0.5) == "0.000 [0.000, 0.500]"
    assert fmt(float("nan")) == EMPTY and fmt(None) == EMPTY
