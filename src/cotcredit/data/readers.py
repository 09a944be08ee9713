"""Input records (one dict per trace or problem) from every form data comes in, as a stream of
`(number, record, error)`: JSONL (gzipped too), JSON, Parquet files and folders (by record
batch, never whole), `datasets` folders and hub ids (`split`, `subset`). `number` is the line or
1-based row; `error` is set for a line that is not valid UTF-8 or JSON, so a caller can skip
it. A problem with the input as a whole is one `UserError` line naming it.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cotcredit.errors import UserError, first_line
from cotcredit.extras import require

BATCH_ROWS = 1024  # rows decoded to Python at a time from Arrow inputs
Item = tuple[int, "dict | Any", "str | None"]  # (line or row, record, error)


def decode_json(text: str) -> tuple[Any, str | None]:
    """(value, None) for valid JSON text, else (None, reason)."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"invalid JSON ({e.msg} at column {e.colno})"
    except RecursionError:
        return None, "invalid JSON (nested too deeply)"
    except ValueError as e:  # e.g. an integer literal over 4300 digits
        return None, f"invalid JSON ({str(e).split(';')[0]})"


@dataclass
class Records:
    """An opened input: `name` for messages, `kind` (jsonl, json, parquet, arrow, dataset), and
    `iter()` streaming `(number, record, error)`; `count()` is the number of records (cheap
    for Arrow inputs, a pass over the lines for text)."""

    name: str
    kind: str
    path: Path | None
    dataset: Any = None  # a datasets.Dataset for arrow/dataset inputs
    files: tuple[Path, ...] = ()

    def __iter__(self) -> Iterator[Item]:
        if self.kind == "jsonl":
            return _jsonl(self.path)
        if self.kind == "json":
            return _json_list(self.path)
        if self.kind == "parquet":
            return _parquet(self.files, self.name)
        return _arrow(self.dataset)

    def count(self) -> int:
        """The number of records (cheap for Arrow inputs; a pass over the lines for text)."""
        if self.kind == "jsonl":
            with _open_text(self.path) as fh:
                return sum(1 for line in fh if line.strip())
        if self.kind == "json":
            return sum(1 for _ in _json_list(self.path))
        if self.kind == "parquet":
            import pyarrow.parquet as pq

            return sum(pq.ParquetFile(f).metadata.num_rows for f in self.files)
        return len(self.dataset)


