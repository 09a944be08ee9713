"""Result tables at scale: is appending a trace as cheap at trace 100,000 as at trace 1?

Writes synthetic RREDCoT rows of realistic width (16 segments per trace, each with 150-400
characters of text and every column the method declares) through the real `TableWriter`, one
part file per trace, exactly as `cotcredit redistribute` does, then compacts the table. Prints:

- the mean time of one append over the first and the last 1,000 traces, and their ratio
  (goal: at most 1.5: appending does not depend on what the table already holds);
- the total write time, the number of files and bytes on disk before compaction;
- the time to read the trace ids of the uncompacted folder (what a reader or a resumed run pays
  without compaction) and the compaction time;
- peak memory (max RSS) after writing and compacting, and at the end;
- the time of `compare --scores` on 3 methods over those traces: `load_scores` (read the three
  tables and check their segmentations agree) and `analyse` (the position baseline, per-trace
  correlations, bootstrap CIs, paired differences, pooled, and the rollout equivalence and
  ceiling from the Monte Carlo table's counts). The second and third tables (loo, mc) are built
  from the first with pyarrow in one go (same segmentation, other scores; mc with 24-rollout
  counts): their writing is not what is measured.

    python benchmarks/bench_tables.py                  # 100,000 traces (a few minutes)
    python benchmarks/bench_tables.py --traces 5000    # quick
    python benchmarks/bench_tables.py --traces 10000 --merge-every 0   # one file per trace
    python benchmarks/bench_tables.py --compare-only   # compare alone, the table built in one go
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cotcredit.methods import get_method
from cotcredit.store import io, tables
from cotcredit.store.io import META_KEY
from cotcredit.store.parts import part_name
from cotcredit.store.tables import TableWriter, table_schema

WORDS = ("so the total is wait check again then add carry multiply each row of table value "
         "apples oranges cost dollars first next therefore hmm actually answer").split()


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def trace_rows(i: int, k: int, rng: random.Random) -> list[dict]:
    """One trace's rows: what `redistribute` writes (every rredcot column filled)."""
    rows, start = [], 0
    for s in range(k):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 70)))[:400]
        n = len(text) // 4
        g0, g1 = rng.random(), rng.random()
        rows.append({
            "run_id": "bench", "trace_id": f"trace-{i:06d}", "segment": s,
            "char_start": start, "char_end": start + len(text),
            "token_start": start // 4, "token_end": start // 4 + n, "n_tokens": n, "text": text,
            "boundary_entropy": rng.random() * 3, "mean_entropy": rng.random() * 3,
            "method": "rredcot", "score": g1 - g0,
            "r_hat": -rng.random() * 5, "v_hat": -rng.random() * 20,
            "r_hat_before": -rng.random() * 5, "v_hat_before": -rng.random() * 20,
            "g_before": g0, "g_after": g1, "correction": 0.0, "outcome": 1.0,
            "sum_to": "return", "cost_forward_tokens": 600 + s, "cost_generated_tokens": 0,
        })
        start += len(text)
    return rows


def other_method(table: pa.Table, name: str, seed: int, folder: Path) -> None:
    """`table` as another method's scores (same segmentation), one file in a table folder."""
    rng = np.random.default_rng(seed)
    keep = ["run_id", "trace_id", "segment", "char_start", "char_end", "token_start",
            "token_end", "n_tokens", "text"]
    out = table.select(keep)
    out = out.append_column("method", pa.array([name] * len(out), pa.string()))
    if name == "mc":
        # Monte Carlo rows with their counts (24 rollouts per boundary), so compare also runs
        # the rollout equivalence and the ceiling from them.
        first = np.asarray(table.column("segment").to_numpy()) == 0
        n = 24
        correct = rng.binomial(n, rng.random(len(out)))
        after = correct / n
        before = np.r_[0.0, after[:-1]]
        before[first] = rng.binomial(n, 0.5, int(first.sum())) / n
        score = after - before
        for col, values in (("value_before", before), ("value_after", after)):
            out = out.append_column(col, pa.array(values, pa.float64()))
        out = out.append_column("n_rollouts", pa.array(np.full(len(out), n), pa.int64()))
        out = out.append_column("n_correct", pa.array(correct, pa.int64()))
    else:
        noise = rng.normal(0, 0.3, len(out))
        score = np.asarray(table.column("score").to_numpy()) + noise
    out = out.append_column("score", pa.array(score, pa.float64()))
    folder.mkdir()
    out = out.replace_schema_metadata({META_KEY: b'{"run_id": "bench-%s"}' % name.encode()})
    pq.write_table(out, folder / part_name(0))


