"""Files on disk: atomic writes, and reading a cotcredit table (one Parquet file or a folder).

A result table is a Parquet dataset folder (`rredcot.parquet/`): data files
`part-<input position>-<id>.parquet`, read in name order, plus `.cotcredit.json` (the run
metadata; `_cotcredit.json` before 0.3, still read). Everything that is not data has a hidden
name, which pyarrow, pandas, `datasets` and `*.parquet` globs all skip.

Compaction writes the merged file hidden, records its sources in a journal, renames it into
place, then deletes the sources and the journal. Killed midway, the readers here apply the
unfinished journal and the next writer finishes it (`finish_compaction`). Journals are per
process, so launched processes merge their own parts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from cotcredit.errors import UserError, first_line

if TYPE_CHECKING:  # pyarrow loads with the first table read (keeps `--help` fast)
    import pyarrow as pa
    import pyarrow.parquet as pq

META_KEY = b"cotcredit"  # Parquet key-value metadata key of the run metadata
META_FILE = ".cotcredit.json"  # the run metadata of a table folder
LEGACY_META_FILE = "_cotcredit.json"  # where tables of cotcredit <= 0.2 keep it
# Journals of unfinished compactions: .compaction-<host>-<pid>-<id>.json (<= 0.2: _compaction).
JOURNAL = ".compaction"
_LEGACY_JOURNAL = "_compaction"

_HOST = socket.gethostname().replace(".", "-") or "host"


def temp_path(path: Path) -> Path:
    """A hidden sibling of `path` that names this host and process (see `remove_stale_temps`)."""
    return path.with_name(f".{path.name}.{_HOST}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write a file via a hidden temporary sibling and a rename: readers see the old file or the
    whole new one, never half of it."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _owner(name: str, stem: str | None = None) -> tuple[str, int] | None:
    """(host, pid) of a temporary name `.{stem}.{host}.{pid}.{id}.tmp` (or the older
    `.{stem}.{pid}.tmp`, meaning this host), or None for names of another shape."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    body = name[1:-4]
    if stem is None:
        rest = body.rsplit(".", 3)[1:]
    elif body.startswith(stem + "."):
        rest = body[len(stem) + 1 :].split(".")
        if len(rest) == 1 and rest[0].isdigit():
            return _HOST, int(rest[0])
    else:
        return None
    if len(rest) == 3 and rest[1].isdigit() and len(rest[2]) == 8:
        return rest[0], int(rest[1])
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
    return True


def remove_stale_temps(folder: Path, stem: str | None = None) -> None:
    """Delete temporary files (or folders) in `folder` left by killed processes of this host.

    `stem` limits it to temporaries of one file name (`.{stem}.….tmp`); None means any. A
    temporary of another host (a shared file system) or of a live process is left alone.
    """
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        owner = _owner(entry.name, stem)
        if owner is None or owner[0] != _HOST or owner[1] == os.getpid() or _alive(owner[1]):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


# ---- reading ---------------------------------------------------------------------------------


def journal_path(folder: Path) -> Path:
    """A new journal name for this process."""
    return folder / f"{JOURNAL}-{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:8]}.json"


def _journals(folder: Path) -> list[tuple[Path, dict]]:
    out = []
    names = (*folder.glob(f"{JOURNAL}-*.json"), *folder.glob(f"{_LEGACY_JOURNAL}-*.json"))
    for p in sorted(names):
        try:
            out.append((p, json.loads(p.read_text())))
        except (OSError, ValueError):  # written atomically: unreadable means just deleted
            continue
    return out


def data_files(folder: Path) -> list[Path]:
    """The data files of a table folder in name order, with unfinished compactions applied
    (once a merged file is in place, the files it merged are not part of the table)."""
    names = sorted(
        e.name for e in os.scandir(folder) if not e.name.startswith((".", "_")) and e.is_file()
    )
    present = set(names)
    merged: set[str] = set()
    for _, journal in _journals(folder):
        if journal.get("target") in present:
            merged.update(n for n in journal.get("sources", ()) if n != journal["target"])
    return [folder / n for n in names if n not in merged]


