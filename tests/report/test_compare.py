"""compare: one segmentation for all methods, report files, options pass-through, export, and
finding the per-method commands' score tables in a folder."""

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli
from score_tables import random_scores, write_table

from cotcredit.errors import UserError
from cotcredit.report.compare import (
    ReportOptions,
    ScoreTablesNotFound,
    compare,
    compare_folder,
    compare_scores,
    find_score_tables,
    method_options,
)

run = run_cli


def test_compare_end_to_end(tiny_model_dir, traces_file, tmp_path, capsys):
    out = tmp_path / "report"
    code, stdout, err = run(["compare", traces_file, "--methods", "rredcot,loo,mc", "-o", out,
                             "--model", tiny_model_dir, "-k", "4", "--rollouts", "2",
                             "--max-new-tokens", "4", "--bootstrap", "50"], capsys)
    assert code == 0, err
    for name in ("rredcot", "loo", "mc", "segments"):
        assert (out / f"{name}.parquet").exists()
    seg = pd.read_parquet(out / "segments.parquet")
    cols = ["trace_id", "segment", "char_start", "char_end"]
    for name in ("rredcot", "loo", "mc"):
        df = pd.read_parquet(out / f"{name}.parquet")
        assert df[cols].sort_values(cols).reset_index(drop=True).equals(
            seg[cols].sort_values(cols).reset_index(drop=True))
    corr = pd.read_parquet(out / "correlations.parquet")
    assert list(corr.columns) == ["trace_id", "method_a", "method_b", "statistic", "value",
                                  "ci_low", "ci_high", "n"]
    assert {"rredcot", "loo"} <= set(corr.method_a) | set(corr.method_b)
    assert (out / "report.html").exists() and (out / "report.md").exists()
    assert "Agreement with mc" in stdout
    # Correlating the files again gives the same table.
    code, _, err = run(["compare", "--scores", out / "rredcot.parquet", out / "loo.parquet",
                        "-o", tmp_path / "again", "--bootstrap", "50"], capsys)
    assert code == 0, err
    again = pd.read_parquet(tmp_path / "again" / "correlations.parquet")
    a = corr[(corr.method_a == "rredcot") & (corr.method_b == "loo") & (corr.trace_id != "all")]
    b = again[(again.method_a == "rredcot") & (again.method_b == "loo") & (again.trace_id != "all")]
    assert a.reset_index(drop=True).equals(b.reset_index(drop=True))


def test_mismatched_segmentations_are_refused(tiny_model_dir, traces_file, tmp_path, capsys):
    for k in (3, 4):
        run(["redistribute", traces_file, "--model", tiny_model_dir, "-k", k,
             "-o", tmp_path / f"r{k}.parquet"], capsys)
    df = pd.read_parquet(tmp_path / "r4.parquet")
    df["method"] = "other"
    df.to_parquet(tmp_path / "other.parquet")
    code, _, err = run(["compare", "--scores", tmp_path / "r3.parquet", tmp_path / "other.parquet",
                        "-o", tmp_path / "rep"], capsys)
    assert code == 2 and "segmentation" in err and err.strip().count("\n") == 0


def test_method_options_pass_through(tmp_path):
    cfg = tmp_path / "opts.yaml"
    cfg.write_text("mc:\n  rollouts: 3\nrredcot:\n  value: rhat\n  exit_string: 'Answer: '\n")
    opts = method_options("rredcot,mc,gradient-ixg", cfg, ["mc.temperature=0.5"], rollouts=None)
    assert opts["mc"].rollouts == 3 and opts["mc"].temperature == 0.5
    assert opts["rredcot"].value == "rhat" and opts["rredcot"].forcing.exit_string == "Answer: "
    assert opts["gradient"].kinds == ("ixg",)
    with pytest.raises(UserError, match="unknown option 'rollout'"):
        method_options("mc", None, ["mc.rollout=3"])
    with pytest.raises(UserError, match="rollouts must be a number or auto, got 'many'"):
        method_options("mc", None, ["mc.rollouts=many"])
    assert method_options("mc", None, ["mc.rollouts=auto"])["mc"].rollouts == "auto"
    with pytest.raises(UserError, match="unknown method 'nope'"):
        method_options("rredcot,nope")


