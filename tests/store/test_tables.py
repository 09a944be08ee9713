"""Result tables: a part file per trace, compaction, resume, crash safety, old outputs, costs.

Unit tests drive `TableWriter` with small synthetic rows; the end-to-end ones run the command line
(in-process, or in a subprocess that is killed) on the tiny random model of conftest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import FIXTURES, TESTS, run_cli, write_traces

from cotcredit.errors import UserError
from cotcredit.store import io, tables
from cotcredit.store.io import read_metadata
from cotcredit.store.tables import TableWriter, table_schema

COLUMNS = {"extra": "float64", "count": "int64", "tag": "string", "flag": "bool"}
SCHEMA = table_schema({"demo": COLUMNS})


def trace_rows(tid: str, k: int = 3, **extra) -> list[dict]:
    rows, start = [], 0
    for s in range(k):
        text = f"step {s} of {tid}\n"
        rows.append({
            "run_id": "run-a", "trace_id": tid, "segment": s, "char_start": start,
            "char_end": start + len(text), "token_start": s * 2, "token_end": s * 2 + 2,
            "n_tokens": 2, "text": text, "boundary_entropy": 0.5, "mean_entropy": 0.25,
            "method": "demo", "score": 0.1 * s, "count": s, "cost_forward_tokens": 7, **extra,
        })
        start += len(text)
    return rows


def writer(path: Path, key: str = "run-a", **kw) -> TableWriter:
    return TableWriter(path, {"run_id": key, "note": "test"}, schema=SCHEMA, **kw)


def expected(ids: list[str]) -> pd.DataFrame:
    """What a table of these traces reads as (the schema's columns, in this order)."""
    rows = [r for t in ids for r in trace_rows(t)]
    return tables.rows_to_table(rows, SCHEMA).to_pandas()


# ---- layout: part files, compaction, order --------------------------------------------------


def test_each_trace_is_one_part_and_compaction_reads_the_same(tmp_path):
    out = tmp_path / "t.parquet"
    w = writer(out)
    assert out.is_dir() and pd.read_parquet(out).empty  # readable from the start
    for i in range(5):
        w.append(trace_rows(f"t{i}"), position=i)
    files = io.data_files(out)
    # One per trace; the empty file the table started with is gone with the first trace.
    assert len(files) == 5 and all(f.name.startswith("part-") for f in files)
    assert [pq.read_metadata(f).num_rows for f in files] == [3, 3, 3, 3, 3]
    before = pd.read_parquet(out)  # plain pandas reads the folder as one table
    pd.testing.assert_frame_equal(before, expected([f"t{i}" for i in range(5)]))
    w.close()
    (single,) = io.data_files(out)
    after = pd.read_parquet(out)
    pd.testing.assert_frame_equal(after, before)
    pd.testing.assert_frame_equal(pd.read_parquet(single), before)
    assert read_metadata(out) == {"run_id": "run-a", "note": "test"}  # .cotcredit.json
    assert read_metadata(single)["run_id"] == "run-a"  # and in the file itself
    # No temporaries left: the only hidden file is the metadata.
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [io.META_FILE]


def test_compacted_rows_follow_input_position_not_writing_order(tmp_path):
    out = tmp_path / "t.parquet"
    w = writer(out)
    for pos in (3, 0, 4, 1, 2):
        w.append(trace_rows(f"t{pos}"), position=pos)
    w.close()
    assert list(pd.read_parquet(out).trace_id.unique()) == ["t0", "t1", "t2", "t3", "t4"]


def test_two_processes_merging_their_own_parts_give_input_order(tmp_path, monkeypatch):
    """What a launched run does: each process writes the traces that hash to it and merges its
    own parts now and then; the final compaction interleaves them back into input order."""
    monkeypatch.setattr(tables, "MERGE_EVERY", 3)
    out = tmp_path / "t.parquet"
    main = writer(out)
    other = writer(out, main=False)
    other.load_done()
    ids = [f"t{i:02d}" for i in range(20)]
    for pos, tid in enumerate(ids):
        (main if pos % 2 == 0 else other).append(trace_rows(tid), position=pos)
        # Between the merges, a reader sees every finished trace exactly once.
        got = io.read_table(out, ["trace_id"]).column(0).to_pylist()
        assert sorted(got) == sorted(r["trace_id"] for t in ids[: pos + 1] for r in trace_rows(t))
    assert len(io.data_files(out)) < 20  # merges kept the file count down
    main.close()
    pd.testing.assert_frame_equal(pd.read_parquet(out), expected(ids))


# ---- the fixed schema ------------------------------------------------------------------------


def test_schema_is_declared_not_inferred(tmp_path):
    out = tmp_path / "t.parquet"
    w = writer(out)
    w.append(trace_rows("a"), position=0)  # extra, tag, flag: all None in this trace
    w.append(trace_rows("b", extra=1.5, tag="x", flag=True), position=1)
    # pyarrow reads a folder with its first file's schema: a null-typed column there would
    # fail on the second part; declared types make every part alike.
    df = pd.read_parquet(out)
    assert df.extra.isna().sum() == 3 and (df.extra.dropna() == 1.5).all()
    assert pq.read_schema(io.data_files(out)[1]).field("extra").type == pa.float64()
    w.close()
    schema = pq.read_schema(io.data_files(out)[0])
    assert schema.remove_metadata().equals(SCHEMA)


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"unknown": 1}, "column(s) unknown"),
        ({"count": 2.5}, "column count is declared int64"),
        ({"tag": 3}, "column tag is declared string"),
        ({"extra": "high"}, "column extra is declared double"),
    ],
)
def test_rows_outside_the_schema_are_a_bug(tmp_path, bad, needle):
    w = writer(tmp_path / "t.parquet")
    with pytest.raises(RuntimeError, match="demo") as exc:
        w.append(trace_rows("a", **bad), position=0)
    assert needle in str(exc.value)
    assert pd.read_parquet(tmp_path / "t.parquet").empty


