"""`cotcredit bench --size quick` on every regime whose model is shipped, and the leaderboard's
numbers against a direct computation from its own tables and the checker's labels. `hops` runs
on a tiny random model in the quick suite (its checker, shipped traces and tables are the
same) and on the embedded SmolLM2 in the slow one: a minute and a half of CPU there."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from cotcredit.bench import REGIMES
from cotcredit.data import first_departure


def labelled(path) -> dict[str, dict]:
    return {str(r["id"]): r for r in map(json.loads, path.read_text().splitlines())}


def lowest_hit(rows: pd.DataFrame, offset: int) -> float:
    """1/m when ``offset``'s segment is among the m lowest-credit segments, else 0; NaN when it
    lies in no segment."""
    rows = rows.sort_values("segment")
    inside = ((rows["char_start"] <= offset) & (offset < rows["char_end"])).to_numpy()
    if not inside.any():
        return np.nan
    x = rows["score"].to_numpy()
    low = x == x.min()
    return float(low[inside][0]) / low.sum()


def shipped() -> list[str]:
    """The regimes whose model is there (a checkpoint still in training is not)."""
    return [name for name, r in REGIMES.items()
            if r.model() == "embedded" or (Path(r.model()) / "config.json").exists()]


def check_leaderboard(out: Path, regimes: list[str]) -> None:
    """The leaderboard in `out` against a direct computation for each regime: the rows are
    there, refdiff's alignment is the checkers' departure rule, and RREDCoT's and refdiff's
    localization and false-blame cells equal the lowest-credit hits counted from the tables."""
    board = pd.read_csv(out / "leaderboard.csv")
    assert list(dict.fromkeys(board["regime"])) == regimes
    for regime in regimes:
        own = board.loc[board["regime"] == regime].set_index("method")
        assert {"rredcot", "rredcot-rhat", "loo", "mc", "refdiff", "entropy", "position",
                "position-length", "random"} <= set(own.index)
        test = out / regime / "test"
        traces = labelled(test / "traces.jsonl")
        # the refdiff alignment is the checkers' departure rule
        for t in traces.values():
            assert first_departure(t["response"], t["solution"]) == t["departure_char"], t["id"]
        wrong = {i: t for i, t in traces.items() if t["error_char"] >= 0 and not t["correct"]}
        # R̂ + v̂ credits are value differences g_after - g_before
        rows = pd.read_parquet(test / "rredcot.parquet")
        rows = rows.assign(score=rows["g_after"] - rows["g_before"])
        hits = [lowest_hit(g, wrong[tid]["error_char"])
                for tid, g in rows.groupby("trace_id") if tid in wrong]
        hits = [h for h in hits if np.isfinite(h)]
        assert own.loc["rredcot", "loc_n"] == len(hits)
        if hits:
            assert own.loc["rredcot", "loc_top1"] == pytest.approx(np.mean(hits))
        # refdiff: -1 on the departing segment, 0 elsewhere
        seg = pd.read_parquet(test / "segments.parquet")

        def refdiff(tid: str, traces=traces, seg=seg) -> pd.DataFrame:
            rows = seg.loc[seg["trace_id"] == tid]
            dep = traces[tid]["departure_char"]
            inside = (rows["char_start"] <= dep) & (dep < rows["char_end"])
            return rows.assign(score=np.where(inside, -1.0, 0.0))

        for metric, key, chosen in (
            ("loc_top1", "error_char", wrong),
            ("blame_departure", "departure_char",
             {i: t for i, t in traces.items() if t["correct"] and t["valid_departure"]}),
            ("blame_wrong_step", "error_char",
             {i: t for i, t in traces.items() if t["correct"] and t["error_char"] >= 0}),
        ):
            hits = [lowest_hit(refdiff(tid), t[key]) for tid, t in chosen.items()]
            hits = [h for h in hits if np.isfinite(h)]
            expect = np.mean(hits) if hits else np.nan
            assert own.loc["refdiff", metric] == pytest.approx(expect, nan_ok=True), (
                regime, metric)


def quick_bench(regimes: list[str], tmp_path: Path, capsys) -> Path:
    out = tmp_path / "bench"
    code, _, err = run_cli(["bench", "--size", "quick", "--regimes", ",".join(regimes), "-o",
                            str(out), "--cache", str(tmp_path / "cache"), "--threads", "1",
                            "--no-reports"], capsys)
    assert code == 0, err
    return out


def test_quick_bench_on_every_shipped_checkpoint_matches_a_direct_computation(tmp_path, capsys):
    regimes = [r for r in shipped() if REGIMES[r].model() != "embedded"]
    assert {"unique", "multipath", "forecast", "long", "groups"} <= set(regimes)
    check_leaderboard(quick_bench(regimes, tmp_path, capsys), regimes)


def test_quick_bench_on_hops_with_a_tiny_model_matches_a_direct_computation(
        tmp_path, tiny_model_dir):
    """hops's shipped traces, checker labels, segments and leaderboard through the bench's
    Python API, scored by a tiny random model in place of the embedded one."""
    from cotcredit.bench import run_bench
    from cotcredit.bench.regimes.hops import Hops

    class TinyHops(Hops):
        def model(self) -> str:
            return str(tiny_model_dir)

    out = tmp_path / "bench"
    result = run_bench([TinyHops()], output=out, cache=str(tmp_path / "cache"), threads=1,
                       reports=False)
    assert not result.failures
    check_leaderboard(out, ["hops"])


@pytest.mark.slow
def test_quick_bench_on_hops_with_the_embedded_model(tmp_path, capsys):
    assert "hops" in shipped()
    check_leaderboard(quick_bench(["hops"], tmp_path, capsys), ["hops"])