def test_export_processbench(tiny_model_dir, traces_file, tmp_path, capsys):
    rr = tmp_path / "rr.parquet"
    run(["redistribute", traces_file, "--model", tiny_model_dir, "-k", "3", "-o", rr], capsys)
    out = tmp_path / "prm.jsonl"
    code, _, err = run(["export", rr, "--traces", traces_file, "-o", out, "--threshold", "0",
                        "--format", "processbench"], capsys)
    assert code == 0, err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    df = pd.read_parquet(rr)
    assert len(lines) == 3
    for rec in lines:
        assert set(rec) == {"id", "problem", "steps", "label", "final_answer_correct"}
        assert len(rec["steps"]) == 3
    first = df[df.trace_id == "t1"].sort_values("segment")
    right = [bool(s > 0) for s in first.score]
    assert lines[0]["label"] == (right.index(False) if False in right else -1)
    code, _, err = run(["export", rr, "-o", out], capsys)
    assert code == 2 and "--traces" in err
    code, _, err = run(["export", rr, "--traces", traces_file, "-o", out,
                        "--format", "trl-stepwise"], capsys)
    assert code == 2 and "processbench" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ score tables found in a folder


def session_folder(folder: Path, methods=("rredcot", "mc", "loo", "shapley")) -> pd.DataFrame:
    """What the per-method commands leave in a folder: rredcot.parquet, mc.parquet, attr.parquet
    (loo and shapley), segments.parquet; plus the report of an earlier compare run with -o ."""
    df = random_scores(4, {m: 0.5 * i for i, m in enumerate(methods)}, seed=3)
    for name, held in (("rredcot", ["rredcot"]), ("mc", ["mc"]), ("attr", ["loo", "shapley"])):
        rows = df.loc[df["method"].isin(held)]
        if len(rows):
            write_table(rows, folder / f"{name}.parquet", run_id=f"run-{name}")
    seg = df.loc[df["method"] == methods[0]].drop(columns=["method", "score"])
    write_table(seg, folder / "segments.parquet")
    pd.DataFrame({"trace_id": ["all"], "method_a": ["mc"], "method_b": ["loo"], "statistic": ["x"],
                  "value": [0.0]}).to_parquet(folder / "correlations.parquet")
    pd.DataFrame({"method": ["mc"], "traces": [1], "seconds": [1.0]}).to_parquet(
        folder / "costs.parquet")
    return df


def test_find_score_tables_default_names_and_shared_attr_table(tmp_path):
    session_folder(tmp_path)
    found = find_score_tables(tmp_path, "loo,mc,rredcot")
    assert found == {"rredcot": tmp_path / "rredcot.parquet", "mc": tmp_path / "mc.parquet",
                     "loo": tmp_path / "attr.parquet"}
    assert list(found) == ["rredcot", "mc", "loo"]  # registry order
    assert find_score_tables(tmp_path, ["shapley"]) == {"shapley": tmp_path / "attr.parquet"}
    # Any name works, and a table stored as a folder of Parquet files too.
    (tmp_path / "rredcot.parquet").rename(tmp_path / "my-run.parquet")
    mc = pd.read_parquet(tmp_path / "mc.parquet")
    (tmp_path / "mc.parquet").unlink()
    (tmp_path / "mc.parquet").mkdir()
    write_table(mc.iloc[:5], tmp_path / "mc.parquet" / "part-0.parquet")
    write_table(mc.iloc[5:], tmp_path / "mc.parquet" / "part-1.parquet")
    found = find_score_tables(tmp_path, "rredcot,mc")
    assert found == {"rredcot": tmp_path / "my-run.parquet", "mc": tmp_path / "mc.parquet"}
    result = compare_folder(tmp_path, "rredcot,mc", n_boot=20)
    methods = result.scores.loc[result.scores["method"] != "position"]  # the baseline's rows
    assert len(methods) == len(mc) + len(pd.read_parquet(tmp_path / "my-run.parquet"))


def test_find_score_tables_gradient_labels(tmp_path):
    df = random_scores(4, {"loo": 0.0, "gradient-ig": 1.0, "gradient-ixg": 1.0}, seed=1)
    write_table(df, tmp_path / "attr.parquet", run_id="run-attr")
    found = find_score_tables(tmp_path, "gradient")
    attr = tmp_path / "attr.parquet"
    assert found == {"gradient-ig": attr, "gradient-ixg": attr}
    assert list(find_score_tables(tmp_path, "gradient-ixg")) == ["gradient-ixg"]
    with pytest.raises(ScoreTablesNotFound, match="gradient-saliency: no table"):
        find_score_tables(tmp_path, "gradient-saliency")
    with pytest.raises(UserError, match="unknown method 'nope'"):
        find_score_tables(tmp_path, "nope")