def compare_timing(out: Path, work: Path, bootstrap: int) -> None:
    """Time `compare --scores` on rredcot, loo and mc tables (loo and mc built from rredcot)."""
    table = io.read_table(out)
    other_method(table, "loo", 1, work / "loo.parquet")
    other_method(table, "mc", 2, work / "mc.parquet")
    del table
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.compare import analyse, report_columns

    paths = [out, work / "loo.parquet", work / "mc.parquet"]
    t = time.perf_counter()
    scores = load_scores(paths, columns=report_columns())  # what `compare` reads
    t_load = time.perf_counter() - t
    t = time.perf_counter()
    result = analyse(scores, n_boot=bootstrap, reference="mc", baselines="position",
                     checked=True)
    t_corr = time.perf_counter() - t
    ro = result.rollouts
    print(f"compare --scores on 3 methods + the position baseline: load_scores {t_load:.1f} "
          f"s, analyse (correlations, paired differences, bootstrap {bootstrap}, "
          f"rollout equivalence on {int(ro.curve['n'].max()) if ro else 0:,} traces x "
          f"{ro.splits if ro else 0} splits) {t_corr:.1f} s; total {t_load + t_corr:.1f} s "
          f"(goal <= 120); peak RSS {peak_mb():.0f} MB (goal <= 4,000)")


