"""A split's tables in compact form: what the metrics read (``cotcredit.bench.splits.SplitData``),
in three small Parquet files per split, so that a published leaderboard can be tracked beside
its inputs and recomputed from them.

    <folder>/<regime>/<split>/traces.parquet    one row per trace: its id, problem (a code),
                                                labels, departures, costs per row label
    <folder>/<regime>/<split>/segments.parquet  one row per segment: trace (a row of traces),
                                                segment, span, mean entropy, one float32
                                                credit column per row label
    <folder>/<regime>/<split>/pool.parquet      one row per Monte Carlo boundary: trace,
                                                boundary, rollouts and their outcomes as bits

No text: the segments are character spans of the traces' responses, which the run's
``traces.jsonl`` holds. Credits are float32, tokens whole counts, seconds float32 to about
three significant digits; a row label whose credits equal another's
on every segment is stored once (the file's metadata names it). Monte Carlo's credits and those
of its budgets are computed from the pool, never stored. ``write_split`` then ``read_split``
gives the ``SplitData`` the published leaderboard was computed from, exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.bench.splits import SplitData
from cotcredit.report.baselines import ENTROPY_COLUMN
from cotcredit.report.costs import COST_COLUMNS

FILES = ("traces", "segments", "pool")
LABEL_FLAGS = ("correct", "valid_departure")
LABEL_OFFSETS = ("error_char", "departure_char")
_SCORE, _DEPARTURE = "score:", "departure:"
_META = b"cotcredit.compact"


def _write(frame: pd.DataFrame, path: Path, meta: dict | None = None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    # no pandas schema in the footer (a hundred bytes a column): the reader rebuilds the frame
    table = table.replace_schema_metadata({_META: json.dumps(meta or {}).encode()})
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", compression_level=19,
                   use_byte_stream_split=floats or False, use_dictionary=False,
                   write_statistics=False)


def _read(path: Path) -> tuple[pd.DataFrame, dict]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = (table.schema.metadata or {}).get(_META)
    return table.to_pandas(), json.loads(meta) if meta else {}


def write_split(data: SplitData, folder: Path, credits: bool = True) -> dict[str, Path]:
    """``data`` into ``folder`` (``traces``, ``segments``, ``pool``); ``credits``: store the
    methods' credits and costs (False: the labels, spans, entropies, departures and the pool
    only: what a development split's choice of baselines reads)."""
    folder = Path(folder)
    ids = pd.Index(pd.unique(data.segments["trace_id"].astype(str)))
    code = pd.Series(np.arange(len(ids), dtype="int32"), index=ids)
    lab = data.labels.set_index(data.labels["trace_id"].astype(str)).reindex(ids)
    traces = pd.DataFrame({"trace_id": ids.to_numpy(),
                           "problem": pd.factorize(lab["problem"])[0].astype("int32")})
    for col in LABEL_FLAGS:
        traces[col] = lab[col].astype(bool).to_numpy()
    for col in LABEL_OFFSETS:
        traces[col] = lab[col].astype("int32").to_numpy()
    for name, found in data.departures.items():
        traces[_DEPARTURE + name] = found.reindex(ids).astype("Int32").to_numpy()
    if data.segmentation_tokens is not None:
        traces["segmentation_tokens"] = data.segmentation_tokens.reindex(ids).astype(
            "float32").to_numpy()
    costs = data.costs.assign(trace_id=data.costs["trace_id"].astype(str))
    for label, own in costs.groupby("method", sort=False) if credits else ():
        own = own.set_index("trace_id").reindex(ids)
        for col in COST_COLUMNS:
            if col in own.columns and own[col].notna().any():
                values = own[col].astype("float64")
                traces[f"{col}:{label}"] = (_significant(values) if col == "cost_seconds"
                                            else values.round().astype("Int32")).array
    seg = data.segments.assign(trace_id=data.segments["trace_id"].astype(str)).sort_values(
        ["trace_id", "segment"], key=lambda s: s.map(code) if s.name == "trace_id" else s,
        kind="stable")
    segments = pd.DataFrame({"trace": seg["trace_id"].map(code).to_numpy(),
                             "segment": seg["segment"].astype("int16").to_numpy(),
                             "char_start": seg["char_start"].astype("int32").to_numpy(),
                             "char_end": seg["char_end"].astype("int32").to_numpy(),
                             ENTROPY_COLUMN: seg[ENTROPY_COLUMN].astype("float32").to_numpy()})
    aliases: dict[str, str] = {}
    order: list[str] = []
    if credits:
        keys = pd.MultiIndex.from_arrays([seg["trace_id"], seg["segment"]])
        wide = data.credits.assign(trace_id=data.credits["trace_id"].astype(str)).pivot_table(
            index=["trace_id", "segment"], columns="method", values="score", dropna=False,
            aggfunc="first").reindex(keys)
        for label in dict.fromkeys(data.credits["method"]):
            order.append(label)
            column = wide[label].astype("float32").to_numpy()
            same = next((k for k in segments.columns if k.startswith(_SCORE)
                         and _equal(segments[k].to_numpy(), column)), None)
            if same is not None:
                aliases[label] = same[len(_SCORE):]
                continue
            segments[_SCORE + label] = column
    paths = {name: folder / f"{name}.parquet" for name in FILES}
    _write(traces, paths["traces"])
    _write(segments, paths["segments"], {"labels": order, "aliases": aliases})
    if data.pool is not None:
        pool = data.pool
        width = "uint32" if int(pool["rollouts"].max()) <= 32 else "uint64"
        frame = pd.DataFrame({"trace": pool["trace_id"].astype(str).map(code).astype(
            "int32").to_numpy(), "boundary": pool["boundary"].astype("int16").to_numpy(),
            "rollouts": pool["rollouts"].astype("int8").to_numpy(),
            "bits": pool["bits"].astype(width).to_numpy()})
        full = (np.left_shift(np.uint64(1), pool["rollouts"].to_numpy("uint64"))
                - np.uint64(1))
        if (pool["kept"].to_numpy("uint64") != full).any():  # rollouts dropped: say which
            frame["kept"] = pool["kept"].astype(width).to_numpy()
        _write(frame, paths["pool"])
    else:
        paths.pop("pool")
    return paths


