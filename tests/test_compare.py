"""compare: one segmentation for all methods, report files, options pass-through, export."""

import json

import pandas as pd
import pytest
from conftest import run_cli

from cotcredit.compare import method_options
from cotcredit.errors import UserError

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
    assert list(corr.columns) == ["trace_id", "method_a", "method_b", "statistic", "value", "ci_low", "ci_high", "n"]
    assert {"rredcot", "loo"} <= set(corr.method_a) | set(corr.method_b)
    assert (out / "report.html").exists() and (out / "report.md").exists()
    assert "Method agreement" in stdout
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
        run(["redistribute", traces_file, "--model", tiny_model_dir, "-k", k, "-o", tmp_path / f"r{k}.parquet"], capsys)
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
    with pytest.raises(UserError, match="expected int"):
        method_options("mc", None, ["mc.rollouts=many"])
    with pytest.raises(UserError, match="unknown method 'nope'"):
        method_options("rredcot,nope")


def test_export_trl_stepwise(tiny_model_dir, traces_file, tmp_path, capsys):
    rr = tmp_path / "rr.parquet"
    run(["redistribute", traces_file, "--model", tiny_model_dir, "-k", "3", "-o", rr], capsys)
    out = tmp_path / "prm.jsonl"
    code, _, err = run(["export", rr, "--traces", traces_file, "-o", out, "--threshold", "0"], capsys)
    assert code == 0, err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    df = pd.read_parquet(rr)
    assert len(lines) == 3
    for rec in lines:
        assert set(rec) == {"prompt", "completions", "labels"}
        assert len(rec["completions"]) == len(rec["labels"]) == 3
    first = df[df.trace_id == "t1"].sort_values("segment")
    assert lines[0]["labels"] == [bool(s > 0) for s in first.score]
    code, _, err = run(["export", rr, "-o", out], capsys)
    assert code == 2 and "--traces" in err
