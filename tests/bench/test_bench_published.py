"""The published leaderboard (studies/bench/) recomputed from the compact tables tracked beside
it (studies/bench/tables/): every cell's value and n, and one regime's intervals."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "studies" / "bench" / "leaderboard.csv"
TABLES = ROOT / "studies" / "bench" / "tables"
pytestmark = pytest.mark.skipif(not (TABLES / "groups" / "test").exists(),
                                reason="no compact tables published")


def published() -> pd.DataFrame:
    return pd.read_csv(BOARD, keep_default_na=False, na_values=[""])


def recomputed(n_boot: int, regimes=None) -> pd.DataFrame:
    from cotcredit.bench.leaderboard import leaderboard
    from cotcredit.bench.metrics import BASELINES
    from studies.bench.full import regime_results, row_reads

    names = regimes or list(dict.fromkeys(published()["regime"]))
    results = pd.concat([regime_results(r, TABLES, n_boot=n_boot)[0] for r in names],
                        ignore_index=True)
    methods, reads = row_reads()
    return leaderboard(results, methods, BASELINES, "mc", reads)


def same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        def text(x):
            return "" if not isinstance(x, str) and x != x else str(x)  # NaN: an empty cell

        return text(a) == text(b)
    if not (math.isfinite(a) or math.isfinite(b)):
        return True
    return math.isclose(a, b, rel_tol=5e-6, abs_tol=1e-9)  # the csv keeps 6 digits


def compare(board: pd.DataFrame, mine: pd.DataFrame, columns) -> list[str]:
    key = ["regime", "method"]
    joined = board.merge(mine, on=key, suffixes=("", "_mine"), how="outer", indicator=True)
    assert (joined["_merge"] == "both").all(), joined.loc[joined["_merge"] != "both", key]
    bad = []
    for col in columns:
        for _, r in joined.iterrows():
            if not same(r[col], r[f"{col}_mine"]):
                bad.append(f"{r['regime']} {r['method']} {col}: {r[col]} != {r[col + '_mine']}")
    return bad


def test_every_value_and_n_of_the_leaderboard_is_recomputed():
    board = published()
    mine = recomputed(n_boot=0)
    columns = [c for c in board.columns if c not in ("regime", "method")
               and not c.endswith(("_low", "_high"))]
    assert compare(board, mine, columns) == []


def test_the_intervals_of_a_regime_are_recomputed():
    board = published()
    board = board.loc[board["regime"] == "groups"]
    mine = recomputed(n_boot=2000, regimes=["groups"])
    assert compare(board, mine, [c for c in board.columns if c.endswith(("_low", "_high"))]) == []