def test_missing_method_names_the_command(tmp_path, monkeypatch, capsys):
    session_folder(tmp_path, methods=("rredcot",))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ScoreTablesNotFound) as info:
        find_score_tables(".", "rredcot,mc,loo")
    assert info.value.lines == [
        "mc: no table in . (run: cotcredit mc-baseline TRACES)",
        "loo: no table in . (run: cotcredit attribute TRACES --method loo)",
    ]
    code, stdout, err = run(["compare", "--methods", "rredcot,mc,loo"], capsys)
    assert code == 2 and stdout == ""
    assert err.splitlines() == [f"error: {line}" for line in info.value.lines]
    assert not (tmp_path / "report").exists()


def test_same_method_from_two_runs_is_refused(tmp_path, capsys):
    df = session_folder(tmp_path)
    write_table(df.loc[df["method"] == "mc"], tmp_path / "mc-old.parquet", run_id="run-old")
    with pytest.raises(ScoreTablesNotFound) as info:
        find_score_tables(tmp_path, "rredcot,mc")
    (line,) = info.value.lines
    assert line.startswith("mc: in two tables from different runs")
    assert str(tmp_path / "mc.parquet") in line and str(tmp_path / "mc-old.parquet") in line
    code, _, err = run(["compare", "--dir", tmp_path, "--methods", "rredcot,mc"], capsys)
    assert code == 2 and err.count("\n") == 1 and "mc-old.parquet" in err
    # A copy of the same run is ambiguous too.
    write_table(df.loc[df["method"] == "mc"], tmp_path / "mc-old.parquet", run_id="run-mc")
    with pytest.raises(ScoreTablesNotFound, match="same run in both"):
        find_score_tables(tmp_path, "mc")


def test_mismatched_segmentation_names_trace_and_files(tmp_path, capsys):
    session_folder(tmp_path)
    mc = pd.read_parquet(tmp_path / "mc.parquet")
    mc.loc[(mc["trace_id"] == "t2") & (mc["segment"] == 1), "char_end"] += 1  # 4 traces: t0-t3
    write_table(mc, tmp_path / "mc.parquet")
    with pytest.raises(UserError) as info:
        compare_folder(tmp_path, "rredcot,mc,loo", n_boot=10)
    message = str(info.value)
    assert "'t2'" in message and "segment 1" in message and "\n" not in message
    assert str(tmp_path / "rredcot.parquet") in message and str(tmp_path / "mc.parquet") in message
    code, _, err = run(["compare", "--dir", tmp_path], capsys)
    assert code == 2 and "segmentations differ" in err and err.count("\n") == 1


def test_compare_without_inputs_writes_report_and_says_which_tables(tmp_path, monkeypatch, capsys):
    session_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, stdout, err = run(["compare", "--methods", "rredcot,mc,loo", "--bootstrap", "50"], capsys)
    assert code == 0, err
    assert all(line in err for line in
               ("rredcot: rredcot.parquet", "mc: mc.parquet", "loo: attr.parquet"))
    assert "Agreement with mc" in stdout and "Paired differences" in stdout
    corr = pd.read_parquet(tmp_path / "report" / "correlations.parquet")
    # not shapley; the position baseline is a row of its own
    assert set(corr["method_a"]) | set(corr["method_b"]) == {"rredcot", "mc", "loo", "position"}
    # Inputs are named relative to the report folder: no path of this machine in the report.
    for name in ("report.md", "report.html"):
        text = (tmp_path / "report" / name).read_text()
        assert "loo: ../attr.parquet" in text and str(tmp_path) not in text
    # The same as naming the tables, and the same as the Python API.
    named = compare_scores([tmp_path / "rredcot.parquet", tmp_path / "mc.parquet",
                            tmp_path / "attr.parquet"],
                           tmp_path / "named", methods=["rredcot", "mc", "loo"], n_boot=50)
    pd.testing.assert_frame_equal(corr, named.correlations.table)
    api = compare(methods="rredcot,mc,loo", folder=tmp_path, output=tmp_path / "api",
                  report=ReportOptions(bootstrap=50))
    pd.testing.assert_frame_equal(corr, api.correlations.table)
    assert api.sources == {"rredcot": tmp_path / "rredcot.parquet", "mc": tmp_path / "mc.parquet",
                           "loo": tmp_path / "attr.parquet"}
    code, _, err = run(["compare", "--scores"], capsys)
    assert code == 2 and "--scores" in err