def bulk_rredcot(n_traces: int, k: int, schema: pa.Schema, out: Path) -> None:
    """The rredcot table ``trace_rows`` would write, built with numpy in one go (texts drawn
    from a pool of 1,000 made the same way, each made distinct by its row number, as the texts
    of real segments are): for timing compare without the writer."""
    rng = np.random.default_rng(0)
    pool_rng = random.Random(0)
    pool = [" ".join(pool_rng.choice(WORDS) for _ in range(pool_rng.randint(30, 70)))[:400]
            for _ in range(1000)]
    n = n_traces * k
    text_idx = rng.integers(0, len(pool), n)
    lengths = np.array([len(t) for t in pool])[text_idx]
    seg = np.tile(np.arange(k), n_traces)
    ends = np.cumsum(lengths.reshape(n_traces, k), axis=1).ravel()
    starts = ends - lengths
    g0, g1 = rng.random(n), rng.random(n)
    cols = {
        "run_id": pa.array(["bench"] * n), "trace_id": pa.array(
            np.repeat([f"trace-{i:06d}" for i in range(n_traces)], k).tolist()),
        "segment": seg, "char_start": starts, "char_end": ends, "token_start": starts // 4,
        "token_end": starts // 4 + lengths // 4, "n_tokens": lengths // 4,
        "text": pc.binary_join_element_wise(pa.array(pool).take(pa.array(text_idx)),
                                            pa.array(np.arange(n).astype(str)), " "),
        "boundary_entropy": rng.random(n) * 3, "mean_entropy": rng.random(n) * 3,
        "method": pa.array(["rredcot"] * n), "score": g1 - g0,
        "r_hat": -rng.random(n) * 5, "v_hat": -rng.random(n) * 20,
        "r_hat_before": -rng.random(n) * 5, "v_hat_before": -rng.random(n) * 20,
        "g_before": g0, "g_after": g1, "correction": np.zeros(n), "outcome": np.ones(n),
        "sum_to": pa.array(["return"] * n), "cost_forward_tokens": 600 + seg,
        "cost_generated_tokens": np.zeros(n, dtype="int64"),
    }
    arrays = []
    for f in schema:
        v = cols.get(f.name)
        arrays.append(pa.nulls(n, f.type) if v is None else pa.array(v).cast(f.type))
    table = pa.Table.from_arrays(arrays, schema=schema).replace_schema_metadata(
        {META_KEY: b'{"run_id": "bench"}'})
    out.mkdir()
    pq.write_table(table, out / part_name(0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=100_000)
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--bootstrap", type=int, default=2000, help="compare's --bootstrap")
    ap.add_argument("--merge-every", type=int, default=tables.MERGE_EVERY,
                    help="a writer merges its own parts every N traces (0: never, parts only)")
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp one)")
    ap.add_argument("--compare-only", action="store_true",
                    help="skip the writer: build the rredcot table in one go with pyarrow (same "
                    "columns and widths) and time compare only")
    args = ap.parse_args()
    tables.MERGE_EVERY = args.merge_every or 10**12
    work = Path(tempfile.mkdtemp(prefix="bench-tables-", dir=args.dir))
    window = 1000 if args.traces >= 2000 else max(1, args.traces // 2)
    try:
        out = work / "rredcot.parquet"
        schema = table_schema({"rredcot": get_method("rredcot").columns})
        if args.compare_only:
            t = time.perf_counter()
            bulk_rredcot(args.traces, args.segments, schema, out)
            print(f"built {args.traces:,} traces x {args.segments} segments in one go: "
                  f"{time.perf_counter() - t:.1f} s; peak RSS {peak_mb():.0f} MB")
            compare_timing(out, work, args.bootstrap)
            return
        rng = random.Random(0)
        print(f"peak RSS before writing (imports): {peak_mb():.0f} MB")
        w = TableWriter(out, {"run_id": "bench", "bench": True}, schema=schema)
        times = np.empty(args.traces)
        t0 = time.perf_counter()
        for i in range(args.traces):
            rows = trace_rows(i, args.segments, rng)
            t = time.perf_counter()
            w.append(rows, position=i)
            times[i] = time.perf_counter() - t
        total = time.perf_counter() - t0
        first, last = times[:window].mean(), times[-window:].mean()
        files = io.data_files(out)
        size = sum(f.stat().st_size for f in files)
        print(f"traces {args.traces:,} x {args.segments} segments "
              f"({args.traces * args.segments:,} rows)")
        print(f"append: first {window:,} traces {first * 1e3:.2f} ms/trace, last {window:,} "
              f"{last * 1e3:.2f} ms/trace, ratio {last / first:.2f} (goal <= 1.5)")
        print(f"write total {total:.1f} s (appends {times.sum():.1f} s, the rest is making "
              f"rows); {len(files):,} files, {size / 1e6:.0f} MB before compaction; "
              f"peak RSS {peak_mb():.0f} MB")

        t = time.perf_counter()
        ids = io.read_table(out, ["trace_id"]).column(0)
        print(f"read trace ids of the uncompacted folder: {time.perf_counter() - t:.1f} s "
              f"({len(ids):,} rows)")
        t = time.perf_counter()
        w.close()
        files = io.data_files(out)
        size = sum(f.stat().st_size for f in files)
        print(f"compaction: {time.perf_counter() - t:.1f} s -> {len(files)} file, "
              f"{size / 1e6:.0f} MB; peak RSS {peak_mb():.0f} MB")
        t = time.perf_counter()
        TableWriter(out, {"run_id": "bench", "bench": True}, schema=schema)
        print(f"reopen to resume (read {args.traces:,} done ids): "
              f"{time.perf_counter() - t:.2f} s")

        compare_timing(out, work, args.bootstrap)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
