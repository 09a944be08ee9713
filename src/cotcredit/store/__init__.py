"""Result tables on disk: tidy Parquet folders written one trace at a time, crash-safe,
resumable, compacted, and merged from shards. Its modules, each building on those before it:

* ``io``: atomic writes, the layout of a table folder, reading a table (file or folder);
* ``parts``: the data files of a folder and merging them in input order;
* ``tables``: a table's fixed schema, the run key, rows checked against the schema,
  ``TableWriter`` (append, resume, compact) and reading a segmentation back;
* ``shards``: joining the tables of one run's shards (``cotcredit merge``).
"""

from __future__ import annotations

from cotcredit._lazy import lazy_index

_WHERE = {
    **dict.fromkeys((
        "META_KEY", "META_FILE", "LEGACY_META_FILE", "JOURNAL", "temp_path", "write_atomic",
        "remove_stale_temps", "journal_path", "data_files", "finish_compaction",
        "journal_record", "check_exists", "open_file", "files_of", "read_table",
        "metadata_file", "write_metadata", "read_metadata", "is_table_folder", "remove_table",
        "relative",
    ), "cotcredit.store.io"),
    **dict.fromkeys((
        "SEGMENT_COLUMNS", "METHOD_COLUMNS", "TOKEN_COLUMNS", "GENERATED_COLUMN",
        "SECONDS_COLUMN", "run_key", "table_schema", "NonFiniteScore", "check_finite",
        "rows_to_table",
    ), "cotcredit.store.tables"),
    **dict.fromkeys((
        "PART_ROWS", "PART_BYTES", "BLOCKS_KEY", "part_position", "part_name", "file_blocks",
        "write_merged", "footer", "conform",
    ), "cotcredit.store.parts"),
    **dict.fromkeys((
        "MERGE_EVERY", "DEFAULT_SCHEMA", "compact", "TableWriter", "SEGMENTATION_KEYS",
        "StoredSegments", "rows_by_trace",
    ), "cotcredit.store.tables"),
    **dict.fromkeys((
        "MergeSummary", "merge_tables",
    ), "cotcredit.store.shards"),
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_index(__name__, _WHERE)