def test_user_sequence_redistribute_attribute_compare(tiny_model_dir, traces_file, tmp_path,
                                                     monkeypatch, capsys):
    """The session as users type it, each command with its defaults, then compare with no
    inputs: segment, redistribute, mc-baseline, attribute --method loo, compare."""
    from cotcredit.data import grading

    # Junk from a random model is never right: call a rollout right by its length instead.
    monkeypatch.setattr(grading, "grade_completion", lambda text, reference, **kw:
                        grading.GradeResult(answer=str(len(text)), correct=len(text) % 2 == 0))
    monkeypatch.chdir(tmp_path)
    for argv in (["segment", traces_file], ["redistribute", traces_file],
                 ["mc-baseline", traces_file, "-n", "4", "--max-new-tokens", "6"],
                 ["attribute", traces_file, "--method", "loo"]):
        code, _, err = run([*argv, "--model", tiny_model_dir, "-q"], capsys)
        assert code == 0, err
    code, stdout, err = run(["compare", "--methods", "rredcot,mc,loo", "--bootstrap", "50"],
                            capsys)
    assert code == 0, err
    assert "rredcot: rredcot.parquet" in err and "loo: attr.parquet" in err
    assert "mc: mc.parquet" in err
    assert "report: report/report.html" in err
    corr = pd.read_parquet(tmp_path / "report" / "correlations.parquet")
    tables = {name: pd.read_parquet(f"{name}.parquet") for name in
              ("segments", "rredcot", "mc", "attr")}
    spans = ["trace_id", "segment", "char_start", "char_end"]
    for name, table in tables.items():  # one segmentation, made four times
        got = table[spans].sort_values(spans[:2]).reset_index(drop=True)
        want = tables["segments"][spans].sort_values(spans[:2]).reset_index(drop=True)
        assert got.equals(want), name
    rredcot, loo = tables["rredcot"], tables["attr"]
    per_trace = corr.loc[(corr["trace_id"] != "all") & (corr["statistic"] == "spearman")
                         & (corr["method_a"] == "rredcot") & (corr["method_b"] == "loo")]
    assert len(per_trace) >= 1
    for r in per_trace.itertuples():
        # --credit differences (the default): rredcot's value differences, not its rewards
        own = rredcot.loc[rredcot["trace_id"] == r.trace_id].sort_values("segment")
        x = own["g_after"] - own["g_before"]
        y = loo.loc[loo["trace_id"] == r.trace_id].sort_values("segment")["score"]
        assert r.value == pytest.approx(x.corr(y, method="spearman"), abs=1e-9)
    assert {"rredcot", "loo"} <= set(corr.loc[corr["method_b"] == "mc", "method_a"]) | set(
        corr.loc[corr["method_a"] == "mc", "method_b"])
    for name in ("report.md", "report.html", "report.tex", "heatmap.pdf", "scatter_matrix.pdf"):
        assert (tmp_path / "report" / name).exists()


def test_summary_table_printed_to_a_pipe_is_not_cut(tmp_path, monkeypatch, capsys):
    """Printed to a non-terminal (capsys, a pipe, a file) the table keeps its natural width:
    no header or interval cut to fit 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)
    session_folder(tmp_path)
    code, stdout, err = run(["compare", "--dir", tmp_path, "--methods", "rredcot,mc,loo",
                             "--bootstrap", "20", "-o", tmp_path / "r"], capsys)
    assert code == 0, err
    assert "…" not in stdout
    header = next(line for line in stdout.splitlines() if "Spearman" in line)
    assert "Spearman [95% CI]" in header and "top-1 [95% CI]" in header and len(header) > 80
    # COLUMNS, when a user sets it, is still obeyed.
    monkeypatch.setenv("COLUMNS", "60")
    from cotcredit.cli import commands as cli

    monkeypatch.setattr(cli.out, "_width", None)
    code, stdout, _ = run(["compare", "--dir", tmp_path, "--methods", "rredcot,mc", "--bootstrap",
                           "20", "-o", tmp_path / "r2"], capsys)
    assert code == 0 and max(map(len, stdout.splitlines())) <= 60
