"""Joining the outputs of one run's shards (`--shard i/n`) into one table.

Every input must be a cotcredit table of the same run (one `run_id`: same model, segmentation,
methods and options) and no trace may appear in two inputs; anything else is refused with one
line naming the files, never mixed. The output keeps the run metadata of the first input plus
`merged_from` (file, rows, traces, shard of each input) and is written through a temporary
file and `os.replace`, so it is either the old file or the whole merge.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cotcredit.errors import UserError
from cotcredit.tables import META_KEY


@dataclass
class MergeSummary:
    output: Path
    inputs: list[Path]
    rows: int
    traces: int
    notes: list[str] = field(default_factory=list)


def _read(path: Path) -> tuple[pa.Table, dict]:
    if not path.exists():
        raise UserError(f"{path}: no such file")
    if path.is_dir():
        raise UserError(f"{path}: is a directory, expected a Parquet file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise UserError(f"{path}: not a readable Parquet file ({first})") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else {}
    except ValueError:
        meta = {}
    if not meta.get("run_id"):
        raise UserError(f"{path}: not a cotcredit table (no run metadata); cannot merge it")
    if "trace_id" not in table.column_names:
        raise UserError(f"{path}: has no trace_id column; cannot merge it")
    if "run_id" in table.column_names and table.num_rows:
        ids = set(table.column("run_id").to_pylist())
        if ids != {meta["run_id"]}:
            raise UserError(
                f"{path}: rows of another run (run_id {', '.join(sorted(map(str, ids)))}) than "
                f"its metadata ({meta['run_id']}); cannot merge it"
            )
    return table, meta


def merge_tables(
    inputs: Sequence[str | Path], output: str | Path, *, overwrite: bool = False
) -> MergeSummary:
    """Concatenate shard tables of one run into `output` (see the module docstring)."""
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
    if output.is_dir():
        raise UserError(f"{output}: is a directory; give a .parquet file path")
    if output.exists() and not overwrite:
        raise UserError(f"{output}: exists; use another output path or --overwrite")

    tables, metas = [], []
    owner: dict[str, Path] = {}
    for p in paths:
        table, meta = _read(p)
        if metas and meta["run_id"] != metas[0]["run_id"]:
            raise UserError(
                f"{paths[0]} and {p} hold different runs (run_id {metas[0]['run_id']} vs "
                f"{meta['run_id']}: model, options or methods differ); merge only shards of one run"
            )
        ids = list(dict.fromkeys(table.column("trace_id").to_pylist()))
        clash = [t for t in ids if t in owner]
        if clash:
            more = f" and {len(clash) - 3} more" if len(clash) > 3 else ""
            names = ", ".join(f"'{t}'" for t in clash[:3])
            raise UserError(
                f"{owner[clash[0]]} and {p} both hold trace {names}{more}; merge only disjoint "
                "shards (or drop one file)"
            )
        owner.update((t, p) for t in ids)
        tables.append(table.replace_schema_metadata(None))
        metas.append(meta)

    notes = []
    versions = sorted({str(m.get("cotcredit_version")) for m in metas})
    if len(versions) > 1:
        notes.append(f"inputs were written by cotcredit versions {', '.join(versions)}")
    shards = [m.get("shard") for m in metas]
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

    merged = pa.concat_tables(tables, promote_options="permissive")
    meta = dict(metas[0])
    meta.pop("shard", None)
    meta["merged_from"] = [
        {
            "file": str(p),
            "rows": t.num_rows,
            "traces": len(set(t.column("trace_id").to_pylist())),
            "shard": m.get("shard"),
            "created": m.get("created"),
        }
        for p, t, m in zip(paths, tables, metas)
    ]
    merged = merged.replace_schema_metadata({META_KEY: json.dumps(meta, default=str).encode()})
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(merged, tmp)
        os.replace(tmp, output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return MergeSummary(output, paths, merged.num_rows, len(owner), notes)
