"""Reading traces: every record of an input, streamed (`iter_traces`) or into memory
(`read_traces`), with duplicate ids and mixed shapes refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cotcredit.data.fields import FieldNames
from cotcredit.data.readers import Records, open_records
from cotcredit.data.records import parse_record
from cotcredit.data.trace import Trace, TraceError
from cotcredit.errors import UserError


@dataclass
class ReadResult:
    """Traces read from a file, and the lines skipped with `on_error="skip"`."""

    traces: list[Trace]
    skipped: list[TraceError]



class SeenIds:
    """The ids read so far and the line of each, in 12 bytes per id (sorted 64-bit hashes, plus a
    dict of the newest merged in every 65,536), so millions of traces hold no id strings. A hash
    collision (about 1 in 10^7 for a million ids) would be reported as a duplicate."""

    MERGE = 1 << 16

    def __init__(self) -> None:
        self.keys = self.lines = None  # numpy arrays from the first merge (small inputs: none)
        self.new: dict[int, int] = {}

    def line_of(self, tid: str) -> int | None:
        """The line of `tid` if it was read before, else None."""
        h = hash(tid)
        if h in self.new:
            return self.new[h]
        if self.keys is None:
            return None
        i = int(self.keys.searchsorted(h))
        return int(self.lines[i]) if i < len(self.keys) and self.keys[i] == h else None

    def add(self, tid: str, line: int) -> None:
        """Record that `tid` was read on `line` (the first line of an id is kept)."""
        self.new.setdefault(hash(tid), line)
        if len(self.new) >= self.MERGE:
            import numpy as np

            if self.keys is None:
                self.keys, self.lines = np.empty(0, np.int64), np.empty(0, np.int32)
            keys = np.fromiter(self.new.keys(), np.int64, len(self.new))
            lines = np.fromiter(self.new.values(), np.int32, len(self.new))
            order = np.argsort(keys)
            keys, lines = keys[order], lines[order]
            at = np.searchsorted(self.keys, keys)  # one new array each, not a re-sort of all
            self.keys, self.lines = np.insert(self.keys, at, keys), np.insert(self.lines, at, lines)
            self.new = {}


def iter_traces(
    path: str | Path,
    names: FieldNames = FieldNames(),
    on_error: str = "raise",
    *,
    split: str | None = None,
    subset: str | None = None,
    require_answer: bool = True,
) -> Iterator[Trace | TraceError]:
    """Stream the traces of an input, record by record. A bad record raises its `TraceError`
    (on_error="raise") or is yielded as one ("skip"). Duplicate ids and a change of shape are
    errors; `require_answer=False` lets traces without a reference answer through."""
    records = open_records(path, split=split, subset=subset)
    return _iter_traces(records, names, on_error, require_answer)


def _iter_traces(
    records: Records, names: FieldNames, on_error: str, require_answer: bool
) -> Iterator[Trace | TraceError]:
    src = records.name
    seen = SeenIds()
    first_shape: tuple[str, int] | None = None
    any_line = False
    for n, obj, err in records:
        any_line = True
        try:
            if err:
                raise TraceError(src, n, err)
            traces = parse_record(obj, src, n, names, require_answer=require_answer)
            shape = traces[0].shape  # "<kind> in '<field>'": the kind must not change
            if first_shape is None:
                first_shape = (shape, n)
            elif shape.split(" in ")[0] != first_shape[0].split(" in ")[0]:
                raise TraceError(src, n, f"mixed shapes: this record has {shape}, record "
                                 f"{first_shape[1]} has {first_shape[0]} (one input holds one "
                                 "shape; split the file)")
            for t in traces:
                first = seen.line_of(t.id)
                if first is not None:
                    raise TraceError(src, n, f"duplicate id '{t.id}' (first on line {first})")
            for t in traces:
                seen.add(t.id, n)
        except TraceError as e:
            if on_error != "skip":
                raise
            yield e
            continue
        yield from traces
    if not any_line:
        raise UserError(f"{src}: no traces (the input is empty)")


def read_traces(
    path: str | Path,
    names: FieldNames = FieldNames(),
    on_error: str = "raise",
    max_traces: int | None = None,
    **reading,
) -> ReadResult:
    """Read an input's traces into memory (`reading`: `iter_traces`' keyword arguments);
    on_error="skip" collects bad records in `skipped` instead of stopping."""
    traces: list[Trace] = []
    skipped: list[TraceError] = []
    for item in iter_traces(path, names, on_error, **reading):
        if isinstance(item, TraceError):
            skipped.append(item)
            continue
        traces.append(item)
        if max_traces is not None and len(traces) >= max_traces:
            break
    return ReadResult(traces, skipped)

