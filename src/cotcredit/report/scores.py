"""Reading score tables and checking that the methods in them share one segmentation.

A score table is what every method writes: one row per trace, segment and method, with the
segment's character span and text. A table is a Parquet file or a table folder (one table split
over several files, see ``cotcredit.io``); both read the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa

from cotcredit import io
from cotcredit.errors import UserError
from cotcredit.methods import method_order

#: Columns the report needs in a score table (other columns are carried along).
REQUIRED_COLUMNS = ("trace_id", "segment", "method", "score", "char_start", "char_end", "text")


def one_line(text: object) -> str:
    """Collapse whitespace (newlines included) so an error message stays on one line."""
    return " ".join(str(text).split())


def normalize(scores: pd.DataFrame, where: str = "score table") -> pd.DataFrame:
    """Check the required columns and give them the types the report relies on (a copy)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in scores.columns]
    if missing:
        raise UserError(
            f"{where}: missing column(s) {', '.join(missing)}; expected a cotcredit score table "
            f"with {', '.join(REQUIRED_COLUMNS)}"
        )
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
    out["text"] = out["text"].fillna("").astype(str)
    return out


def table_schema(path: Path | str) -> pa.Schema | None:
    """The Arrow schema of a table (file or folder: its first data file); None for an empty
    folder. ``UserError`` when missing or not Parquet."""
    files = io.files_of(path)
    return io.open_file(files[0]).schema_arrow if files else None


def read_columns(path: Path | str, columns: Sequence[str]) -> pd.DataFrame:
    """Only ``columns`` of a table (cheap on wide tables); ``UserError`` names missing ones."""
    return io.read_table(path, list(columns)).to_pandas()


def read_scores(path: Path | str, methods: Collection[str] | None = None) -> pd.DataFrame:
    """One score table (file or folder), normalized; only ``methods``' rows if given."""
    frame = io.read_table(path).to_pandas()
    if methods is not None and "method" in frame.columns:
        frame = frame.loc[frame["method"].astype(str).isin(set(methods))]
    return normalize(frame.reset_index(drop=True), str(path))


def load_scores(
    paths: Sequence[Path | str], methods: Collection[str] | None = None
) -> pd.DataFrame:
    """Read and concatenate score tables, one or more methods per table.

    With ``methods`` (row labels such as ``loo`` or ``gradient-ig``), only those methods' rows
    are kept, so a table holding other methods too can be passed. Refuses (``UserError``) a
    method that appears in two tables, a (trace, segment, method) that appears twice, and a
    trace whose segmentation differs between methods (segment count or any segment's
    ``char_start``/``char_end``): correlating such scores would silently pair unrelated spans.
    """
    if not paths:
        raise UserError("no score files given; pass one or more Parquet files of scores")
    frames: list[pd.DataFrame] = []
    source: dict[str, Path] = {}
    for raw in paths:
        path = Path(raw)
        frame = read_scores(path, methods)
        for method in pd.unique(frame["method"]):
            if method in source:
                raise UserError(
                    f"method {method!r} is in both {source[method]} and {path}; "
                    "pass each method's scores once"
                )
            source[method] = path
        frames.append(frame)
    scores = pd.concat(frames, ignore_index=True)
    check_segmentations(scores, sources=source)
    return scores


def check_segmentations(
    scores: pd.DataFrame, sources: Mapping[str, Path | str] | None = None
) -> None:
    """Raise ``UserError`` unless all methods scored each trace on the same segmentation.

    Each trace's segments are compared with those of its first method in display order.
    ``sources`` maps a method to the table it came from, only to name files in the message.
    """

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
