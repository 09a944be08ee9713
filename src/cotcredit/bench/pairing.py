"""Which baseline each row of the leaderboard is judged against: the strongest that reads no more
than the row reads.

What a row reads, least to most (``READS``): ``none`` (the trace, the model and the answer: Monte
Carlo, leave-one-out, Shapley, gradients, R̂ alone, and the baselines ``entropy``, ``position``,
``position-length``, ``random``); ``solution`` (one reference solution: ``refdiff``, R̂ + v̂ over
the one reference); ``solutions`` (every listed solution: ``refdiff-solutions``, v̂ over them);
``siblings`` (also the other right responses to the same problem: ``refdiff-siblings``,
RREDCoT's default). A row is eligible to be paired with every baseline whose class is not above
its own. Per regime, metric (``BEST_BY``) and class, the best eligible baseline is chosen on the
development split (on the held-out one where dev has no value of the metric, and ``chosen_on``
says so); each row's paired difference with it is then read on the held-out split.

Every row is also paired with the fixed rows ``FIXED`` (the one-reference and the every-path
string comparisons, the model's entropy, Monte Carlo with 16 rollouts): ``comparisons`` lists
those differences with the chosen one, each on the traces both rows scored, with its n.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

#: What a row may read, least to most.
READS = ("none", "solution", "solutions", "siblings")
#: What each baseline reads.
BASELINE_READS = {"refdiff": "solution", "refdiff-solutions": "solutions",
                  "refdiff-siblings": "siblings", "entropy": "none", "position": "none",
                  "position-length": "none", "random": "none"}
#: How the best baseline of each metric is chosen on dev: (statistic, higher is better).
BEST_BY = {"localization": ("top1", True), "mc_tracking": ("spearman", True)}
#: Rows every row is also paired with, whatever it reads.
FIXED = ("refdiff", "refdiff-siblings", "entropy", "mc-16")
#: The paired statistic of each metric (``<stat>_minus_<row>``).
PAIRED_STAT = {"localization": "top1", "mc_tracking": "spearman", "blame_departure": "top1",
               "blame_wrong_step": "top1"}
#: The baseline a false-blame rate is paired with: the one its row meets on localization.
JUDGED_BY = {"localization": "localization", "mc_tracking": "mc_tracking",
             "blame_departure": "localization", "blame_wrong_step": "localization"}
HELD_OUT, DEVELOPMENT = "test", "dev"
#: Columns of ``best_baselines``.
BEST_COLUMNS = ("regime", "metric", "reads", "baseline", "value", "chosen_on")
#: Columns of ``comparisons``.
COMPARISON_COLUMNS = ("regime", "method", "reads", "metric", "versus", "role", "difference",
                      "ci_low", "ci_high", "n")


def eligible(reads: str, baselines: Sequence[str]) -> list[str]:
    """The ``baselines`` a row reading ``reads`` may be paired with (those reading no more)."""
    level = READS.index(reads)
    return [b for b in baselines if READS.index(BASELINE_READS.get(b, "siblings")) <= level]


def best_baselines(results: pd.DataFrame, baselines: Sequence[str]) -> pd.DataFrame:
    """Per regime, metric of ``BEST_BY`` and class of ``READS``: the best eligible baseline on
    dev (test where a regime has no dev value of the metric); ties go to the first in
    ``baselines``' order (``BEST_COLUMNS``)."""
    rows = []
    for regime, own in results.groupby("regime", sort=False):
        for metric, (stat, higher) in BEST_BY.items():
            pool = own.loc[(own["metric"] == metric) & (own["statistic"] == stat)
                           & own["method"].isin(baselines) & np.isfinite(own["value"])]
            split = DEVELOPMENT if (pool["split"] == DEVELOPMENT).any() else HELD_OUT
            cand = pool.loc[pool["split"] == split]
            for reads in READS:
                mine = cand.loc[cand["method"].isin(eligible(reads, baselines))]
                if mine.empty:
                    continue
                order = mine.assign(pos=mine["method"].map(
                    {b: i for i, b in enumerate(baselines)}))
                best = order.sort_values(["value", "pos"], ascending=[not higher, True]).iloc[0]
                rows.append({"regime": regime, "metric": metric, "reads": reads,
                             "baseline": best["method"], "value": float(best["value"]),
                             "chosen_on": split})
    return pd.DataFrame(rows, columns=list(BEST_COLUMNS))


def best_facts(best: pd.DataFrame) -> dict[str, dict[str, dict]]:
    """``best_baselines``' rows of one regime as the leaderboard's facts: metric -> class ->
    baseline, value, chosen_on."""
    out: dict[str, dict[str, dict]] = {}
    for r in best.itertuples(index=False):
        out.setdefault(r.metric, {})[r.reads] = {"baseline": r.baseline, "value": r.value,
                                                 "chosen_on": r.chosen_on}
    return out


def chosen(best: pd.DataFrame, regime: str, metric: str, reads: str) -> str:
    """The baseline ``best_baselines`` chose for a regime, a metric (false blame: the one of
    localization, ``JUDGED_BY``) and a class; "" when none."""
    judged = JUDGED_BY.get(metric, metric)
    hit = best.loc[(best["regime"] == regime) & (best["metric"] == judged)
                   & (best["reads"] == reads), "baseline"]
    return str(hit.iloc[0]) if len(hit) else ""


def paired(cells: pd.DataFrame, metric: str, method: str, versus: str) -> dict[str, float]:
    """The held-out paired difference of ``method`` minus ``versus`` on ``metric`` (value,
    ci_low, ci_high, n; NaN when it was not computed), from one regime's test rows indexed by
    (metric, method, statistic)."""
    key = (metric, method, f"{PAIRED_STAT[metric]}_minus_{versus}")
    if versus == method or key not in cells.index:
        return {"value": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n": np.nan}
    r = cells.loc[key]
    return {"value": float(r["value"]), "ci_low": float(r["ci_low"]),
            "ci_high": float(r["ci_high"]), "n": float(r["n"])}


def comparisons(results: pd.DataFrame, reads: Mapping[str, str], baselines: Sequence[str],
                fixed: Sequence[str] = FIXED) -> pd.DataFrame:
    """Every row of ``reads`` (label -> class) but the baselines paired on the held-out split
    with its best eligible baseline (``role`` "best") and with each of ``fixed`` ("fixed"),
    per metric of ``PAIRED_STAT``, and its false blame minus chance ("chance");
    ``COMPARISON_COLUMNS``."""
    best = best_baselines(results, baselines)
    test = results.loc[results["split"] == HELD_OUT]
    rows = []
    for regime, own in test.groupby("regime", sort=False):
        cells = own.set_index(["metric", "method", "statistic"])
        for method in dict.fromkeys(own["method"]):
            if method not in reads or method in baselines:
                continue
            klass = reads[method]
            for metric in PAIRED_STAT:
                b = chosen(best, regime, metric, klass)
                versus = [(b, "best")] if b else []
                versus += [(f, "fixed") for f in fixed if f != b]
                if metric.startswith("blame"):
                    versus.append(("chance", "chance"))
                for v, role in versus:
                    d = paired(cells, metric, method, v)
                    if np.isfinite(d["value"]):
                        rows.append({"regime": regime, "method": method, "reads": klass,
                                     "metric": metric, "versus": v, "role": role,
                                     "difference": d["value"], "ci_low": d["ci_low"],
                                     "ci_high": d["ci_high"], "n": int(d["n"])})
    return pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS))
