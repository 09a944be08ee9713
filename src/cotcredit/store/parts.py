"""The data files of a table folder: their names (a trace's input position), the traces each
holds, and merging several into one file in input order.

A part file holds one trace and is named `part-<input position>-<id>.parquet`, so name order is
input order; a merged file lists the (position, rows) of its traces in its key-value metadata
(`BLOCKS_KEY`). `write_merged` streams files into one, trace by trace in input order.
"""

from __future__ import annotations

import base64
import heapq
import re
import uuid
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cotcredit.errors import UserError
from cotcredit.store import io

PART_ROWS = 64 * 1024  # rows per row group of a merged file (also bounded by bytes)
PART_BYTES = 64 << 20
BLOCKS_KEY = b"cotcredit.blocks"  # (input position, rows) of each trace of a merged file
_PART = re.compile(r"^part-(\d+)-")


def part_position(name: str) -> int:
    """The input position of a part file `part-<position>-<id>.parquet` (0 for other names)."""
    m = _PART.match(name)
    return int(m.group(1)) if m else 0


def part_name(position: int) -> str:
    """Data file name of a trace at input `position`: name order is input order."""
    return f"part-{position:020d}-{uuid.uuid4().hex[:8]}.parquet"


def _encode_blocks(blocks: list[tuple[int, int]]) -> bytes:
    """(input position, rows) of each trace of a merged file, compactly (deltas, zlib)."""
    arr = np.asarray(blocks, dtype=np.int64).reshape(-1, 2)
    arr[1:, 0] = np.diff(arr[:, 0])
    return base64.b64encode(zlib.compress(arr.tobytes()))


def file_blocks(f: Path, meta: pq.FileMetaData) -> list[tuple[int, int]]:
    """(input position, rows) of each trace in a data file, in file order: a merged file lists
    them in its metadata, a part file is one trace at the position in its name, any other file
    (cotcredit 0.1) one block."""
    raw = (meta.metadata or {}).get(BLOCKS_KEY)  # written last: not in schema_arrow
    if raw:
        arr = np.frombuffer(zlib.decompress(base64.b64decode(raw)), np.int64).reshape(-1, 2)
        arr = arr.copy()
        arr[:, 0] = np.cumsum(arr[:, 0])
        return [(int(a), int(b)) for a, b in arr if b]
    return [(part_position(f.name), meta.num_rows)] if meta.num_rows else []


class _Cursor:
    """The rows of one file, handed out in file order, one batch in memory at a time."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.file = io.open_file(path)
        self.batches = self.file.iter_batches(batch_size=8192)
        self.path, self.schema = path, schema
        self.buf: pa.Table | None = None

    def take(self, n: int) -> list[pa.Table]:
        out = []
        while n:
            if self.buf is None or self.buf.num_rows == 0:
                self.buf = conform(pa.Table.from_batches([next(self.batches)]), self.schema,
                                    self.path)
            k = min(n, self.buf.num_rows)
            out.append(self.buf.slice(0, k))
            self.buf = self.buf.slice(k)
            n -= k
        return out


def write_merged(path: Path, files: list[Path], schema: pa.Schema) -> list[tuple[int, int]]:
    """Merge the rows of `files` into one Parquet file of `schema`, trace by trace in input
    order (by the positions `file_blocks` gives; ties in name order), and record those positions
    in its metadata. Streams: memory holds one batch per file whose traces interleave with
    others' at this point (one per process), and one output row group. Returns the blocks."""
    streams = [[(pos, i, n) for pos, n in file_blocks(f, footer(f))] for i, f in enumerate(files)]
    left = [len(st) for st in streams]
    cursors: dict[int, _Cursor] = {}
    blocks: list[tuple[int, int]] = []
    buffer: list[pa.Table] = []
    rows = size = 0
    with pq.ParquetWriter(path, schema) as writer:
        for pos, i, n in heapq.merge(*streams):
            if i not in cursors:  # opened when its first trace is due: few files open at once
                cursors[i] = _Cursor(files[i], schema)
            for t in cursors[i].take(n):
                buffer.append(t)
                rows += t.num_rows
                size += t.nbytes
            blocks.append((pos, n))
            left[i] -= 1
            if not left[i]:  # done with this file: close it, free its batch
                cursors.pop(i).file.close()
            if rows >= PART_ROWS or size >= PART_BYTES:
                writer.write_table(pa.concat_tables(buffer))
                buffer, rows, size = [], 0, 0
        if buffer or not blocks:
            writer.write_table(pa.concat_tables(buffer) if buffer else schema.empty_table())
        writer.add_key_value_metadata({BLOCKS_KEY: _encode_blocks(blocks)})
    return blocks


def footer(path: Path) -> pq.FileMetaData:
    """A Parquet file's footer (row count, key-value metadata), or a one-line UserError."""
    try:
        return pq.read_metadata(path)
    except (pa.ArrowException, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise UserError(f"{path}: not a readable Parquet file ({first})") from None


def conform(table: pa.Table, schema: pa.Schema, source: Path) -> pa.Table:
    """`table` with exactly the columns of `schema` (missing ones null)."""
    if table.schema.equals(schema, check_metadata=False):
        return table.replace_schema_metadata(schema.metadata)
    extra = [n for n in table.column_names if n not in schema.names]
    if extra:
        raise UserError(
            f"{source}: has column(s) {', '.join(extra)} that the table's first file lacks; "
            "it does not belong to this table"
        )
    cols = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type)
        for f in schema
    ]
    try:
        return pa.Table.from_arrays(cols, names=schema.names).cast(schema)
    except (pa.ArrowException, ValueError) as e:
        raise UserError(f"{source}: columns of other types than the table's ({e})") from None
