"""Publishing the leaderboard from a run still in progress (studies/bench/full.py publish): only
the tables that score every trace are read, and what a held-out split lacks is said."""

from __future__ import annotations

import pandas as pd

from studies.bench.full import complete_tables, pending_note, renamed


def table(path, method: str, ids) -> None:
    pd.DataFrame({"trace_id": list(ids), "segment": 0, "method": method,
                  "score": 0.0}).to_parquet(path)


def test_only_tables_that_score_every_trace_are_read(tmp_path):
    ids = {"a", "b", "c"}
    table(tmp_path / "whole.parquet", "whole", sorted(ids))
    table(tmp_path / "part.parquet", "part", ["a"])
    both = pd.concat([pd.read_parquet(tmp_path / "whole.parquet").assign(method="x"),
                      pd.read_parquet(tmp_path / "part.parquet").assign(method="y")])
    both.to_parquet(tmp_path / "both.parquet")
    done, partial = complete_tables(
        [tmp_path / "whole.parquet", tmp_path / "part.parquet",
         (tmp_path / "both.parquet", ["x", "y"])], ids, rename={"part": "renamed"})
    assert done == [tmp_path / "whole.parquet", (tmp_path / "both.parquet", ["x"])]
    assert partial == {"renamed": "1 of 3 traces", "y": "1 of 3 traces"}


def test_the_pending_note_names_what_is_missing_and_what_is_partial():
    note = pending_note(["a", "b", "c", "d"], {"a"}, {"c": "1 of 3 traces"})
    assert note == ("not yet scored: b, d; scored on part of the traces, left out: "
                    "c (1 of 3 traces)")
    assert pending_note(["a"], {"a"}, {}) == ""


def test_tables_written_before_the_rename_are_relabelled(tmp_path):
    from cotcredit.bench.variants import RENAMED

    def rredcot(folder, references: str) -> None:
        import json

        import pyarrow as pa
        import pyarrow.parquet as pq

        folder.mkdir()
        meta = {"methods": {"rredcot": {"references": references}}}
        t = pa.table({"trace_id": ["a"], "segment": [0], "method": ["rredcot"], "score": [0.0]})
        pq.write_table(t.replace_schema_metadata({"cotcredit": json.dumps(meta)}),
                       folder / "rredcot.parquet")

    rredcot(tmp_path / "new", "siblings")
    assert renamed(tmp_path / "new") == {}
    rredcot(tmp_path / "old", "solution")  # the one-reference estimator under the old label
    assert renamed(tmp_path / "old") == RENAMED
    table(tmp_path / "rredcot-siblings.parquet", "rredcot-siblings", ["a"])
    assert renamed(tmp_path) == RENAMED


def test_an_incomplete_regime_is_marked_on_the_leaderboard():
    from cotcredit.bench.leaderboard import LEADERBOARD_COLUMNS, render_markdown

    row = {c: float("nan") for c in LEADERBOARD_COLUMNS}
    row |= {"regime": "one", "method": "m", "kind": "method", "reads": "none", "loc_best": "",
            "mc_best": "", "blame_departure_best": "", "blame_wrong_step_best": ""}
    board = pd.DataFrame([row], columns=list(LEADERBOARD_COLUMNS))
    text = render_markdown(board, {"one": {"pending": "not yet scored: mc"}})
    assert "| method | one ‡ |" in text
    assert "‡ Held-out split incomplete: not yet scored: mc." in text
    assert "‡" not in render_markdown(board, {"one": {}})