# ---- resume ----------------------------------------------------------------------------------


def test_resume_skips_done_traces_and_refuses_another_run(tmp_path):
    out = tmp_path / "t.parquet"
    w = writer(out)
    w.append(trace_rows("a"), position=0)
    w.append(trace_rows("b"), position=1)
    del w  # killed: no close, two parts and the empty first file stay
    again = writer(out)  # compacts on opening
    assert again.done == {"a", "b"} and len(io.data_files(out)) == 1
    again.append(trace_rows("c"), position=2)
    again.close()
    pd.testing.assert_frame_equal(pd.read_parquet(out), expected(["a", "b", "c"]))
    with pytest.raises(UserError, match="holds results of a different run"):
        writer(out, key="run-b")
    assert len(pd.read_parquet(out)) == 9  # untouched
    fresh = writer(out, key="run-b", overwrite=True)
    assert fresh.done == set() and pd.read_parquet(out).empty
    assert read_metadata(out)["run_id"] == "run-b"


def test_an_empty_table_of_another_run_is_reused(tmp_path):
    out = tmp_path / "t.parquet"
    writer(out).close()
    w = writer(out, key="run-b")
    assert w.done == set() and read_metadata(out)["run_id"] == "run-b"


def test_a_folder_that_is_not_a_table_is_never_written_or_deleted(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(UserError, match="not a cotcredit table"):
            writer(folder, overwrite=overwrite)
    with pytest.raises(UserError, match="not a cotcredit table"):
        io.remove_table(folder)
    assert (folder / "notes.txt").read_text() == "mine"


def test_single_file_table_of_cotcredit_0_1_becomes_the_first_part(tmp_path):
    """0.1 wrote one file with inferred types (a column of Nones is null-typed) and without the
    newer columns; resuming converts it to the declared schema."""
    out = tmp_path / "t.parquet"
    old = pa.Table.from_pylist([
        {k: v for k, v in r.items() if k not in ("cost_forward_tokens", "flag")}
        for t in ("a", "b") for r in trace_rows(t, extra=None)
    ])
    assert old.schema.field("extra").type == pa.null()
    pq.write_table(old.replace_schema_metadata({b"cotcredit": b'{"run_id": "run-a"}'}), out)
    w = writer(out)
    assert out.is_dir() and w.done == {"a", "b"}
    w.append(trace_rows("c", extra=2.0), position=2)
    w.close()
    df = pd.read_parquet(out)
    assert list(df.trace_id.unique()) == ["a", "b", "c"]
    assert df.cost_forward_tokens.isna().sum() == 6 and (df.cost_forward_tokens[6:] == 7).all()
    assert df.extra.dtype == "float64" and df.extra.iloc[-1] == 2.0
    assert not (tmp_path / ".t.parquet.legacy.tmp").exists()
    with pytest.raises(UserError, match="different run"):
        writer(out, key="run-b")


def test_a_conversion_killed_midway_is_finished(tmp_path):
    """Killed after the old file moved into the hidden new folder but before the rename."""
    out = tmp_path / "t.parquet"
    staged = tmp_path / ".t.parquet.legacy.tmp"
    staged.mkdir()
    part = tables.rows_to_table(trace_rows("a"), SCHEMA)
    meta = {b"cotcredit": b'{"run_id": "run-a"}'}
    pq.write_table(part.replace_schema_metadata(meta), staged / tables.part_name(0))
    w = writer(out)
    assert w.done == {"a"} and not staged.exists()


@pytest.mark.subprocess
def test_stale_temporaries_of_dead_processes_are_removed(tmp_path):
    out = tmp_path / "t.parquet"
    w = writer(out)
    w.append(trace_rows("a"), position=0)
    w.close()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    host = io._HOST
    stale = out / f".part-00000000000000000001-abcd1234.parquet.{host}.{dead}.0123abcd.tmp"
    live = out / f".part-00000000000000000002-abcd1234.parquet.{host}.{os.getppid()}.0123abcd.tmp"
    other_host = out / f".part-00000000000000000003-abcd1234.parquet.elsewhere.{dead}.0123abcd.tmp"
    for p in (stale, live, other_host):
        p.write_bytes(b"half a part")
    writer(out)
    assert not stale.exists() and live.exists() and other_host.exists()


# ---- crash safety of the compaction ----------------------------------------------------------


KILL_SCRIPT = """
import os, signal, sys
import cotcredit.store.tables as T
from test_tables import SCHEMA, trace_rows
out, step = sys.argv[1], sys.argv[2]
w = T.TableWriter(out, {"run_id": "run-a", "note": "test"}, schema=SCHEMA)
for i in range(6):
    w.append(trace_rows(f"t{i}"), position=i)
T._after_step = lambda s: os.kill(os.getpid(), signal.SIGKILL) if s == step else None
w.close()
"""


@pytest.mark.subprocess
@pytest.mark.parametrize("step", ["journal", "renamed"])
def test_writer_killed_during_compaction_loses_nothing(tmp_path, step):
    out = tmp_path / "t.parquet"
    # The script imports this file, which imports conftest: both folders on the path (and the
    # caller's PYTHONPATH kept: the package under test may come from it).
    path = os.pathsep.join(filter(None, [str(Path(__file__).parent), str(TESTS),
                                         os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(out), step], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    ids = [f"t{i}" for i in range(6)]
    journals = list(out.glob(f"{io.JOURNAL}-*.json"))
    assert len(journals) == 1
    # cotcredit's readers apply the unfinished journal: every row once.
    pd.testing.assert_frame_equal(io.read_table(out).to_pandas(), expected(ids))
    if step == "journal":  # the merged file is still hidden: plain readers see the parts
        pd.testing.assert_frame_equal(pd.read_parquet(out), expected(ids))
    # The next writer finishes (or drops) the compaction: every row once, one file, on disk.
    w = writer(out)
    assert w.done == set(ids) and not list(out.glob(f"{io.JOURNAL}-*.json"))
    assert len(io.data_files(out)) == 1
    pd.testing.assert_frame_equal(pd.read_parquet(out), expected(ids))


@pytest.mark.subprocess
def test_cli_run_killed_during_its_final_compaction_resumes(tiny_model_dir, tmp_path, capsys):
    traces = write_traces(tmp_path / "t.jsonl", 5)
    out, clean = tmp_path / "seg.parquet", tmp_path / "clean.parquet"
    args = ["segment", str(traces), "--model", str(tiny_model_dir), "-k", "3", "-q"]
    script = textwrap.dedent(f"""
        import os, signal
        import cotcredit.store.tables as T
        T._after_step = lambda s: os.kill(os.getpid(), signal.SIGKILL) if s == "renamed" else None
        from cotcredit.cli import main
        main({[*args, "-o", str(out)]!r})
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COTCREDIT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert list(out.glob(f"{io.JOURNAL}-*.json"))
    code, _, err = run_cli([*args[:-1], "-o", out], capsys)
    assert code == 0 and "0 trace(s) scored, 5 already done" in err, err
    assert run_cli([*args, "-o", clean], capsys)[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(clean))


# ---- reading -------------------------------------------------------------------------------


def test_read_table_errors_are_one_line(tmp_path):
    out = tmp_path / "t.parquet"
    writer(out).close()
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text("{}\n")
    for path, needle in [(tmp_path / "nope", "no such file"),
                         (jsonl, "not a readable Parquet file")]:
        with pytest.raises(UserError, match=needle) as exc:
            io.read_table(path)
        assert "\n" not in str(exc.value)
    with pytest.raises(UserError, match="has no column"):
        io.read_table(out, ["nope"])


# ---- the readers users load tables with ------------------------------------------------------


def written_table(path: Path, ids: list[str], close: bool = True) -> Path:
    w = writer(path)
    for i, tid in enumerate(ids):
        w.append(trace_rows(tid), position=i)
    if close:
        w.close()
    return path


@pytest.mark.parametrize("close", [True, False], ids=["compacted", "one-part-per-trace"])
def test_datasets_loads_a_table_folder(tmp_path, close):
    """`datasets.load_dataset("parquet", data_dir=OUT)`: the metadata is hidden, so the data
    files are all it reads (the `_cotcredit.json` of 0.2 made it fail)."""
    import datasets

    ids = ["t0", "t1", "t2"]
    out = written_table(tmp_path / "t.parquet", ids, close)
    assert (out / io.META_FILE).exists() and io.journal_path(out).name.startswith(".")
    ds = datasets.load_dataset("parquet", data_dir=str(out), cache_dir=str(tmp_path / "cache"),
                               split="train")
    got = ds.to_pandas()
    want = pd.read_parquet(out)
    assert list(got.columns) == list(want.columns) and len(got) == len(want) == 9
    assert got.trace_id.tolist() == want.trace_id.tolist()
    assert got.score.tolist() == pytest.approx(want.score.tolist())


def test_polars_reads_the_data_files(tmp_path):
    import polars as pl

    out = written_table(tmp_path / "t.parquet", ["t0", "t1", "t2"], close=False)
    got = pl.read_parquet(f"{out}/*.parquet")
    want = pd.read_parquet(out)
    assert got.columns == list(want.columns) and got.height == len(want)
    assert got["trace_id"].to_list() == want.trace_id.tolist()
    assert got["score"].to_list() == pytest.approx(want.score.tolist())


def test_duckdb_reads_the_data_files(tmp_path):
    import duckdb

    out = written_table(tmp_path / "t.parquet", ["t0", "t1", "t2"], close=False)
    got = duckdb.sql(f"select trace_id, segment, score from '{out}/*.parquet' "
                     "order by trace_id, segment").fetchall()
    want = pd.read_parquet(out).sort_values(["trace_id", "segment"])
    assert got == list(zip(want.trace_id, want.segment, want.score))


def test_tables_of_0_2_are_read_and_resumed(tmp_path):
    """Old tables keep their metadata in `_cotcredit.json`: still read (the ones checked in under
    tests/fixtures/ too); a run resuming one moves it to the hidden file, after which `datasets`
    reads the folder."""
    import datasets

    study = FIXTURES / "mc_study_0_2.parquet"  # written by 0.2
    assert (study / io.LEGACY_META_FILE).exists() and io.is_table_folder(study)
    meta = read_metadata(study)
    assert meta["run_id"] and set(pd.read_parquet(study).run_id) == {meta["run_id"]}

    out = written_table(tmp_path / "t.parquet", ["t0", "t1"])
    os.rename(out / io.META_FILE, out / io.LEGACY_META_FILE)  # the 0.2 layout
    assert read_metadata(out) == {"run_id": "run-a", "note": "test"}
    with pytest.raises(UserError, match="different run"):
        writer(out, key="run-b")  # the old metadata still guards the table
    w = writer(out)
    assert w.done == {"t0", "t1"}
    w.append(trace_rows("t2"), position=2)
    w.close()
    assert not (out / io.LEGACY_META_FILE).exists() and (out / io.META_FILE).exists()
    pd.testing.assert_frame_equal(pd.read_parquet(out), expected(["t0", "t1", "t2"]))
    ds = datasets.load_dataset("parquet", data_dir=str(out), cache_dir=str(tmp_path / "cache"),
                               split="train")
    assert ds.num_rows == 9


# ---- the pipeline: streaming, memory, costs, merge -----------------------------------------


def test_stream_stops_reading_at_max_traces(tmp_path):
    from cotcredit.pipeline.run import InputOptions, load_traces

    p = tmp_path / "t.jsonl"
    write_traces(p, 3)
    with open(p, "a") as fh:
        fh.write("{not json\n")
    traces, _ = load_traces(p, InputOptions(max_traces=3))
    assert [t.id for t in traces] == ["tr000", "tr001", "tr002"]  # the bad line is never read
    with pytest.raises(UserError, match=r"t.jsonl:4: invalid JSON"):
        load_traces(p, InputOptions())


def test_rows_go_to_disk_not_to_memory(scorer, traces_file, tmp_path):
    from cotcredit.pipeline.run import SEGMENTS, run_analysis

    out = tmp_path / "rr.parquet"
    s = run_analysis(traces_file, scorer, methods={"rredcot": None}, outputs={"rredcot": out})
    assert s.rows == {} and s.scored == ["t1", "t2", "t3"]
    rows = s.read_rows("rredcot")
    # (null columns, error_char and with R̂ alone v_hat: None in Python rows, NaN once read)
    table = pd.read_parquet(out)
    assert pd.DataFrame(rows).astype(table.dtypes.to_dict()).equals(table)
    assert {r["trace_id"] for r in s.read_rows("rredcot", trace_id="t2")} == {"t2"}
    assert s.read_rows("rredcot", columns=["segment"])[0].keys() == {"segment"}
    mem = run_analysis(traces_file, scorer, methods={"rredcot": None})  # no output: kept
    assert set(mem.rows) == {SEGMENTS, "rredcot"}
    cols = [c for c in pd.read_parquet(out).columns if c != "run_id"]
    kept = pd.DataFrame(mem.rows["rredcot"])[cols].astype(table[cols].dtypes.to_dict())
    pd.testing.assert_frame_equal(kept, table[cols], check_dtype=False)


def test_cost_columns_account_for_every_model_token(scorer, traces_file, tmp_path):
    """Per trace, the shared trace pass plus each forward-only method's own passes add up to what
    the scorer ran (each method's column includes the shared pass: what it would cost alone);
    Monte Carlo's forward tokens are its rollouts' prompts, its generated tokens the generator's;
    seconds only in a timed run."""
    from cotcredit.methods import RunCache
    from cotcredit.methods.mc import McOptions
    from cotcredit.pipeline.run import run_analysis

    outs = {n: tmp_path / f"{n}.parquet" for n in ("segments", "rredcot", "loo", "mc")}
    methods = {"rredcot": None, "loo": None, "mc": McOptions(rollouts=2, max_new_tokens=4)}
    run = RunCache()  # holds the run's generator, whose counts are read below
    before = scorer.forward_tokens
    run_analysis(traces_file, scorer, methods=methods, outputs=outs, timings=True, cache=run)
    spent = scorer.forward_tokens - before
    (gen,) = run.of_kind("generator")
    first = {}
    for name, path in outs.items():
        df = pd.read_parquet(path)
        costs = df.groupby("trace_id")[["cost_forward_tokens", "cost_seconds"]].nunique()
        assert (costs == 1).all().all()  # one value per trace, repeated on its rows
        first[name] = df.groupby("trace_id").first()
        assert (first[name].cost_seconds > 0).all()
        if name == "mc":
            bound = 4 * 2 * (df.groupby("trace_id").size() + 1)
            assert (first[name].cost_generated_tokens <= bound).all()
        elif name != "segments":
            assert (first[name].cost_generated_tokens == 0).all()
    shared = first["segments"].cost_forward_tokens
    own = sum(first[m].cost_forward_tokens - shared for m in ("rredcot", "loo"))
    assert (own > 0).all()
    assert int((shared + own).sum()) == spent
    assert int(first["mc"].cost_forward_tokens.sum()) == gen.stats.prompt_tokens > 0
    assert int(first["mc"].cost_generated_tokens.sum()) == gen.stats.tokens > 0
    untimed = tmp_path / "untimed.parquet"
    run_analysis(traces_file, scorer, methods={"rredcot": None}, outputs={"rredcot": untimed})
    assert "cost_seconds" not in pd.read_parquet(untimed).columns


def test_merge_takes_folders_and_single_files_in_input_order(
    tiny_model_dir, tmp_path, capsys
):
    traces = write_traces(tmp_path / "t.jsonl", 6)
    common = ["--model", tiny_model_dir, "-k", "3", "-q"]
    s0, s1, full = (tmp_path / f"{n}.parquet" for n in ("s0", "s1", "full"))
    for i, p in enumerate((s0, s1)):
        assert run_cli(["segment", traces, "-o", p, "--shard", f"{i}/2", *common], capsys)[0] == 0
    assert run_cli(["segment", traces, "-o", full, *common], capsys)[0] == 0
    merged = tmp_path / "merged.parquet"
    code, _, err = run_cli(["merge", s0, s1, "-o", merged], capsys)
    assert code == 0, err
    assert merged.is_dir() and len(io.data_files(merged)) == 1
    # Every shard numbers its traces by their place in the one input: row for row equal.
    pd.testing.assert_frame_equal(pd.read_parquet(merged), pd.read_parquet(full))
    # s1 as cotcredit 0.1 wrote it, one file (which knows no input positions): same rows.
    table = io.read_table(s1)
    meta = json.dumps(read_metadata(s1)).encode()
    io.remove_table(s1)
    pq.write_table(table.replace_schema_metadata({b"cotcredit": meta}), s1)
    code, _, err = run_cli(["merge", s0, s1, "-o", merged, "--overwrite"], capsys)
    assert code == 0, err
    key = ["trace_id", "segment"]
    pd.testing.assert_frame_equal(
        pd.read_parquet(merged).sort_values(key).reset_index(drop=True), pd.read_parquet(full)
    )


def test_segmentation_digest_follows_the_segments_not_the_files(tmp_path):
    """Runs reusing a segmentation are keyed by its segments: a folder of parts, its compacted
    form and a plain file with other metadata give one digest; a moved boundary another."""
    ids = ["t0", "t1", "t2"]
    parts = tmp_path / "parts.parquet"
    w = writer(parts)
    for i, t in enumerate(ids):
        w.append(trace_rows(t), position=i)
    w.close()  # compacted
    uncompacted = tmp_path / "uncompacted.parquet"
    w = writer(uncompacted)
    for i, t in reversed(list(enumerate(ids))):
        w.append(trace_rows(t), position=i)  # other writing order, left as parts
    rows = [r for t in ids for r in trace_rows(t)]
    single = tmp_path / "single.parquet"
    pq.write_table(tables.rows_to_table(rows, SCHEMA).replace_schema_metadata({b"x": b"y"}),
                   single)
    digests = {tables.rows_by_trace(p).digest() for p in (parts, uncompacted, single)}
    assert len(digests) == 1
    moved = [dict(r) for r in rows]
    moved[1]["char_end"] += 1
    moved[2]["char_start"] += 1
    other = tmp_path / "other.parquet"
    pq.write_table(tables.rows_to_table(moved, SCHEMA), other)
    assert tables.rows_by_trace(other).digest() not in digests