def _significant(values: pd.Series, bits: int = 10) -> pd.Series:
    """Seconds as float32 with ``bits`` bits of mantissa (about three significant digits; the
    rest zero, so they compress): a wall time on a shared machine means no more."""
    x = values.to_numpy(dtype="float64").astype("float32")
    raw = x.view(np.uint32)
    drop = np.uint32(23 - bits)
    half = np.uint32(1) << (drop - np.uint32(1))
    kept = ((raw + half) >> drop) << drop  # round to nearest, then clear the low bits
    out = np.where(np.isfinite(x), kept.view(np.float32), x)
    return pd.Series(out, index=values.index)


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    fa, fb = np.isfinite(a), np.isfinite(b)
    return bool((fa == fb).all() and (a[fa] == b[fb]).all())


def read_split(folder: Path) -> SplitData:
    """The ``SplitData`` written by ``write_split`` (credits and costs as float32 values)."""
    folder = Path(folder)
    traces, _ = _read(folder / "traces.parquet")
    segments, meta = _read(folder / "segments.parquet")
    ids = traces["trace_id"].astype(str).to_numpy()
    tid = ids[segments["trace"].to_numpy()]
    seg = pd.DataFrame({"trace_id": tid, "segment": segments["segment"].astype("int64"),
                        "char_start": segments["char_start"].astype("int64"),
                        "char_end": segments["char_end"].astype("int64"),
                        ENTROPY_COLUMN: segments[ENTROPY_COLUMN].astype("float64")})
    parts = []
    aliases = meta.get("aliases", {})
    for label in meta.get("labels", []):
        column = _SCORE + aliases.get(label, label)
        parts.append(pd.DataFrame({"trace_id": tid, "segment": seg["segment"],
                                   "method": label,
                                   "score": segments[column].astype("float64")}))
        parts[-1] = parts[-1].loc[parts[-1]["score"].notna()]
    credits = (pd.concat(parts, ignore_index=True) if parts else
               pd.DataFrame(columns=["trace_id", "segment", "method", "score"]))
    labels = pd.DataFrame({"trace_id": ids, "problem": traces["problem"].astype(str)})
    for col in LABEL_FLAGS:
        labels[col] = traces[col].astype(bool)
    for col in LABEL_OFFSETS:
        labels[col] = traces[col].astype("int64")
    departures = {}
    costs = []
    for col in traces.columns:
        if col.startswith(_DEPARTURE):
            found = traces.set_index("trace_id")[col].dropna()
            departures[col[len(_DEPARTURE):]] = found.astype("int64")
    cost_cols = [c for c in traces.columns if c.split(":")[0] in COST_COLUMNS]
    for label in dict.fromkeys(c.split(":", 1)[1] for c in cost_cols):
        own = pd.DataFrame({"trace_id": ids, "method": label})
        for col in COST_COLUMNS:
            if f"{col}:{label}" in traces.columns:
                own[col] = traces[f"{col}:{label}"].astype("float64").to_numpy(na_value=np.nan)
        costs.append(own.loc[own.drop(columns=["trace_id", "method"]).notna().any(axis=1)])
    pool = None
    if (folder / "pool.parquet").exists():
        raw, _ = _read(folder / "pool.parquet")
        full = np.left_shift(np.uint64(1), raw["rollouts"].to_numpy("uint64")) - np.uint64(1)
        pool = pd.DataFrame({"trace_id": ids[raw["trace"].to_numpy()],
                             "boundary": raw["boundary"].astype("int64"),
                             "rollouts": raw["rollouts"].astype("int64"),
                             "bits": raw["bits"].astype("uint64"),
                             "kept": raw["kept"].astype("uint64") if "kept" in raw else full})
    tokens = None
    if "segmentation_tokens" in traces.columns:
        tokens = pd.Series(traces["segmentation_tokens"].astype("float64").to_numpy(),
                           index=pd.Index(ids, name="trace_id"))
    from cotcredit.bench.metrics import LABEL_COLUMNS

    return SplitData(seg, credits, pd.concat(costs, ignore_index=True) if costs else
                     pd.DataFrame(columns=["trace_id", "method"]),
                     labels[list(LABEL_COLUMNS)], departures, pool, tokens)
