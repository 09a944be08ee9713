"""The fixed schema of a result table, and rows checked against it.

A table has a fixed schema, declared up front (segmentation columns, `method`, `score`, the
columns each method declares in its `MethodSpec.columns`, cost columns), never inferred from a
trace: a part must read back with the same columns whatever its trace held. `run_id` (a hash of
every option that changes results, `run_key`) is a column too.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Mapping

import pyarrow as pa

from cotcredit.errors import UserError, first_line

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