def finish_compaction(folder: Path, everyone: bool = False) -> None:
    """Complete the compactions that killed processes left half done: with the merged file in
    place its sources are deleted; without it the journal is dropped (the sources are whole,
    the hidden merged file is a stale temporary). A journal without its merged file is dropped
    only if its process is gone (or `everyone`: no other process can be writing now)."""
    for path, journal in _journals(folder):
        target = str(journal.get("target"))
        if (folder / target).exists():
            for name in journal.get("sources", ()):
                if name != target:
                    with contextlib.suppress(FileNotFoundError):
                        (folder / name).unlink()
        elif not everyone:
            host, pid = journal.get("host"), int(journal.get("pid", 0))
            if host != _HOST or (pid != os.getpid() and _alive(pid)):
                continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def journal_record(target: str, sources: list[str]) -> str:
    """The journal of a compaction writing `target` from `sources`."""
    return json.dumps(
        {"target": target, "sources": sources, "host": _HOST, "pid": os.getpid()}
    )


def check_exists(path: Path) -> None:
    """A one-line UserError when `path` does not exist."""
    if not path.exists():
        raise UserError(f"{path}: no such file")


def open_file(path: Path) -> pq.ParquetFile:
    """A Parquet file opened for reading, or a one-line UserError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({first_line(e)})") from None


def files_of(path: str | Path) -> list[Path]:
    """The data files of a table: the file itself, or a folder's `data_files`."""
    path = Path(path)
    check_exists(path)
    return data_files(path) if path.is_dir() else [path]


def read_table(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """A cotcredit table (file or folder) as one Arrow table, with one-line UserErrors; a column
    some file lacks is null there, a requested column the table lacks is an error."""
    import pyarrow as pa

    path = Path(path)
    files = files_of(path)
    tables = []
    schema = None
    for f in files:
        pf = open_file(f)
        if schema is None:
            schema = pf.schema_arrow
            if columns is not None:
                missing = [c for c in columns if c not in schema.names]
                if missing:
                    raise UserError(f"{path}: has no column(s) {', '.join(missing)}")
        try:
            t = pf.read(columns=columns)
        except (pa.ArrowException, OSError) as e:
            raise UserError(f"{f}: not a readable Parquet file ({first_line(e)})") from None
        tables.append(t)
    if not tables:
        return pa.table({c: pa.array([], pa.null()) for c in columns or []})
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException as e:
        raise UserError(f"{path}: its files hold different columns ({first_line(e)})") from None


def metadata_file(folder: Path) -> Path | None:
    """The run metadata file of a table folder (`.cotcredit.json`, or `_cotcredit.json` of a
    table of cotcredit <= 0.2), None when it has none."""
    for name in (META_FILE, LEGACY_META_FILE):
        if (folder / name).exists():
            return folder / name
    return None


def write_metadata(folder: Path, metadata: dict) -> None:
    """Write a table folder's run metadata (atomically), replacing the `_cotcredit.json` of
    cotcredit <= 0.2, which `datasets` would try to read as data."""
    write_atomic(folder / META_FILE, json.dumps(metadata, default=str, indent=1))
    with contextlib.suppress(FileNotFoundError):
        (folder / LEGACY_META_FILE).unlink()


def read_metadata(path: str | Path) -> dict:
    """The run metadata of a cotcredit table ({} for other Parquet files): `.cotcredit.json`
    (or the older `_cotcredit.json`) of a folder, else the `cotcredit` key-value metadata of its
    (first) file."""
    path = Path(path)
    check_exists(path)
    if path.is_dir():
        meta = metadata_file(path)
        if meta is not None:
            try:
                return json.loads(meta.read_text())
            except (OSError, ValueError) as e:
                raise UserError(f"{meta}: unreadable run metadata ({first_line(e)})") from None
        files = data_files(path)
        if not files:
            return {}
        path = files[0]
    raw = (open_file(path).schema_arrow.metadata or {}).get(META_KEY)
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {}


def is_table_folder(path: Path) -> bool:
    """A folder cotcredit may write into or delete: it has run metadata, or nothing visible but
    Parquet files."""
    if metadata_file(path) is not None:
        return True
    return all(
        e.name.startswith((".", "_")) or (e.is_file() and e.name.endswith(".parquet"))
        for e in os.scandir(path)
    )


def remove_table(path: str | Path) -> None:
    """Delete a table (file or folder; never a folder that is not a table): a folder is renamed
    to a hidden name first, so a crash midway never leaves half a table under the real name."""
    path = Path(path)
    if path.is_dir() and not is_table_folder(path):
        raise UserError(f"{path}: is a folder that is not a cotcredit table; not deleting it")
    if path.is_dir() and not path.is_symlink():
        doomed = temp_path(path)
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def relative(path: str | Path, start: str | Path) -> str:
    """`path` as written relative to the folder `start` (for reports and notes that travel
    with their outputs); absolute only where no relative path exists (another drive)."""
    try:
        return os.path.relpath(Path(path).absolute(), Path(start).absolute())
    except ValueError:
        return str(path)
