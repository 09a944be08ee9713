"""Joining the outputs of one run's shards (`--shard i/n`) into one table.

Every input must be a table of the same run (one `run_id`) and no trace may appear in two;
anything else is refused in one line naming the files. The output (the first input's metadata
plus `merged_from`) is streamed under a hidden name and renamed into place, so it is either
absent or the whole merge.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from cotcredit.errors import UserError
from cotcredit.store import io
from cotcredit.store.io import META_KEY
from cotcredit.store.parts import part_name, write_merged


@dataclass
class MergeSummary:
    """What `merge_tables` wrote: the output, the inputs, rows and traces, and notes."""
    output: Path
    inputs: list[Path]
    rows: int
    traces: int
    notes: list[str] = field(default_factory=list)


@dataclass
class _Input:
    path: Path
    files: list[Path]
    meta: dict
    schema: pa.Schema
    rows: int
    traces: list[str]


def _read(path: Path) -> _Input:
    """An input's files, metadata, schema and trace ids (the rows stay on disk)."""
    files = io.files_of(path)
    meta = io.read_metadata(path)
    if not meta.get("run_id"):
        raise UserError(f"{path}: not a cotcredit table (no run metadata); cannot merge it")
    if not files:
        raise UserError(f"{path}: holds no data file; cannot merge it")
    schema = io.open_file(files[0]).schema_arrow
    if "trace_id" not in schema.names:
        raise UserError(f"{path}: has no trace_id column; cannot merge it")
    cols = ["trace_id"] + (["run_id"] if "run_id" in schema.names else [])
    table = io.read_table(path, cols)
    if "run_id" in table.column_names and table.num_rows:
        ids = set(table.column("run_id").unique().to_pylist())
        if ids != {meta["run_id"]}:
            raise UserError(
                f"{path}: rows of another run (run_id {', '.join(sorted(map(str, ids)))}) than "
                f"its metadata ({meta['run_id']}); cannot merge it"
            )
    traces = table.column("trace_id").unique().to_pylist()
    return _Input(path, files, meta, schema, table.num_rows, traces)


def merge_tables(
    inputs: Sequence[str | Path], output: str | Path, *, overwrite: bool = False
) -> MergeSummary:
    """Concatenate shard tables of one run into the table `output`."""
    paths = [Path(p) for p in inputs]
    output = Path(output)
    if not paths:
        raise UserError("merge: give at least one input file")
    seen: dict[Path, Path] = {}
    for p in paths:
        key = p.resolve()
        if key in seen:
            raise UserError(f"{p}: given twice (also as {seen[key]})")
        seen[key] = p
    if output.resolve() in seen:
        raise UserError(f"{output}: is also an input; write the merge to another path")
    if output.exists() and not overwrite:
        raise UserError(f"{output}: exists; use another output path or --overwrite")
    if output.is_dir() and not io.is_table_folder(output):
        raise UserError(f"{output}: is a folder that is not a cotcredit table; give another path")

    read: list[_Input] = []
    owner: dict[str, Path] = {}
    for p in paths:
        inp = _read(p)
        if read and inp.meta["run_id"] != read[0].meta["run_id"]:
            raise UserError(
                f"{paths[0]} and {p} hold different runs (run_id {read[0].meta['run_id']} vs "
                f"{inp.meta['run_id']}: model, options or methods differ); merge only shards of "
                "one run"
            )
        clash = [t for t in inp.traces if t in owner]
        if clash:
            more = f" and {len(clash) - 3} more" if len(clash) > 3 else ""
            names = ", ".join(f"'{t}'" for t in clash[:3])
            raise UserError(
                f"{owner[clash[0]]} and {p} both hold trace {names}{more}; merge only disjoint "
                "shards (or drop one file)"
            )
        owner.update((t, p) for t in inp.traces)
        read.append(inp)

    notes = []
    versions = sorted({str(i.meta.get("cotcredit_version")) for i in read})
    if len(versions) > 1:
        notes.append(f"inputs were written by cotcredit versions {', '.join(versions)}")
    shards = [i.meta.get("shard") for i in read]
    if all(shards):
        ns = {int(str(s).split("/")[1]) for s in shards}
        have = {int(str(s).split("/")[0]) for s in shards}
        if len(ns) == 1 and len(have) == len(shards):
            missing = sorted(set(range(ns.pop())) - have)
            if missing:
                notes.append(
                    f"shard(s) {', '.join(str(i) for i in missing)} of {shards[0].split('/')[1]} "
                    "are not among the inputs: the merged table is incomplete"
                )

    meta = dict(read[0].meta)
    meta.pop("shard", None)
    meta["merged_from"] = [
        {
            "file": str(i.path),
            "rows": i.rows,
            "traces": len(i.traces),
            "shard": i.meta.get("shard"),
            "created": i.meta.get("created"),
        }
        for i in read
    ]
    try:  # older inputs may hold null-typed columns: take the widest type of each column
        schema = pa.unify_schemas([i.schema.remove_metadata() for i in read],
                                  promote_options="permissive")
    except (pa.ArrowException, ValueError) as e:
        raise UserError(f"merge: the inputs hold different columns ({e})") from None
    blob = json.dumps(meta, default=str)
    schema = schema.with_metadata({META_KEY: blob.encode()})

    output.parent.mkdir(parents=True, exist_ok=True)
    staging = io.temp_path(output)
    try:
        staging.mkdir()
        # In input order (every shard numbers its traces by their place in the one input).
        blocks = write_merged(staging / part_name(0), [f for i in read for f in i.files], schema)
        rows = sum(n for _, n in blocks)
        io.write_metadata(staging, meta)
        if output.exists():
            io.remove_table(output)
        os.rename(staging, output)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, OSError):
            raise UserError(f"{output}: cannot write ({e.strerror or e})") from None
        raise
    return MergeSummary(output, paths, rows, len(owner), notes)
