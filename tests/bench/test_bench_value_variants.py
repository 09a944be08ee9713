"""The leaderboard shows a value variant under another's scores only where both compute the
same probes (studies/bench/value_variants.py): checked here against real runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.pipeline import run_analysis
from cotcredit.segmentation import SegmentOptions
from studies.bench.value_variants import ONE_REFERENCE_SAME, alias_rows, same_as, variants

BASE = {"prompt": "Three apples cost 4 each. How much?", "answer": "12",
        "solution": "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12."}
RECORDS = [
    {**BASE, "id": "a", "problem_id": "p1", "correct": True, "solutions": [BASE["solution"]],
     "response": "There are 3 apples.\nAt 4 each they cost 12.\nThe answer is 12."},
    {**BASE, "id": "b", "problem_id": "p2", "correct": False,
     "response": "Apples cost 4 each.\nSo 3 apples cost 13.\nThe answer is 13."},
]


def _rows(scorer, path, label):
    opts = {k: v for k, v in variants()[label].items()}
    run = run_analysis(path, scorer, segment_options=SegmentOptions(segments="lines"),
                       methods={"rredcot": RredcotOptions(**opts)})
    return pd.DataFrame(run.rows["rredcot"])[["trace_id", "segment", "score", "v_hat"]]


@pytest.mark.parametrize("label", sorted(ONE_REFERENCE_SAME))
def test_one_reference_variants_compute_the_same_scores(scorer, tmp_path, label):
    """With one distinct reference per trace, "several references" is that reference, and with
    one response per problem "siblings" is too: the aliased rows are what a run would give."""
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    same = same_as(RECORDS)
    assert same[label] == ONE_REFERENCE_SAME[label]
    assert same["rredcot-matched"] == "rredcot"
    pd.testing.assert_frame_equal(_rows(scorer, path, label), _rows(scorer, path, same[label]))
    pd.testing.assert_frame_equal(_rows(scorer, path, "rredcot-matched"),
                                  _rows(scorer, path, "rredcot"))


def test_no_alias_where_a_trace_has_several_references_or_siblings():
    several = [{**RECORDS[0], "solutions": ["Another way.\nThe answer is 12."]}, RECORDS[1]]
    assert same_as(several) == {}
    twice = [*RECORDS, {**RECORDS[0], "id": "c"}]  # a second response to problem p1
    assert "rredcot-matched" not in same_as(twice)
    assert same_as(twice)["rredcot-multi"] == "rredcot-drop"


def test_alias_rows_copies_only_missing_labels():
    scores = pd.DataFrame({"trace_id": ["a", "a"], "segment": [0, 0], "score": [0.1, 0.2],
                           "method": ["rredcot-drop", "rredcot-multi-matched"]})
    out = alias_rows(scores, RECORDS)
    assert out.loc[out.method == "rredcot-multi", "score"].tolist() == [0.1]
    # scored under its own label: kept, not overwritten by the alias
    assert out.loc[out.method == "rredcot-multi-matched", "score"].tolist() == [0.2]
    assert len(out) == 3


def test_alias_of_an_alias_resolves():
    """On one-response-per-problem traces multi-matched = matched = the default (siblings):
    scoring the default alone shows all three."""
    scores = pd.DataFrame({"trace_id": ["a"], "segment": [0], "score": [0.3],
                           "method": ["rredcot"]})
    out = alias_rows(scores, RECORDS)
    for label in ("rredcot-matched", "rredcot-multi-matched"):
        assert out.loc[out.method == label, "score"].tolist() == [0.3]
