"""Result tables: tidy Parquet written per trace, atomically, and resumable.

Every output has one row per (trace, segment[, method]) with the segmentation columns first.
Run metadata (package version, model, options, run key) lives in the Parquet key-value metadata
under `cotcredit`; `run_id` (a hash of every option that changes results) is also a column.
A table is rewritten through a temporary file and `os.replace` after each trace, so a killed
process leaves a readable file holding only whole traces; reopening it with the same run key
skips the traces already present, and a different run key is refused unless `overwrite=True`.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from cotcredit.errors import UserError

META_KEY = b"cotcredit"

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
]


def run_key(spec: dict) -> str:
    """Stable short hash of everything that changes results."""
    blob = json.dumps(spec, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def read_metadata(path: Path) -> dict:
    """The run metadata stored in a cotcredit Parquet file ({} for other files)."""
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(META_KEY)
    return json.loads(raw) if raw else {}


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


_check_finite = check_finite  # old name


class TableWriter:
    """Appends rows per trace to one Parquet file, atomically, resuming a compatible run."""

    def __init__(self, path: str | Path, metadata: dict, *, overwrite: bool = False):
        self.path = Path(path)
        self.metadata = metadata
        self.key = metadata["run_id"]
        self._batches: list[pa.Table] = []
        self.done: set[str] = set()
        if self.path.is_dir():
            raise UserError(f"{self.path}: is a directory; give a .parquet file path")
        if self.path.exists() and not overwrite:
            try:
                old_meta = read_metadata(self.path)
                old = pq.read_table(self.path)
            except (pa.ArrowInvalid, OSError) as e:
                raise UserError(
                    f"{self.path}: exists but is not a readable Parquet file ({e}); "
                    "use --overwrite to replace it"
                ) from None
            # An empty table (a run that failed before its first trace) holds nothing to mix.
            if old_meta.get("run_id") != self.key and old.num_rows:
                raise UserError(
                    f"{self.path}: holds results of a different run (options, model or method "
                    f"differ: run_id {old_meta.get('run_id')} vs {self.key}); use another output "
                    "path or --overwrite"
                )
            if old.num_rows:
                self._batches.append(old)
                self.done = set(old.column("trace_id").to_pylist())
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"{self.path}: cannot create its folder ({e.strerror or e})") from None
        _remove_stale_temps(self.path)

    def append(self, rows: list[dict]) -> None:
        """Add one trace's rows and rewrite the file atomically."""
        if not rows:
            return
        check_finite(rows, str(self.path))
        # Union of the rows' keys: from_pylist alone takes the columns of the first row only, and
        # the methods sharing one file each add their own columns.
        names = list(dict.fromkeys(k for r in rows for k in r))
        table = pa.Table.from_pylist([{k: r.get(k) for k in names} for r in rows])
        # No cast to the first trace's schema: a column that was all None there (e.g. v_hat of a
        # trace without solution) is typed null; concat_tables promotes it permissively.
        self._batches.append(table)
        self.done.update(r["trace_id"] for r in rows)
        self._flush()

    def _flush(self) -> None:
        table = pa.concat_tables(self._batches, promote_options="permissive")
        self._batches = [table]
        meta = dict(table.schema.metadata or {})
        meta[META_KEY] = json.dumps(self.metadata, default=str).encode()
        table = table.replace_schema_metadata(meta)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, self.path)
        except BaseException as e:  # interrupted or failed: the old file stays, the temp goes
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            if isinstance(e, OSError):  # disk full, permissions, ...
                raise UserError(f"{self.path}: cannot write ({e.strerror or e})") from None
            raise

    def close(self) -> None:
        """Write an empty table if nothing was written (so the output always exists)."""
        if not self.path.exists():
            schema = pa.schema(SEGMENT_COLUMNS)
            self._batches = [schema.empty_table()]
            self._flush()


def _remove_stale_temps(path: Path) -> None:
    """Delete temp files of `path` left by killed writers (their process no longer exists)."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -4]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:  # exists but not ours (PermissionError): leave it
            pass


def rows_by_trace(path: str | Path) -> dict[str, list[dict]]:
    """Read a segmentation (or any per-segment table) grouped by trace id."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({e})") from None
    missing = [n for n, _ in SEGMENT_COLUMNS[1:] if n not in table.column_names]
    if missing:
        raise UserError(f"{path}: not a segmentation table (missing columns {', '.join(missing)})")
    if "method" in table.column_names and table.num_rows:
        # All methods of one file share a segmentation: keep the first method's rows.
        first = table.column("method")[0].as_py()
        table = table.filter(pa.compute.equal(table.column("method"), first))
    out: dict[str, list[dict]] = {}
    for r in table.to_pylist():
        out.setdefault(str(r["trace_id"]), []).append(r)
    return out


def concat_rows(groups: Iterable[list[dict]]) -> list[dict]:
    return [r for g in groups for r in g]
