"""Reading score tables (files or table folders), checking that their methods share one
segmentation, and finding each method's table in a folder whatever its name.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cotcredit.errors import UserError
from cotcredit.methods import (
    get_method,
    label_to_method,
    method_order,
    parse_methods,
    registry,
    shared_command,
)
from cotcredit.store import io

if TYPE_CHECKING:  # pandas loads with the first table read (`compare --help` stays fast)
    import pandas as pd
    import pyarrow as pa

#: Columns the report needs in a score table (other columns are carried along).
REQUIRED_COLUMNS = ("trace_id", "segment", "method", "score", "char_start", "char_end", "text")


def one_line(text: object) -> str:
    """Collapse whitespace (newlines included) so an error message stays on one line."""
    return " ".join(str(text).split())


def normalize(scores: pd.DataFrame, where: str = "score table") -> pd.DataFrame:
    """Check the required columns and give them the types the report relies on (a copy)."""
    import pandas as pd

    _require(scores.columns, where)
    out = _typed(scores, where)
    if not isinstance(out["text"].dtype, pd.CategoricalDtype):  # categorical: load_scores' texts
        out["text"] = out["text"].fillna("").astype(str)
    return out


def _require(columns: Collection[str], where: str) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise UserError(
            f"{where}: missing column(s) {', '.join(missing)}; expected a cotcredit score table "
            f"with {', '.join(REQUIRED_COLUMNS)}"
        )


def _typed(scores: pd.DataFrame, where: str) -> pd.DataFrame:
    """The required columns but the text, checked and retyped (a copy-on-write copy)."""
    import pandas as pd

    out = scores.copy(deep=False)  # copy-on-write: only retyped columns are new
    for col in ("trace_id", "method"):
        if out[col].isna().any():
            raise UserError(f"{where}: column {col!r} has empty values; every row needs one")
        out[col] = out[col].astype(str)
    for col in ("segment", "char_start", "char_end"):
        values = pd.to_numeric(out[col], errors="coerce")
        if values.isna().any():
            raise UserError(f"{where}: column {col!r} has missing or non-numeric values")
        out[col] = values.astype("int64")
    try:
        out["score"] = pd.to_numeric(out["score"], errors="raise").astype("float64")
    except (TypeError, ValueError) as exc:
        raise UserError(f"{where}: column 'score' is not numeric ({one_line(exc)})") from None
    return out


def table_schema(path: Path | str) -> pa.Schema | None:
    """The Arrow schema of a table (file or folder: its first data file); None for an empty
    folder. ``UserError`` when missing or not Parquet."""
    files = io.files_of(path)
    return io.open_file(files[0]).schema_arrow if files else None


def read_columns(path: Path | str, columns: Sequence[str]) -> pd.DataFrame:
    """Only ``columns`` of a table (cheap on wide tables); ``UserError`` names missing ones."""
    return io.read_table(path, list(columns)).to_pandas()


def _read(path: Path, methods: Collection[str] | None, columns: Collection[str] | None,
          text: bool = True) -> pa.Table:
    """A table's rows (only ``methods``' if given) as Arrow: the required columns and those of
    ``columns`` the table has (every column when None); without ``text`` unless asked."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = table_schema(path)
    names = None
    if schema is not None and (columns is not None or not text):
        wanted = {*REQUIRED_COLUMNS, *(schema.names if columns is None else columns)}
        names = [c for c in schema.names if c in wanted and (text or c != "text")]
    table = io.read_table(path, names)
    if methods is not None and "method" in table.column_names:
        keep = pc.is_in(table["method"].cast(pa.string()),
                        value_set=pa.array(sorted(set(methods)), pa.string()))
        table = table.filter(pc.fill_null(keep, False))
    return table


def read_scores(path: Path | str, methods: Collection[str] | None = None,
                columns: Collection[str] | None = None) -> pd.DataFrame:
    """One score table (file or folder), normalized; only ``methods``' rows if given; only the
    required columns and those of ``columns`` the table has if given (all otherwise)."""
    return normalize(_read(Path(path), methods, columns).to_pandas(), str(path))


def load_scores(
    paths: Sequence[Path | str], methods: Collection[str] | None = None,
    columns: Collection[str] | None = None,
) -> pd.DataFrame:
    """Read and concatenate score tables, one or more methods per table.

    ``methods`` (row labels such as ``gradient-ig``) keeps only their rows; ``columns`` reads
    only the required columns and those. Refuses (``UserError``) a method in two tables, a
    repeated (trace, segment, method) and a trace segmented differently by two methods, whose
    scores would silently pair unrelated spans. Texts are read once, as a categorical column.
    """
    import pandas as pd

    if not paths:
        raise UserError("no score files given; pass one or more Parquet files of scores")
    frames: list[pd.DataFrame] = []
    texts: list[pa.Table] = []  # (trace_id, segment, text) of traces no earlier table holds
    seen: set[str] = set()
    source: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw)
        table = _read(path, methods, columns, text=False)
        schema = table_schema(path)
        _require([*table.column_names, *(["text"] if schema and "text" in schema.names else [])],
                 str(path))
        frame = _typed(table.to_pandas(), str(path))
        del table
        for method in pd.unique(frame["method"]):
            if method in source:
                raise UserError(
                    f"method {method!r} is in both {source[method]} and {path}; "
                    "pass each method's scores once"
                )
            source[method] = path
        new = set(pd.unique(frame["trace_id"])) - seen
        if new:
            texts.append(_texts_of(path, methods, new))
            seen |= new
        frames.append(frame)
    scores = pd.concat(frames, ignore_index=True)
    del frames
    scores["text"] = _shared_texts(scores, texts)
    check_segmentations(scores, sources=source)
    return scores


