"""What a run did (`RunSummary`): counts, per-trace errors, notes said once, the tables it
wrote, and reading its rows back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cotcredit.store import io

if TYPE_CHECKING:  # pyarrow loads with the first table read (keeps `--help` fast)
    import pyarrow as pa

SEGMENTS = "segments"  # the output label of the segmentation itself


@dataclass
class RunSummary:
    """What a run did: counts, per-trace errors, notes said once, outputs written.

    Under a launcher the main process's summary covers every process; the others have
    `main=False` and print nothing. `rows` holds rows only for a run without output paths;
    `read_rows` reads a run's rows back from its outputs.
    """

    outputs: dict[str, Path]
    scored: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rows: dict[str, list[dict]] = field(default_factory=dict)  # label -> rows (no outputs only)
    paths: dict[str, Path] = field(default_factory=dict)  # row label -> table it was written to
    main: bool = True

    def frame(self, label: str | None = None):
        """The rows as a pandas DataFrame: the whole output table of `label` (default: the
        run's method, else the segmentation), resumed traces included; without an output,
        the rows this run kept."""
        import pandas as pd

        labels = list(self.paths) or list(self.rows)
        label = label or next((lab for lab in labels if lab != SEGMENTS), SEGMENTS)
        path = self.paths.get(label)
        if path is not None and path.exists():
            return io.read_table(path).to_pandas()
        return pd.DataFrame(self.rows.get(label, []))

    def read_rows(
        self, label: str, trace_id: str | None = None, columns: list[str] | None = None
    ) -> list[dict]:
        """Rows of `label` scored by this run (of one trace if `trace_id`), in memory or read
        back from the output table (only `columns`, if given)."""
        if label in self.rows:
            rows = self.rows[label]
            rows = [r for r in rows if trace_id is None or r["trace_id"] == trace_id]
            return [{c: r.get(c) for c in columns} for r in rows] if columns else rows
        return self.read_table(label, trace_id, columns).to_pylist()

    def read_table(
        self, label: str, trace_id: str | None = None, columns: list[str] | None = None
    ) -> pa.Table:
        """`read_rows` as an Arrow table (for many rows), read back from the output table."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if label in self.rows:
            return pa.Table.from_pylist(self.read_rows(label, trace_id, columns))
        path = self.paths.get(label)
        if path is None or not path.exists():
            return pa.table({c: [] for c in columns or []})
        files = io.files_of(path)
        names = io.open_file(files[0]).schema_arrow.names if files else []
        wanted_columns = None
        if columns:
            extra = ["trace_id", *(["method"] if "method" in names else [])]
            wanted_columns = list(dict.fromkeys([*columns, *extra]))
        table = io.read_table(path, wanted_columns)
        if "method" in table.column_names and label != SEGMENTS:
            table = table.filter(pc.equal(table.column("method"), label))
        wanted = [trace_id] if trace_id is not None else self.scored
        table = table.filter(pc.is_in(table.column("trace_id"), pa.array(wanted, pa.string())))
        return table.select(columns) if columns else table
