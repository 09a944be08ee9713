"""`cotcredit bench` in one process against N processes: launched (`torchrun`, the tables
divided trace by trace) and independent on one folder (the tables divided whole).

    python benchmarks/bench_bench_sharing.py [--processes 2] [--problems 40] [--methods M,...]

Goal: on N idle cores, N launched one-thread processes finish the same bench in at most 0.65x
the wall time of one (two processes; the model loads, the segmentation's compaction and the
metrics are not divided). Independent processes are reported beside it: their division is by
whole tables, so Monte Carlo's table per split bounds them. Every side must end with the
leaderboard one process writes.

The `unique` regime (shipped checkpoint) at a small size; the traces are sampled into a cache
first, outside the timings, so both sides score the same traces. Each side starts from an empty
output folder; wall time is measured around the processes (start to the last exit).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

RUN = """
import sys
from cotcredit.bench import BenchSize, run_bench
problems, methods, out, cache = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
size = BenchSize(problems=problems, samples=2, rollouts=4, n_boot=200, splits=2)
result = run_bench("unique", methods, size=size, threads=1, output=out, cache=cache,
                   reports=False)
sys.exit(1 if result.failures else 0)
"""


def timed(processes: int, args, cache: Path, out: Path, launched: bool = False) -> float:
    """Wall seconds of `processes` bench processes on one new folder (`launched`: one
    `torchrun` of them)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    script = out.parent / "run_bench.py"
    script.write_text(RUN)
    command = [str(script), str(args.problems), args.methods, str(out), str(cache)]
    start = time.perf_counter()
    if launched:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(processes), *command]
        procs = [subprocess.Popen(command, env=env)]
    else:
        procs = [subprocess.Popen([sys.executable, *command], env=env)
                 for _ in range(processes)]
    codes = [p.wait() for p in procs]
    seconds = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"a bench process failed: exit codes {codes}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--methods", default="rredcot,rredcot-rhat,loo")
    args = ap.parse_args()
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        timed(1, args, tmp / "cache", tmp / "warm")  # samples the traces into the cache
        one = timed(1, args, tmp / "cache", tmp / "one")
        launched = timed(args.processes, args, tmp / "cache", tmp / "launched", launched=True)
        many = timed(args.processes, args, tmp / "cache", tmp / "many")
        boards = [pd.read_csv(tmp / name / "leaderboard.csv").drop(columns=["seconds"],
                                                                   errors="ignore")
                  for name in ("one", "launched", "many")]
        same = all(b.equals(boards[0]) for b in boards)
    n = args.processes
    print(f"load {os.getloadavg()[0]:.2f}; 1 process {one:.1f} s; {n} launched {launched:.1f} s "
          f"= {launched / one:.2f}x (goal <= 0.65x); {n} independent {many:.1f} s = "
          f"{many / one:.2f}x; same leaderboard: {same}")


if __name__ == "__main__":
    main()
