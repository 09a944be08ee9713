"""The lookup study's sampled traces are tracked gzipped; every reader gets them back intact."""

from __future__ import annotations

import gzip
import json

from conftest import ROOT

from studies import reproduce
from studies.lookup_study import run_study


def test_tracked_traces_unpack_to_the_240_sampled_traces(tmp_path):
    packed = ROOT / "studies" / "lookup_study" / "raw_traces.jsonl.gz"
    (tmp_path / packed.name).write_bytes(packed.read_bytes())
    path = run_study.raw_traces(tmp_path)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 240 and len({r["id"] for r in rows}) == 240
    assert path.read_bytes() == gzip.decompress(packed.read_bytes())


def test_an_unpacked_file_is_left_as_it_is(tmp_path):
    (tmp_path / "raw_traces.jsonl").write_text('{"id": "a", "response": "x"}\n')
    (tmp_path / "raw_traces.jsonl.gz").write_bytes(gzip.compress(b'{"id": "b"}\n'))
    assert run_study.raw_traces(tmp_path).read_text() == '{"id": "a", "response": "x"}\n'


def test_reproduction_reads_a_gzipped_reference(tmp_path):
    rows = [{"id": "t1", "response": "7 + 5 = 12"}, {"id": "t2", "response": "héllo"}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "raw_traces.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    assert reproduce._responses(tmp_path / "raw_traces.jsonl") == {
        "t1": "7 + 5 = 12", "t2": "héllo"}
