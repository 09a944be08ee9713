"""Input forms: every reader gives the same records, numbered by line or row, streamed; a bad
input as a whole is one line naming it."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cotcredit.data.readers import open_records
from cotcredit.data.trace import TraceError
from cotcredit.data.traces import read_traces
from cotcredit.errors import UserError

ROWS = [
    {"id": f"r{i}", "prompt": f"What is {i} + 1?",
     "response": f"Let me add.\nSo {i} + 1 = {i + 1}.\nThe final answer is $\\boxed{{{i + 1}}}$.",
     "answer": str(i + 1), "correct": i % 2 == 0}
    for i in range(5)
]


def records(path, **kw):
    return [(n, obj) for n, obj, err in open_records(path, **kw)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_form_gives_the_same_records(tmp_path):
    import datasets

    jsonl = write_jsonl(tmp_path / "t.jsonl", ROWS)
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(jsonl.read_bytes()))
    as_list = tmp_path / "t.json"
    as_list.write_text(json.dumps(ROWS, indent=2))
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), parquet)
    folder = tmp_path / "parts"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(ROWS[:2]), folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[2:]), folder / "part-1.parquet")
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(ROWS).save_to_disk(str(saved))
    expected = [(i + 1, r) for i, r in enumerate(ROWS)]
    for path in (jsonl, gz, as_list, parquet, folder, saved):
        assert records(path) == expected, path
    # The traces read from each are the same too.
    want = read_traces(jsonl).traces
    for path in (gz, as_list, parquet, folder, saved):
        got = read_traces(path).traces
        assert [(t.id, t.prompt, t.response, t.answer, t.outcome) for t in got] == [
            (t.id, t.prompt, t.response, t.answer, t.outcome) for t in want]
        assert got[3].line == 4 and got[3].source == str(path)


def test_jsonl_line_numbers_skip_blank_lines_and_bad_lines_go_on(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"a": 1}\n\n{bad\n\xff\n{"a": 2}\n')
    got = list(open_records(p))
    assert [(n, obj) for n, obj, _ in got] == [(1, {"a": 1}), (3, None), (4, None), (5, {"a": 2})]
    assert "invalid JSON" in got[1][2] and "not valid UTF-8" in got[2][2]


def test_parquet_row_numbers_in_errors(tmp_path):
    rows = [dict(ROWS[0]), {**ROWS[1], "answer": None}, dict(ROWS[2])]
    p = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    with pytest.raises(TraceError, match=r"t\.parquet:2: missing reference answer"):
        read_traces(p)
    res = read_traces(p, on_error="skip")
    assert [t.id for t in res.traces] == ["r0", "r2"] and res.skipped[0].line == 2


def test_parquet_is_read_in_batches(tmp_path, monkeypatch):
    """A Parquet input is decoded batch by batch: never the whole file at once."""
    from cotcredit.data import readers

    rows = [{**ROWS[0], "id": f"x{i}"} for i in range(50)]
    p = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p, row_group_size=10)
    monkeypatch.setattr(readers, "BATCH_ROWS", 7)
    sizes = []

    class Counting(pq.ParquetFile):
        def iter_batches(self, *a, **kw):
            for batch in super().iter_batches(*a, **kw):
                sizes.append(batch.num_rows)
                yield batch

    monkeypatch.setattr(pq, "ParquetFile", Counting)
    assert [obj["id"] for _, obj in records(p)] == [r["id"] for r in rows]
    assert max(sizes) <= 7 and sum(sizes) == 50


def test_saved_dataset_dict_needs_a_split(tmp_path):
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:3]),
                               "test": datasets.Dataset.from_list(ROWS[3:])})
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(UserError, match="has splits train, test; choose one with --split"):
        open_records(tmp_path / "dd")
    assert [o["id"] for _, o in records(tmp_path / "dd", split="test")] == ["r3", "r4"]
    with pytest.raises(UserError, match="no split 'dev' \\(it has train, test\\)"):
        open_records(tmp_path / "dd", split="dev")
    # The source of a trace names the split.
    t = read_traces(tmp_path / "dd", split="test").traces[0]
    assert t.source == f"{tmp_path / 'dd'}:test"


def test_dataset_folder_and_ids(tmp_path):
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    write_jsonl(repo / "data" / "train.jsonl", ROWS[:2])
    write_jsonl(repo / "data" / "test.jsonl", ROWS[2:])
    assert [o["id"] for _, o in records(repo, split="test")] == ["r2", "r3", "r4"]
    with pytest.raises(UserError) as e:
        open_records(repo, split="validation")
    assert "no split 'validation'" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(UserError) as e:
        open_records("no-such-owner/no-such-dataset", split="train")
    assert str(e.value).startswith("no-such-owner/no-such-dataset: no such file, folder or dataset")
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="nope.jsonl: no such file"):
        open_records(tmp_path / "nope.jsonl")


def test_corrupt_inputs_are_one_line(tmp_path):
    bad_gz = tmp_path / "t.jsonl.gz"
    bad_gz.write_bytes(gzip.compress(b'{"a": 1}\n' * 100)[:30])
    with pytest.raises(UserError, match="t.jsonl.gz: cannot read"):
        list(open_records(bad_gz))
    bad_pq = tmp_path / "t.parquet"
    bad_pq.write_bytes(b"not parquet")
    with pytest.raises(UserError, match="not a readable Parquet file"):
        list(open_records(bad_pq))
    bad_json = tmp_path / "t.json"
    bad_json.write_text("[{\"a\": 1},")
    with pytest.raises(UserError, match="t.json: invalid JSON"):
        list(open_records(bad_json))