def _texts_of(path: Path, methods: Collection[str] | None, traces: set[str]) -> pa.Table:
    """(trace_id, segment, text) of a table's rows of ``traces`` (and ``methods``)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = _read(path, methods, ("trace_id", "segment", "text"))
    keep = pc.is_in(table["trace_id"].cast(pa.string()), value_set=pa.array(sorted(traces)))
    return table.select(["trace_id", "segment", "text"]).filter(keep)


def _shared_texts(scores: pd.DataFrame, parts: list[pa.Table]) -> pd.Categorical:
    """Each score row's segment text, looked up by (trace, segment) in ``parts``, as one
    categorical: each distinct text is held once, whatever the number of methods. A segment
    no part holds gets "" (then its segmentation differs: `check_segmentations` says so)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    source = pa.concat_tables(parts, promote_options="permissive") if parts else None
    if source is None or not source.num_rows:
        return pd.Categorical([""] * len(scores))
    tid = source.column("trace_id").cast(pa.string()).to_pandas()
    traces = pd.Index(pd.unique(tid))
    src_seg = source.column("segment").to_numpy().astype("int64")
    seg = scores["segment"].to_numpy(dtype="int64")
    width = int(max(src_seg.max(), seg.max() if len(seg) else 0)) + 1
    src_key = traces.get_indexer(tid).astype("int64") * width + src_seg
    keys, first = np.unique(src_key, return_index=True)  # a segment's first row holds its text
    text = pc.fill_null(source.column("text").cast(pa.string()), "")
    del source, tid
    if len(first) < len(text):
        text = text.take(pa.array(first))
    encoded = pc.dictionary_encode(text).combine_chunks()
    del text
    categories = pd.Index(encoded.dictionary.to_pandas())
    code = encoded.indices.to_numpy(zero_copy_only=False).astype("int32")
    row_key = traces.get_indexer(scores["trace_id"]).astype("int64") * width + seg
    at = np.minimum(np.searchsorted(keys, row_key), len(keys) - 1)
    found = (keys[at] == row_key) & (row_key >= 0)
    codes = code[at]
    if not found.all():  # rows without a text get ""
        empty = categories.get_indexer([""])[0]
        if empty < 0:
            categories, empty = categories.append(pd.Index([""])), len(categories)
        codes = np.where(found, codes, empty)
    return pd.Categorical.from_codes(codes, categories=categories)


def check_segmentations(
    scores: pd.DataFrame, sources: Mapping[str, Path | str] | None = None
) -> None:
    """Raise ``UserError`` unless all methods scored each trace on the same segmentation.

    Each trace's segments are compared with those of its first method in display order.
    ``sources`` maps a method to the table it came from, only to name files in the message.
    """
    import pandas as pd


    def where(method: str) -> str:
        return f" ({sources[method]})" if sources and method in sources else ""

    key = ["trace_id", "method", "segment"]
    dup = scores.duplicated(key)
    if dup.any():
        row = scores.loc[dup].iloc[0]
        raise UserError(
            f"trace {row['trace_id']!r}: method {row['method']!r}{where(row['method'])} has "
            f"segment {int(row['segment'])} more than once; remove the duplicated rows"
        )
    spans = scores[["trace_id", "method", "segment", "char_start", "char_end"]]
    if spans.empty:
        return
    rank = {m: i for i, m in enumerate(method_order(pd.unique(spans["method"])))}
    first_rank = spans["method"].map(rank).groupby(spans["trace_id"]).transform("min")
    is_base = spans["method"].map(rank) == first_rank
    base = spans.loc[is_base]
    others = spans.loc[~is_base]
    if others.empty:
        return
    base_method = base.groupby("trace_id")["method"].first()

    counts = spans.groupby(["trace_id", "method"], sort=False).size().rename("count").reset_index()
    base_counts = base.groupby("trace_id").size()
    counts["base"] = counts["trace_id"].map(base_counts)
    bad_count = counts.loc[counts["count"] != counts["base"]]
    if not bad_count.empty:
        row = bad_count.iloc[0]
        tid, method = row["trace_id"], row["method"]
        ref = base_method[tid]
        raise UserError(
            f"trace {tid!r}: segmentations differ between {ref!r}{where(ref)} and "
            f"{method!r}{where(method)}: {int(row['base'])} vs {int(row['count'])} segments; "
            "score every method on one shared segmentation"
        )

    merged = others.merge(
        base[["trace_id", "segment", "char_start", "char_end"]],
        on=["trace_id", "segment"],
        how="left",
        suffixes=("", "_base"),
    )
    mismatch = (
        merged["char_start_base"].isna()
        | (merged["char_start"] != merged["char_start_base"])
        | (merged["char_end"] != merged["char_end_base"])
    )
    if mismatch.any():
        row = merged.loc[mismatch].iloc[0]
        tid, method, seg = row["trace_id"], row["method"], int(row["segment"])
        ref = base_method[tid]
        if pd.isna(row["char_start_base"]):
            detail = f"segment {seg} exists only in {method!r}"
        else:
            detail = (
                f"segment {seg} spans chars {int(row['char_start_base'])}-"
                f"{int(row['char_end_base'])} in {ref!r} but {int(row['char_start'])}-"
                f"{int(row['char_end'])} in {method!r}"
            )
        raise UserError(
            f"trace {tid!r}: segmentations differ between {ref!r}{where(ref)} and "
            f"{method!r}{where(method)}: {detail}; score every method on one shared segmentation"
        )


