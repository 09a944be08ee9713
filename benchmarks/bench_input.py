"""Input at scale: does reading a Parquet input of 1M traces stream, or does it sit in memory?

Protocol (written before running): for each size (default 10,000, 100,000 and 1,000,000 rows) write
a Parquet file of synthetic traces of realistic width (prompt ~120 characters, a response of six
reasoning lines and a boxed answer, ~350 characters, answer, outcome, id; row groups of 64k rows),
then, in a fresh process, read it through `traces.iter_traces` — the stream every command reads —
counting the traces and checking the last id; and, in another fresh process, through
`readers.open_records` alone (the records, no parsing). Prints per size and mode: rows, file bytes,
seconds, records per second, and the process's peak memory (VmHWM) above its peak after imports.
Goal: the reader's peak is flat from 10k to 1M rows (a reader holding the input whole would grow
~100x); the traces' peak may grow only by the index of ids read (duplicate ids are an error), 12
bytes a trace plus the merge's copy.

    python benchmarks/bench_input.py                      # 10k, 100k and 1M rows (minutes)
    python benchmarks/bench_input.py --rows 10000 100000  # quick
    python benchmarks/bench_input.py --rows 1000000 --row-group 1000000   # one 1M-row group
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

CHUNK = 65536


def write_input(path: Path, rows: int, row_group: int = CHUNK) -> None:
    """`rows` synthetic traces, written chunk by chunk (the writer never holds them all), in
    row groups of `row_group` rows."""
    writer = None
    for start in range(0, rows, CHUNK):
        n = min(CHUNK, rows - start)
        ids = [f"t{start + i}" for i in range(n)]
        a = [(start + i) % 97 for i in range(n)]
        prompts = [f"A shop sells {x} apples on Monday and {x + 3} on Tuesday. How many apples "
                   "did it sell on the two days together?" for x in a]
        responses = [
            f"Let me think step by step.\nOn Monday the shop sold {x} apples.\nOn Tuesday it "
            f"sold {x + 3} apples.\nWait, check the question again: both days.\nSo {x} + "
            f"{x + 3} = {2 * x + 3}.\nTherefore the total is {2 * x + 3}.\n"
            f"The final answer is $\\boxed{{{2 * x + 3}}}$."
            for x in a
        ]
        table = pa.table({"id": ids, "prompt": prompts, "response": responses,
                          "answer": [str(2 * x + 3) for x in a],
                          "correct": [i % 3 != 0 for i in range(n)]})
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=row_group)
    writer.close()


def high_water_mb() -> float:
    """This process's peak resident memory (VmHWM): unlike getrusage's ru_maxrss, it is not
    carried over from the parent across fork and exec."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_child(path: str, what: str) -> None:
    """In a fresh process: stream the file, print what was read and the memory it took."""
    from cotcredit.data.readers import open_records
    from cotcredit.data.traces import iter_traces

    base = high_water_mb()
    t0 = time.perf_counter()
    n, last = 0, None
    if what == "records":  # the reader alone
        for _, obj, _ in open_records(path):
            n += 1
            last = obj["id"]
    else:  # traces: parsing, and the index of ids read (duplicates are an error)
        for trace in iter_traces(path):
            n += 1
            last = trace.id
    seconds = time.perf_counter() - t0
    peak = high_water_mb()
    print(json.dumps({"traces": n, "last": last, "seconds": seconds,
                      "base_mb": base, "peak_mb": peak}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--row-group", type=int, default=CHUNK,
                    help="rows per row group of the written files (pandas' default: 1M)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        read_child(*args.child)
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for rows in args.rows:
            path = Path(tmp) / f"traces-{rows}.parquet"
            write_input(path, rows, args.row_group)
            for what in ("records", "traces"):
                out = subprocess.run([sys.executable, __file__, "--child", str(path), what],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                assert r["traces"] == rows and r["last"] == f"t{rows - 1}", r
                r.update(rows=rows, bytes=path.stat().st_size, what=what)
                results.append(r)
                print(f"{what:>7} {rows:>9,} rows  {r['bytes'] / 1e6:6.1f} MB on disk  "
                      f"{r['seconds']:6.1f} s  {rows / r['seconds']:8,.0f}/s  peak "
                      f"{r['peak_mb']:6.1f} MB ({r['peak_mb'] - r['base_mb']:5.1f} MB above "
                      f"{r['base_mb']:.1f} MB after imports)", flush=True)
            path.unlink()
    for what in ("records", "traces"):
        rs = [r for r in results if r["what"] == what]
        first, last = rs[0], rs[-1]
        above = [r["peak_mb"] - r["base_mb"] for r in (first, last)]
        print(f"{what}: peak memory above imports {above[0]:.1f} MB at {first['rows']:,} rows, "
              f"{above[1]:.1f} MB at {last['rows']:,} (whole peak {first['peak_mb']:.1f} -> "
              f"{last['peak_mb']:.1f} MB)")


if __name__ == "__main__":
    main()
