"""The hops lookup task and its checker on hand-written right and wrong responses."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import HOPS_Q, HOPS_RIGHT, ROOT

from cotcredit.bench.regimes import hops as checker  # the hops regime: checker and generator

make = checker

QUESTION, RIGHT = HOPS_Q, HOPS_RIGHT


def response(lines, answer="13"):
    return "\n".join(lines) + (f"\nThe answer is {answer}." if answer is not None else "")


def offset_of(lines, i):
    return sum(len(x) + 1 for x in lines[:i])


def test_reference_solutions_check_right():
    for p in make.make_problems("hops", 30, seed=3):
        c = checker.check(p["user_turn"], p["solution"])
        assert (c.error_char, c.first_error_step, c.correct) == (-1, 0, True), p["id"]
        assert 6 <= len(p["solution"].splitlines()) - 1 <= 8


def test_right_response():
    c = checker.check(QUESTION, response(RIGHT))
    assert (c.error_char, c.first_error_step, c.error_kind, c.correct) == (-1, 0, "", True)


@pytest.mark.parametrize("i, line, kind", [
    (0, "We start at Emma.", "start"),                     # the first step
    (1, "Mia's friend is Noah.", "friend"),
    (2, "Emma's friend is Noah.", "chain"),
    (3, "Noah's favourite fruit is the kiwi.", "fruit"),
    (4, "The peach costs 31 coins.", "price"),
    (5, "So Noah's favourite fruit costs 72 coins.", "restate"),  # the last step
    (3, "Jack's favourite fruit is the kiwi.", "chain"),
    (2, "I am not sure.", "garbled"),
])
def test_first_wrong_step(i, line, kind):
    lines = RIGHT[:i] + [line] + RIGHT[i + 1:]
    c = checker.check(QUESTION, response(lines))
    assert (c.first_error_step, c.error_kind, c.error_char) == (i + 1, kind, offset_of(lines, i))
    assert c.correct  # the stated answer is right: correctness is graded apart from the steps


def test_missing_and_extra_hops():
    lines = RIGHT[:2] + ["Jack's favourite fruit is the kiwi."] + RIGHT[4:]
    c = checker.check(QUESTION, response(lines))
    assert (c.first_error_step, c.error_kind) == (3, "missing hop")
    lines = RIGHT[:3] + ["Noah's friend is Emma."] + RIGHT[3:]
    c = checker.check(QUESTION, response(lines))
    assert (c.first_error_step, c.error_kind, c.error_char) == (4, "extra hop", offset_of(lines, 3))


def test_wrong_step_then_right_answer_is_still_an_error():
    lines = RIGHT[:4] + ["The peach costs 31 coins.", "So Noah's favourite fruit costs 31 coins."]
    c = checker.check(QUESTION, response(lines, answer="13"))
    assert c.error_kind == "price" and c.correct


def test_no_answer_and_early_stop():
    c = checker.check(QUESTION, response(RIGHT, answer=None))
    assert (c.error_char, c.correct) == (-1, False)
    text = response(RIGHT[:3])
    c = checker.check(QUESTION, text)
    assert (c.error_kind, c.error_char, c.first_error_step) == (
        "missing", text.index("The answer is"), 4)
    c = checker.check(QUESTION, "\n".join(RIGHT[:2]))
    assert (c.error_kind, c.error_char, c.correct) == ("missing", len("\n".join(RIGHT[:2])), False)


def test_problems_are_seeded():
    a = make.make_problems("hops", 5, seed=7)
    assert a == make.make_problems("hops", 5, seed=7)
    assert a != make.make_problems("hops", 5, seed=8)


@pytest.mark.slow
def test_lookup_study_at_tiny_size(tmp_path, tiny_model_dir):
    """The lookup study end to end on a tiny random model: labels, one segment per line, every
    method's table, the localization table and the report."""
    import json

    import pandas as pd

    spec = importlib.util.spec_from_file_location(
        "lookup_study", ROOT / "studies" / "lookup_study" / "run_study.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    study.main(["--out", str(tmp_path), "--problems", "3", "--mc-traces", "2", "--rollouts",
                "2", "--model", str(tiny_model_dir), "--bootstrap", "50"])
    traces = [json.loads(x) for x in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 3 and all("error_char" in t for t in traces)
    seg = pd.read_parquet(tmp_path / "segments.parquet")
    # A random model may write a NUL character; such a trace is refused and skipped (one line).
    segmented = [t for t in traces if (seg.trace_id == t["id"]).any()]
    assert segmented and all("\x00" in t["response"] for t in traces if t not in segmented)
    for t in segmented:
        assert len(seg[seg.trace_id == t["id"]]) == study.org.reasoning_lines(t["response"])
    assert pd.read_parquet(tmp_path / "mc.parquet").trace_id.nunique() == len(
        [t for t in traces[:2] if t in segmented])
    assert (tmp_path / "localization.csv").exists() and (tmp_path / "report").is_dir()
    assert "| rredcot | rredcot-rhat |" in (tmp_path / "pairs.md").read_text()
    # Partial Monte Carlo: --report-only draws localization without it, never a partial MC row.
    import shutil

    mc = pd.read_parquet(tmp_path / "mc.parquet")
    shutil.rmtree(tmp_path / "mc.parquet")
    mc[mc.trace_id == mc.trace_id.iloc[0]].to_parquet(tmp_path / "mc.parquet")
    study.main(["--out", str(tmp_path), "--report-only", "--mc-traces", "2", "--bootstrap", "50"])
    assert "mc" not in set(pd.read_csv(tmp_path / "localization.csv").method)