class ScoreTablesNotFound(UserError):
    """Some methods have no table in the folder, or one in two tables; one line per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def _candidates(folder: Path) -> list[Path]:
    """Tables in ``folder`` that may hold scores: ``*.parquet`` files and table folders, and
    the methods' default output names."""
    found = {
        p for p in folder.iterdir() if p.suffix == ".parquet" and not p.name.startswith((".", "_"))
    }
    found.update(
        folder / spec.default_output
        for spec in registry().values()
        if spec.default_output and (folder / spec.default_output).exists()
    )
    return sorted(found)


def labels_in(path: Path) -> dict[str, list[str]] | None:
    """Row label -> run ids in a table, or None when it is not a score table."""
    from cotcredit.pipeline.scores import REQUIRED_COLUMNS, read_columns, table_schema

    schema = table_schema(path)
    if schema is None or not all(c in schema.names for c in REQUIRED_COLUMNS):
        return None
    columns = ["method", "run_id"] if "run_id" in schema.names else ["method"]
    frame = read_columns(path, columns).drop_duplicates()
    if "run_id" not in frame:
        frame["run_id"] = "?"
    frame = frame.dropna(subset=["method"]).astype(str)
    return {m: sorted(g["run_id"].unique()) for m, g in frame.groupby("method", sort=False)}


def _wanted_labels(name: str, present: set[str]) -> tuple[str, ...]:
    """The row labels that answer a requested method: ``gradient`` -> its kinds."""
    if name in present:
        return (name,)
    spec = get_method(name)  # a UserError naming the known methods for a typo
    return spec.all_labels if name == spec.name else (name,)


def find_score_tables(
    folder: str | Path = ".", methods: str | Sequence[str] = "rredcot,mc,loo"
) -> dict[str, Path]:
    """Row label -> the score table directly in ``folder`` that holds its rows, in display
    order (``gradient`` is found under ``gradient-ig`` etc.). Raises `ScoreTablesNotFound` (a
    `UserError`) with a line per method without a table (naming its command) or in two."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder")
    names = parse_methods(methods)
    holders: dict[str, list[tuple[Path, list[str]]]] = {}
    for path in _candidates(folder):
        for label, runs in (labels_in(path) or {}).items():
            holders.setdefault(label, []).append((path, runs))

    problems: list[str] = []
    found: dict[str, Path] = {}
    for name in names:
        labels = [lab for lab in _wanted_labels(name, set(holders)) if lab in holders]
        if not labels:
            owner = label_to_method(name)
            command = registry()[owner].command if owner else None
            hint = f" (run: {command.hint(owner, shared_command(owner))})" if command else ""
            problems.append(f"{name}: no table in {folder}{hint}")
        for label in labels:
            tables = holders[label]
            if len(tables) > 1:
                problems.append(_duplicate_line(label, tables, folder))
            else:
                found[label] = tables[0][0]
    if problems:
        raise ScoreTablesNotFound(problems)
    return {label: found[label] for label in method_order(found)}


def _duplicate_line(label: str, tables: list[tuple[Path, list[str]]], folder: Path) -> str:
    (a, runs_a), (b, runs_b) = tables[:2]
    more = f" (and {len(tables) - 2} more)" if len(tables) > 2 else ""
    if runs_a == runs_b:
        return (
            f"{label}: rows of the same run in both {a} and {b}{more}; join shards with "
            f"`cotcredit merge` or move one table out of {folder}"
        )
    return (
        f"{label}: in two tables from different runs, {a} (run {', '.join(runs_a)}) and {b} "
        f"(run {', '.join(runs_b)}){more}; move one out of {folder} or name the tables with "
        "--scores"
    )