def _open_text(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _jsonl(path: Path) -> Iterator[Item]:
    try:
        with _open_text(path) as fh:
            for n, raw in enumerate(fh, start=1):
                try:
                    s = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    yield n, None, f"not valid UTF-8 (byte {e.start})"
                    continue
                if n == 1 and s.startswith("\ufeff"):
                    s = s[1:]
                if not s.strip():
                    continue
                obj, err = decode_json(s)
                yield n, obj, err
    except (OSError, EOFError) as e:  # a truncated or corrupt .gz
        raise UserError(f"{path}: cannot read ({first_line(e, 300)})") from None


def _json_list(path: Path) -> Iterator[Item]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not valid UTF-8 (byte {e.start})") from None
    if not text.lstrip().startswith("["):  # JSON lines under a .json name
        yield from _jsonl(path)
        return
    value, err = decode_json(text)
    if err:
        raise UserError(f"{path}: {err}")
    for n, obj in enumerate(value, start=1):
        yield n, obj, None


def _parquet(files: tuple[Path, ...], name: str) -> Iterator[Item]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 0
    for f in files:
        try:
            # Buffered column reads without pre-buffering: a row group is not read whole first.
            pf = pq.ParquetFile(f, buffer_size=1 << 20, pre_buffer=False)
            for batch in pf.iter_batches(batch_size=BATCH_ROWS):
                for obj in batch.to_pylist():
                    n += 1
                    yield n, obj, None
        except (pa.ArrowException, OSError) as e:
            raise UserError(f"{f}: not a readable Parquet file ({first_line(e, 300)})") from None


def _arrow(dataset) -> Iterator[Item]:
    n = 0
    for table in dataset.with_format("arrow").iter(batch_size=BATCH_ROWS):
        for obj in table.to_pylist():
            n += 1
            yield n, obj, None


def _quiet_datasets() -> None:
    import datasets

    datasets.utils.logging.disable_progress_bar()
    datasets.utils.logging.set_verbosity_error()


def _pick_split(dd, name: str, split: str | None):
    """One split of a DatasetDict: `split`, or the only one."""
    splits = list(dd.keys())
    if split is None:
        if len(splits) == 1:
            return dd[splits[0]], f"{name}:{splits[0]}"
        raise UserError(f"{name}: has splits {', '.join(splits)}; choose one with --split")
    if split not in dd:
        raise UserError(
            f"{name}: no split '{split}' (it has {', '.join(splits)}); choose one with --split"
        )
    return dd[split], f"{name}:{split}"


def _saved_dataset(path: Path, split: str | None) -> Records:
    require(f"reading {path} (a datasets folder)", "data")
    import datasets

    _quiet_datasets()
    try:
        ds = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as e:
        raise UserError(f"{path}: not a readable datasets folder ({first_line(e, 300)})") from None
    name = str(path)
    if isinstance(ds, datasets.DatasetDict):
        ds, name = _pick_split(ds, name, split)
    elif split is not None and split != str(ds.split or split):
        raise UserError(f"{path}: holds split '{ds.split}', not '{split}'")
    return Records(name, "arrow", path, dataset=ds)


def _hub_dataset(ident: str, split: str | None, subset: str | None, folder: bool = False
                 ) -> Records:
    what = ("a folder of data files; reading it" if folder
            else "no such file or folder; reading it as a dataset id")
    require(f"{ident}: {what}", "data")
    import datasets

    _quiet_datasets()
    name = ident + (f"[{subset}]" if subset else "")
    try:
        ds = datasets.load_dataset(ident, subset, split=split)
    except ValueError as e:  # unknown split or configuration: datasets lists the known ones
        text = first_line(e, 300)
        if "unknown split" in text.lower():
            raise UserError(
                f"{name}: no split '{split}' ({text}); choose one with --split") from None
        if folder:
            raise UserError(f"{ident}: is a directory that datasets cannot read as a dataset "
                            f"({text})") from None
        raise UserError(f"{name}: {text}; choose one with --subset") from None
    except (ConnectionError, FileNotFoundError, OSError) as e:
        if folder:
            raise UserError(f"{ident}: is a directory that datasets cannot read as a dataset "
                            f"({first_line(e, 300)})") from None
        raise UserError(
            f"{ident}: no such file, folder or dataset in the local Hugging Face cache "
            f"({first_line(e, 300)})"
        ) from None
    except Exception as e:  # noqa: BLE001  (datasets raises many kinds for a bad id)
        what = "is a directory that datasets cannot read as a dataset" if folder else (
            "cannot load the dataset")
        raise UserError(f"{ident}: {what} ({first_line(e, 300)})") from None
    if isinstance(ds, datasets.DatasetDict):
        ds, name = _pick_split(ds, name, split)
    else:
        name = f"{name}:{split}"
    return Records(name, "dataset", None, dataset=ds)


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_info.json").exists() and (path / "state.json").exists() or (
        path / "dataset_dict.json"
    ).exists()


_DATA_SUFFIXES = (".jsonl", ".json", ".gz", ".csv", ".tsv", ".arrow", ".txt", ".zst", ".py")


def _has_data_files(folder: Path) -> bool:
    """Whether `load_dataset` could find data in `folder` (a file with a data suffix)."""
    for _root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(n.endswith(_DATA_SUFFIXES) and not n.startswith(".") for n in names):
            return True
    return False


def parquet_files(folder: Path) -> list[Path]:
    """The visible Parquet files of a folder (recursively, in name order; hidden and `_` names
    skipped, as pyarrow does)."""
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        out += [Path(root) / n for n in sorted(names)
                if n.endswith(".parquet") and not n.startswith((".", "_"))]
    return out


def open_records(
    path: str | Path, *, split: str | None = None, subset: str | None = None
) -> Records:
    """Open an input (any form the module reads) or raise a one-line `UserError`."""
    p = Path(path)
    if not p.exists():
        text = str(path)
        # Not a path on disk: a dataset id ("gsm8k", "owner/name"), unless it looks like a file.
        if p.suffix in (".jsonl", ".json", ".gz", ".parquet") or text.startswith((".", "/")):
            raise UserError(f"{path}: no such file")
        return _hub_dataset(text, split, subset)
    if p.is_dir():
        if _is_saved_dataset(p):
            return _saved_dataset(p, split)
        files = parquet_files(p)
        if files:
            return Records(str(p), "parquet", p, files=tuple(files))
        if not _has_data_files(p):
            raise UserError(f"{p}: is a directory with no data files (expected a JSONL, JSON or "
                            "Parquet file, a folder of Parquet files, a save_to_disk folder, or "
                            "a dataset folder)")
        return _hub_dataset(str(p), split, subset, folder=True)  # data files (a dataset repo)
    try:
        open(p, "rb").close()
    except OSError as e:
        raise UserError(f"{p}: cannot read ({e.strerror or e})") from None
    if p.suffix == ".parquet":
        return Records(str(p), "parquet", p, files=(p,))
    if p.suffix == ".json":
        return Records(str(p), "json", p)
    return Records(str(p), "jsonl", p)
