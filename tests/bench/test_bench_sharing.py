"""Several processes on one bench folder divide its work: a claim per method table, metrics
once every table is there, a dead holder never blocks."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from cotcredit.bench import BenchSize, run_bench
from cotcredit.store.claims import claim

TINY = BenchSize(problems=3, samples=2, rollouts=4, n_boot=50, splits=2)
HOLDER = textwrap.dedent("""
    import sys
    from cotcredit.store.claims import claim
    with claim(sys.argv[1], "loo", wait=False) as mine:
        print("held" if mine else "refused", flush=True)
        sys.stdin.read()
""")


def _bench(out, cache, log=None):
    return run_bench("unique", "rredcot,loo", size=TINY, threads=1, output=out, cache=cache,
                     reports=False, log=log)


def _timeless(frame: pd.DataFrame) -> pd.DataFrame:
    """Everything but wall times, which differ from run to run."""
    frame = frame.drop(columns=[c for c in frame.columns if c == "seconds"])
    if "statistic" in frame.columns:
        frame = frame[frame["statistic"] != "seconds"].reset_index(drop=True)
    return frame


@pytest.mark.subprocess
def test_a_claim_excludes_other_processes_and_dies_with_its_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with claim(tmp_path, "loo", wait=False) as mine:
            assert not mine
        with claim(tmp_path, "rredcot", wait=False) as mine:  # other work stays free
            assert mine
    finally:
        holder.kill()  # killed, never released by hand
        holder.wait()
    with claim(tmp_path, "loo", wait=False) as mine:
        assert mine


def test_a_method_held_elsewhere_is_left_then_awaited_and_the_results_match(tmp_path):
    cache = tmp_path / "cache"
    alone = _bench(tmp_path / "alone", cache)
    out = tmp_path / "shared"
    test = out / "unique" / "test"
    held = contextlib.ExitStack()
    assert held.enter_context(claim(test, "loo", wait=False))
    lines, seen = [], {}

    def log(line):
        lines.append(line)
        if "waiting for loo" in line:  # the other process finishes: let go
            seen.update({split: sorted(p.name for p in (out / "unique" / split).glob(
                "*.parquet")) for split in ("dev", "test")})
            held.close()

    shared = _bench(out, cache, log)
    assert shared.failures == []
    assert "unique test: loo is being scored by another process; on to the next" in lines
    # everything else was scored before it waited, the held table not yet
    every = ["loo.parquet", "mc.parquet", "rollouts.parquet", "rredcot.parquet",
             "segments.parquet"]
    assert seen == {"dev": every, "test": every[1:]}
    assert (test / "loo.parquet").exists()  # then scored here: its holder left it undone
    pd.testing.assert_frame_equal(_timeless(shared.leaderboard), _timeless(alone.leaderboard))
    pd.testing.assert_frame_equal(_timeless(shared.results), _timeless(alone.results))


@pytest.mark.subprocess
def test_two_processes_on_one_folder_write_what_one_would(tmp_path):
    cache = tmp_path / "cache"
    alone = _bench(tmp_path / "alone", cache)  # also samples the cache both will read
    out = tmp_path / "shared"
    code = textwrap.dedent(f"""
        from cotcredit.bench import BenchSize, run_bench
        run_bench("unique", "rredcot,loo", size=BenchSize(problems=3, samples=2, rollouts=4,
                  n_boot=50, splits=2), threads=1, output={str(out)!r}, cache={str(cache)!r},
                  reports=False, log=lambda line: print(line, flush=True))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    board = pd.read_csv(out / "leaderboard.csv")
    alone_board = pd.read_csv(tmp_path / "alone" / "leaderboard.csv")
    pd.testing.assert_frame_equal(_timeless(board), _timeless(alone_board))
    for split in ("dev", "test"):
        for label in ("rredcot", "loo", "mc"):
            mine = pd.read_parquet(out / "unique" / split / f"{label}.parquet")
            theirs = pd.read_parquet(tmp_path / "alone" / "unique" / split / f"{label}.parquet")
            assert len(mine) == len(theirs)  # every row once: no trace scored twice
            pd.testing.assert_series_equal(mine["score"], theirs["score"])
    assert alone.failures == []


def test_overwrite_replaces_only_tables_of_other_runs(tmp_path, monkeypatch):
    """--overwrite keeps what it promises (replace tables written with other options) and no
    more: a table of this run is resumed, so a sibling process's fresh work is never redone."""
    import dataclasses

    from cotcredit.methods import registry

    cache, out = tmp_path / "cache", tmp_path / "bench"
    first = _bench(out, cache)
    calls = []
    spec = registry()["rredcot"]
    counted = dataclasses.replace(spec, run=lambda ctx, o: calls.append(1) or spec.run(ctx, o))
    monkeypatch.setitem(registry(), "rredcot", counted)
    again = run_bench("unique", "rredcot,loo", size=TINY, threads=1, output=out, cache=cache,
                      reports=False, overwrite=True)
    assert calls == [] and again.failures == []
    pd.testing.assert_frame_equal(_timeless(again.leaderboard), _timeless(first.leaderboard))
    other = dict(size=TINY, threads=1, output=out, cache=cache, reports=False,
                 sets=("rredcot.length_norm=true",))
    refused = run_bench("unique", "rredcot", **other)
    assert len(refused.failures) == 2 and all("different run" in f for f in refused.failures)
    assert calls == []
    replaced = run_bench("unique", "rredcot", overwrite=True, **other)
    assert replaced.failures == [] and len(calls) == 2 * 3 * 2  # every trace of both splits


LAUNCHED = textwrap.dedent("""
    import sys
    from cotcredit.bench import BenchSize, run_bench
    out, cache = sys.argv[1], sys.argv[2]
    result = run_bench("unique", "rredcot,loo", size=BenchSize(problems=3, samples=2,
                       rollouts=4, n_boot=50, splits=2), threads=1, output=out, cache=cache,
                       reports=False)
    sys.exit(1 if result.failures else 0)
""")


@pytest.mark.subprocess
def test_a_bench_under_torchrun_divides_traces_and_writes_what_one_process_would(tmp_path):
    """Launched, the process group divides every table trace by trace (no claims: each process
    enters every step) and the tables are compacted before the next step reads them (a step
    reading a table its main process was still compacting failed before)."""
    import os

    cache = tmp_path / "cache"
    alone = _bench(tmp_path / "alone", cache)
    script = tmp_path / "launched.py"
    script.write_text(LAUNCHED)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc-per-node", "2", str(script), str(tmp_path / "two"),
                           str(cache)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    board = pd.read_csv(tmp_path / "two" / "leaderboard.csv")
    pd.testing.assert_frame_equal(
        _timeless(board), _timeless(pd.read_csv(tmp_path / "alone" / "leaderboard.csv")))
    assert alone.failures == []
    assert not list((tmp_path / "two").glob("unique/*/.claims"))  # no claim taken
