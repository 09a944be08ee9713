"""Result tables: tidy Parquet with a fixed schema, written one trace at a time, crash-safe and
resumable.

A table's schema is declared up front (segmentation columns, `method`, `score`, the columns each
method declares in its `MethodSpec.columns`, cost columns), never inferred from a trace: a part
must read back with the same columns whatever its trace held. `run_id` (a hash of every option
that changes results, `run_key`) is a column too.

Each finished trace becomes one part file, written hidden and renamed into place, so appending
costs the same at trace 100,000 as at trace 1 and a killed process leaves only whole traces.
Every `MERGE_EVERY` parts a writer merges its own; when a run ends or resumes all files are
compacted into one, in input order. Reopening a table with the same run key skips the traces
already present; a different run key is refused unless `overwrite=True`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import numbers
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cotcredit import distributed
from cotcredit.errors import UserError, first_line
from cotcredit.store import io
from cotcredit.store.io import META_KEY, read_metadata
from cotcredit.store.parts import conform, footer, part_name, part_position, write_merged

# ---- the schema ------------------------------------------------------------------------------
SEGMENT_COLUMNS = [
    ("run_id", pa.string()),
    ("trace_id", pa.string()),
    ("segment", pa.int64()),
    ("char_start", pa.int64()),
    ("char_end", pa.int64()),
    ("token_start", pa.int64()),
    ("token_end", pa.int64()),
    ("n_tokens", pa.int64()),
    ("text", pa.string()),
    ("boundary_entropy", pa.float64()),
    ("mean_entropy", pa.float64()),
    # Where the trace's first error starts in the response (-1: none; null: unknown).
    ("error_char", pa.int64()),
]
METHOD_COLUMNS = [("method", pa.string()), ("score", pa.float64())]
# Per trace, repeated on its rows: model tokens (and, in a timed run, wall seconds) of the step
# that wrote the row (segmentation: encode + forward pass + segmenting; a method: its `run`).
# Seconds are opt-in: they differ between two runs of the same inputs, every other column not.
TOKEN_COLUMNS = [("cost_forward_tokens", pa.int64())]
GENERATED_COLUMN = ("cost_generated_tokens", pa.int64())
SECONDS_COLUMN = ("cost_seconds", pa.float64())


def run_key(spec: dict) -> str:
    """Stable short hash of everything that changes results."""
    blob = json.dumps(spec, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def table_schema(
    methods: Mapping[str, Mapping[str, str]] | None = None, *, timed: bool = False
) -> pa.Schema:
    """The fixed schema of a table of segments, or of rows of `methods` (method name -> its
    declared columns, types as "float64", "int64", "string", "bool"): segmentation columns,
    then `method`, `score` and each method's columns in order, then the cost columns
    (`cost_seconds` only if `timed`)."""
    fields = list(SEGMENT_COLUMNS)
    if methods:
        fields += METHOD_COLUMNS
        seen = {name for name, _ in fields}
        for name, columns in methods.items():
            for col, kind in columns.items():
                try:
                    typ = pa.type_for_alias(kind)
                except ValueError:
                    raise RuntimeError(
                        f"method {name}: column {col} has unknown type '{kind}'"
                    ) from None
                if col not in seen:
                    fields.append((col, typ))
                    seen.add(col)
    fields += TOKEN_COLUMNS
    if methods:
        fields.append(GENERATED_COLUMN)
    if timed:
        fields.append(SECONDS_COLUMN)
    return pa.schema(fields)


class OtherRunTable(UserError):
    """The output path holds a table of another run (other options, model or method), or one
    whose metadata cannot be read: refused unless the writer may overwrite it."""


class NonFiniteScore(UserError):
    """A method produced a NaN or infinite score without a `score_note` explaining it."""


def check_finite(rows: list[dict], where: str) -> None:
    """Refuse rows whose `score` is NaN or infinite (unless a `score_note` says why)."""
    for r in rows:
        v = r.get("score")
        try:
            finite = v is None or isinstance(v, str) or math.isfinite(v)
        except (TypeError, OverflowError):  # not a number / an int beyond float range
            finite = True
        if not finite and not r.get("score_note"):
            raise NonFiniteScore(
                f"{where}: non-finite score ({v}) for trace '{r.get('trace_id')}', method "
                f"'{r.get('method', 'segments')}', segment {r.get('segment')}; the trace was not "
                "written (with --dtype float16 try bfloat16 or float32)"
            )


def _integral(v) -> bool:
    return isinstance(v, numbers.Integral) or (isinstance(v, float) and v.is_integer())


def rows_to_table(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """One trace's rows as a table of exactly `schema` (a missing key is null). A key outside
    the schema, or a value of the wrong type, is a bug in the method that wrote it."""
    names = set(schema.names)
    for r in rows:
        extra = [k for k in r if k not in names]
        if extra:
            raise RuntimeError(
                f"method {r.get('method', 'segments')} wrote column(s) {', '.join(extra)} that "
                "its MethodSpec.columns does not declare"
            )
    arrays = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        bad = None
        if pa.types.is_integer(f.type):  # pyarrow would truncate 2.5 to 2 silently
            bad = next((v for v in values if v is not None and not _integral(v)), None)
        try:
            if bad is not None:
                raise TypeError(f"{bad!r} is not an integer")
            arrays.append(pa.array(values, type=f.type))
        except (pa.ArrowException, TypeError, ValueError) as e:
            method = rows[0].get("method", "segments")
            raise RuntimeError(
                f"method {method}: column {f.name} is declared {f.type} but got a value that is "
                f"not ({first_line(e, 120)})"
            ) from None
    return pa.Table.from_arrays(arrays, schema=schema)


# ---- the writer ------------------------------------------------------------------------------
MERGE_EVERY = 1000  # a writer merges its own part files every so many (see `TableWriter`)
# The schema of a writer given none: the segmentation, method and cost columns, and the
# `score_note` a method writes beside a score it cannot give (see `check_finite`).
DEFAULT_SCHEMA = table_schema({"": {"score_note": "string"}})


def _write_file(table: pa.Table, path: Path) -> None:
    """Write `table` to `path` via a hidden temporary and a rename."""
    tmp = io.temp_path(path)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException as e:  # interrupted or failed: nothing half-written stays visible
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError):  # disk full, permissions, ...
            raise UserError(f"{path.parent}: cannot write ({e.strerror or e})") from None
        raise


def _after_step(step: str) -> None:
    """Called between the steps of a compaction ("journal", "renamed"); tests replace it to
    kill a process at that point."""


def compact(
    folder: str | Path,
    metadata: dict | None = None,
    schema: pa.Schema | None = None,
    *,
    files: list[Path] | None = None,
    everyone: bool = True,
) -> int:
    """Merge data files of `folder` into one (all, or `files`), in input order; returns its rows.
    `schema` (default: the first file's) is the merged file's. Crash-safe through a journal
    (`cotcredit.store.io`). `everyone`: no other process writes now, so every stale journal
    can be dropped.
    """
    folder = Path(folder)
    io.finish_compaction(folder, everyone=everyone)
    if files is None:
        files = io.data_files(folder)
    if not files:
        return 0
    first = io.open_file(files[0])
    same = schema is None or first.schema_arrow.equals(schema, check_metadata=False)
    if len(files) == 1 and same:
        return first.metadata.num_rows
    schema = (first.schema_arrow if schema is None else schema).remove_metadata()
    old = (first.schema_arrow.metadata or {}).get(META_KEY)
    meta = json.dumps(metadata, default=str).encode() if metadata is not None else old
    schema = schema.with_metadata({META_KEY: meta} if meta else None)
    tmp = io.temp_path(folder / "merged")
    journal = io.journal_path(folder)
    target = ""
    try:
        blocks = write_merged(tmp, files, schema)
        target = part_name(min((pos for pos, _ in blocks), default=0))
        io.write_atomic(journal, io.journal_record(target, [f.name for f in files]))
        _after_step("journal")
        os.replace(tmp, folder / target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if not target or not (folder / target).exists():
            with contextlib.suppress(OSError):
                journal.unlink()
        if isinstance(e, OSError):
            raise UserError(f"{folder}: cannot write ({e.strerror or e})") from None
        raise
    _after_step("renamed")
    for f in files:  # another process finishing this journal may delete them too
        with contextlib.suppress(FileNotFoundError):
            f.unlink()
    with contextlib.suppress(FileNotFoundError):
        journal.unlink()
    return sum(n for _, n in blocks)


def _has_rows(path: Path) -> bool:
    return any(footer(f).num_rows for f in io.files_of(path))


class TableWriter:
    """Appends one trace at a time to a table folder, resuming a compatible run.

    `schema` (default `DEFAULT_SCHEMA`) is extended by columns the table already holds. With
    `main=False` (the other processes of a launched run; None: from the launcher) it only
    checks the run key: open the main process's writer first (it repairs and compacts), wait,
    then call `load_done()` elsewhere. `close()` compacts (main process only).
    """

    def __init__(
        self,
        path: str | Path,
        metadata: dict,
        *,
        overwrite: bool = False,
        schema: pa.Schema | None = None,
        main: bool | None = None,
    ):
        auto = main is None
        if auto:  # under a launcher only the main process repairs and compacts
            main = distributed.processes().main
        self.path = Path(path)
        self.metadata = metadata
        self.key = metadata["run_id"]
        self.main = main
        self.declared = schema
        self.schema = schema if schema is not None else DEFAULT_SCHEMA
        self._kv = {META_KEY: json.dumps(metadata, default=str).encode()}
        self._batches: list[pa.Table] = []  # rows waiting for `_flush` (subclasses)
        self._next: int | None = None
        self._parts: list[Path] = []  # this writer's part files not merged yet
        # The empty file a new table starts with (readable, with its schema, from the start);
        # deleted once a trace is written: `datasets` cannot read a zero-row Parquet file.
        self._placeholder: Path | None = None
        self.done: set[str] = set()
        if not overwrite:
            self._check_run()
        if main:
            self._prepare(overwrite)
        if main or auto:  # (explicitly not main: the caller reads once the main one is done)
            self.load_done()

    # ---- opening ------------------------------------------------------------------------------

    def _check_run(self) -> None:
        """Refuse a table of another run (read only: every process of a launch runs it)."""
        staged = self._staging()
        path = staged if staged.exists() and not self.path.exists() else self.path
        if not path.exists():
            return
        if path.is_dir() and not io.is_table_folder(path):
            raise UserError(
                f"{path}: is a folder that is not a cotcredit table; give another output path"
            )
        try:
            old = read_metadata(path)
            has_rows = _has_rows(path)
        except UserError as e:
            raise OtherRunTable(f"{e}; use --overwrite to replace it") from None
        # An empty table (a run that failed before its first trace) holds nothing to mix.
        if old.get("run_id") != self.key and has_rows:
            raise OtherRunTable(
                f"{self.path}: holds results of a different run (options, model or method "
                f"differ: run_id {old.get('run_id')} vs {self.key}); use another output path "
                "or --overwrite"
            )

    def _staging(self) -> Path:
        """Where a single-file table is turned into a folder (see `_convert_single_file`)."""
        return self.path.with_name(f".{self.path.name}.legacy.tmp")

    def _prepare(self, overwrite: bool) -> None:
        """Main process: make `path` a table folder of this run, ready to append to."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"{self.path}: cannot create its folder ({e.strerror or e})") from None
        io.remove_stale_temps(self.path.parent, self.path.name)
        staged = self._staging()
        if staged.exists():  # a conversion was killed: finish it, or drop it and redo it
            if self.path.exists():
                shutil.rmtree(staged, ignore_errors=True)
            else:
                os.rename(staged, self.path)
        if self.path.is_dir() and not io.is_table_folder(self.path):
            raise UserError(
                f"{self.path}: is a folder that is not a cotcredit table; give another output path"
            )
        if self.path.exists() and (overwrite or not _has_rows(self.path)):
            io.remove_table(self.path)
        if self.path.is_file():
            self._convert_single_file()
        if not self.path.exists():
            if self.declared is not None:  # readable (and empty) from the start
                name = part_name(0)
                self._create(self.schema.empty_table(), name)
                self._placeholder = self.path / name
            return
        io.remove_stale_temps(self.path)
        io.write_metadata(self.path, self.metadata)
        files = io.data_files(self.path)
        if files:
            target = self._union(io.open_file(files[0]).schema_arrow)
            # Resuming: one file to read the done ids from, and of the schema new parts have.
            compact(self.path, self.metadata, target)

    def _create(self, table: pa.Table, name: str) -> None:
        """Create the folder with its metadata and a first file at once (built under a hidden
        name, then renamed): a reader never finds it empty."""
        staging = io.temp_path(self.path)
        try:
            staging.mkdir()
            io.write_metadata(staging, self.metadata)
            pq.write_table(table.replace_schema_metadata(self._kv), staging / name)
            try:
                os.rename(staging, self.path)
            except OSError:
                if not self.path.is_dir():
                    raise
                # Another process of the launch created it first: add our file to it.
                os.replace(staging / name, self.path / name)
                shutil.rmtree(staging, ignore_errors=True)
        except BaseException as e:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(e, OSError):
                raise UserError(f"{self.path}: cannot write ({e.strerror or e})") from None
            raise

    def _union(self, existing: pa.Schema) -> pa.Schema:
        """The declared schema plus the columns only `existing` has (none declared: existing)."""
        if self.declared is None:
            return existing.remove_metadata()
        have = set(self.declared.names)
        return pa.schema(list(self.declared) + [f for f in existing if f.name not in have])

    def _convert_single_file(self) -> None:
        """A table written by cotcredit 0.1 (one Parquet file) becomes the first part of the
        folder. Built in a hidden folder, then swapped in; a crash in between is finished by
        the next open (see `_prepare`)."""
        old = io.read_table(self.path)
        staging = self._staging()
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        table = conform(old, self._union(old.schema), self.path)
        pq.write_table(table.replace_schema_metadata(self._kv), staging / part_name(0))
        os.replace(self.path, staging / ".original.parquet")
        os.rename(staging, self.path)
        (self.path / ".original.parquet").unlink()

    def load_done(self) -> None:
        """Read the schema and the ids of the traces the table already holds (after the main
        process opened it)."""
        if not self.path.is_dir():
            return
        for attempt in range(5):  # a file may vanish under us while the main process compacts
            try:
                files = io.data_files(self.path)
                if files:
                    self.schema = io.open_file(files[0]).schema_arrow.remove_metadata()
                ids = io.read_table(self.path, ["trace_id"]).column(0)
                break
            except UserError:
                if attempt == 4:
                    raise
        self.done = set(ids.unique().to_pylist()) if len(ids) else set()

    # ---- appending ----------------------------------------------------------------------------

    def append(self, rows: list[dict], position: int | None = None) -> None:
        """Write one trace's rows as one part file (atomically); `position` (the trace's place
        in the input) orders the rows of the compacted table."""
        if not rows:
            return
        check_finite(rows, str(self.path))
        self._batches.append(rows_to_table(rows, self.schema))
        self.done.update(r["trace_id"] for r in rows)
        self._flush(position)

    def _flush(self, position: int | None = None) -> None:
        """Write the pending batches as one part file."""
        if not self._batches:
            return
        table = pa.concat_tables(self._batches)
        self._batches = []
        if position is None:
            if self._next is None:
                files = io.data_files(self.path) if self.path.is_dir() else []
                self._next = max((part_position(f.name) for f in files), default=-1) + 1
            position = self._next
        if self._next is not None:
            self._next = max(self._next, position + 1)
        name = part_name(position)
        if not self.path.exists():
            self._create(table, name)
        else:
            _write_file(table.replace_schema_metadata(self._kv), self.path / name)
        self._parts.append(self.path / name)
        if self._placeholder is not None:
            with contextlib.suppress(FileNotFoundError):
                self._placeholder.unlink()
            self._placeholder = None
        if len(self._parts) >= MERGE_EVERY:
            self.merge_parts()

    def merge_parts(self) -> None:
        """Merge this writer's own parts into one file (a bounded file count in long runs)."""
        if len(self._parts) > 1:
            compact(self.path, self.metadata, files=self._parts, everyone=False)
        self._parts = []

    def close(self) -> None:
        """Compact the table into one file (main process; the others' parts wait for it). An
        empty table still gets a file: the output always exists."""
        self._parts = []
        if not self.main:
            return
        if not self.path.exists():
            self._create(self.schema.empty_table(), part_name(0))
        compact(self.path, self.metadata)


# ---- reading a segmentation back -------------------------------------------------------------


SEGMENTATION_KEYS = [
    "trace_id", "segment", "char_start", "char_end", "token_start", "token_end",
    "boundary_entropy", "mean_entropy",
]


class StoredSegments(Mapping):
    """A segmentation table (any per-segment table) as trace id -> rows, loaded column-wise
    (no text) so a large table costs a few numbers per segment, not Python objects."""

    def __init__(self, path: str | Path):
        path = Path(path)
        schema_names = _schema_names(path)
        missing = [n for n, _ in SEGMENT_COLUMNS[1:9] if n not in schema_names]
        if missing:
            raise UserError(
                f"{path}: not a segmentation table (missing columns {', '.join(missing)})"
            )
        cols = [c for c in SEGMENTATION_KEYS if c in schema_names]
        has_method = "method" in schema_names
        table = io.read_table(path, cols + (["method"] if has_method else []))
        if has_method and table.num_rows:
            # All methods of one file share a segmentation: keep the first method's rows.
            first = table.column("method")[0].as_py()
            table = table.filter(pc.equal(table.column("method"), first)).drop_columns("method")
        table = table.sort_by([("trace_id", "ascending")])
        self._table = table
        ids = table.column("trace_id").to_pylist()
        self._slices: dict[str, tuple[int, int]] = {}
        start = 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or ids[i] != ids[start]:
                self._slices[str(ids[start])] = (start, i - start)
                start = i

    def digest(self) -> str:
        """A hash of the segments themselves (trace, index, character and token spans), in
        trace and segment order: the same segmentation gives the same digest however its
        folder is laid out (parts, compaction, merged shards, metadata)."""
        table = self._table.sort_by([("trace_id", "ascending"), ("segment", "ascending")])
        h = hashlib.sha256()
        h.update("\x00".join(map(str, table.column("trace_id").to_pylist())).encode())
        for name in ("segment", "char_start", "char_end", "token_start", "token_end"):
            if name in table.column_names:
                h.update(np.asarray(table.column(name).to_numpy(), dtype=np.int64).tobytes())
        return h.hexdigest()[:16]

    def __getitem__(self, trace_id: str) -> list[dict]:
        start, n = self._slices[trace_id]
        return self._table.slice(start, n).to_pylist()

    def __iter__(self) -> Iterator[str]:
        return iter(self._slices)

    def __len__(self) -> int:
        return len(self._slices)


def _schema_names(path: Path) -> list[str]:
    files = io.files_of(path)
    return io.open_file(files[0]).schema_arrow.names if files else []


def rows_by_trace(path: str | Path) -> StoredSegments:
    """Read a segmentation (or any per-segment table) grouped by trace id."""
    return StoredSegments(path)
