"""The agreement ceiling and rollout equivalence, from Monte Carlo's rollout counts.

Monte Carlo's credits are estimates: agreement with them is bounded by their noise, and "agrees
with MC at 0.33" means little until it is set against what MC itself achieves. Two figures,
both on the statistic the report shows (mean per-trace Spearman of credits, credits as defined by
``--credit``), both from the number of correct rollouts c_k out of N_k at every boundary k:

* **rollout equivalence.** Each boundary's rollouts are split at random into a held-out half
  (⌊N/2⌋) and the rest. MC(n) = the credits from n rollouts per boundary drawn from the rest,
  for n = 1 .. N − ⌊N/2⌋ (the first n of the rest in a random order, so MC(n) grows by one
  rollout at a time within a split). Per trace, MC(n)'s Spearman with the held-out half's credits, and
  every method's Spearman with the same held-out credits, averaged over ``splits`` random
  splits; means over traces. A method is *worth n\\* rollouts per boundary* where the MC(n)
  curve reaches its agreement (linear interpolation between whole n; "< 1" below MC(1),
  "> n_max" above the largest n, never extrapolated), with a bootstrap interval over traces
  (the same resamples for the curve and the method). Costs are then compared at n\\*: MC's
  measured cost per trace scaled to n\\* rollouts per boundary (generation is linear in the
  rollouts) against the method's own measured cost.
* **agreement ceiling.** How well error-free values would agree with an N-rollout MC, for
  N = ⌊N/2⌋ (the held-out half of the equivalence) and N = all rollouts (the reference of the
  agreement table). With the fitted values V̂_k = c_k / N_k taken as the truth, independent
  N-rollout estimates are simulated (c ~ Binomial(N, V̂_k)) and the Spearman of V̂'s credits
  with the simulated ones is averaged over ``splits`` simulations (the plug-in value P). V̂
  carries MC's own noise, which makes P too high (rougher "true" credits are easier to rank),
  so the bias is estimated one level down, as in a bootstrap bias correction: V̂* = values
  re-estimated from N_k simulated rollouts at V̂, P* = the same agreement computed from V̂*;
  ceiling = 2P − P* per trace, then averaged over traces. On simulated traces with known
  values (the tests) it lands within 0.05 of the true values' agreement; the plug-in alone
  overshoots by about 0.08.

Conventions, as for the baselines: a trace whose reference credits (held-out or true) are
constant is left out of that split; an estimate (MC(n), simulated MC, a method) constant on a
trace orders nothing and counts 0. Placing a boundary's c correct rollouts at random among its N
is a random order of its rollouts (they are exchangeable), so the counts suffice: they come from the
saved rollouts (``--save-rollouts``; ``correct`` per rollout; a truncated rollout counts as
wrong unless the Monte Carlo table's ``truncated_policy`` is ``drop``) when a rollouts table is
given or lies beside the Monte Carlo table as ``rollouts.parquet``, else from the Monte Carlo
table itself (``n_correct``/``n_rollouts`` of each segment's end boundary and ``value_before``
of the first segment, assumed drawn with the same N). Traces with interpolated values or whose
boundaries do not match their segments are left out and counted.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.report.bootstrap import Resampler, cluster_codes, percentile_interval
from cotcredit.report.correlation import average_ranks, rowwise, wide
from cotcredit.store import io

EQUIVALENCE_COLUMNS = ("method", "agreement", "ci_low", "ci_high", "rollouts", "rollouts_low",
                       "rollouts_high", "n")
CURVE_COLUMNS = ("rollouts", "agreement", "ci_low", "ci_high", "n")
CEILING_COLUMNS = ("rollouts", "ceiling", "ci_low", "ci_high", "n")
#: Traces the rollout analysis uses at most (a random subset beyond), and its split budget.
MAX_TRACES = 20_000
SPLIT_BUDGET = 40_000


@dataclass
class RolloutAnalysis:
    """Rollout equivalence and ceilings (see the module docstring).

    Attributes:
        curve: agreement of MC(n) with the held-out half per n (``CURVE_COLUMNS``).
        equivalence: per method, its agreement with the held-out half and the n it is worth
            (NaN with ``below``/``above`` flags where outside the curve).
        ceiling: agreement of error-free values with an N-rollout MC (``CEILING_COLUMNS``).
        held_out: rollouts per boundary in the held-out half; total: all of them.
        source: where the counts came from (a table name or "mc table").
        skipped: traces left out, by reason.
        splits: random splits (and simulations) averaged.
    """

    curve: pd.DataFrame
    equivalence: pd.DataFrame
    ceiling: pd.DataFrame
    held_out: int
    total: int
    source: str
    skipped: dict[str, int] = field(default_factory=dict)
    splits: int = 10
    subsampled: bool = False  # estimated on a random subset of the traces (``MAX_TRACES``)


def counts_from_rollouts(rollouts: pd.DataFrame, drop_truncated: bool = False) -> pd.DataFrame:
    """Correct and total rollouts per (trace_id, boundary) from a saved rollouts table."""
    r = rollouts[["trace_id", "boundary", "correct", "truncated"]].copy()
    if drop_truncated:
        r = r.loc[~r["truncated"].astype(bool)]
    r["correct"] = r["correct"].astype(bool) & ~r["truncated"].astype(bool)
    out = r.groupby(["trace_id", "boundary"]).agg(correct=("correct", "sum"),
                                                  total=("correct", "size")).reset_index()
    out["trace_id"] = out["trace_id"].astype(str)
    return out


#: Monte Carlo's score-table columns the counts come from (besides its value columns).
COUNT_COLUMNS = ("n_rollouts", "n_correct", "n_truncated", "interpolated", "truncated_policy")


def counts_from_mc(mc: pd.DataFrame) -> pd.DataFrame:
    """Correct and total rollouts per (trace_id, boundary) from Monte Carlo's score rows."""
    need = ("value_before", "n_rollouts", "n_correct")
    if not all(c in mc.columns for c in need) or mc[list(need)].isna().any(axis=None):
        return pd.DataFrame(columns=["trace_id", "boundary", "correct", "total"])
    mc = mc.sort_values(["trace_id", "segment"], kind="stable")
    if "interpolated" in mc.columns:
        bad = mc.groupby("trace_id")["interpolated"].transform("any").astype(bool)
        mc = mc.loc[~bad]
    rank = mc.groupby("trace_id").cumcount()
    ends = pd.DataFrame({"trace_id": mc["trace_id"].astype(str), "boundary": rank + 1,
                         "correct": mc["n_correct"].astype("int64"),
                         "total": mc["n_rollouts"].astype("int64")})
    first = mc.loc[rank == 0]
    start = pd.DataFrame({"trace_id": first["trace_id"].astype(str), "boundary": 0,
                          "correct": np.rint(first["value_before"] * first["n_rollouts"])
                          .astype("int64"), "total": first["n_rollouts"].astype("int64")})
    return pd.concat([start, ends], ignore_index=True)


def _credits(values: np.ndarray, zeta: np.ndarray | None) -> np.ndarray:
    """Credits from values at boundaries 0..K: differences, or the return form with ζ."""
    credit = np.diff(values, axis=-1)
    if zeta is not None:
        credit = credit.copy()
        credit[..., 0] += values[..., 0]
        credit[..., -1] += zeta - values[..., -1]
    return credit


def _agreement(
    estimate: np.ndarray, reference: np.ndarray, ref_ranks: np.ndarray | None = None
) -> np.ndarray:
    """Per-row Spearman with the conventions of the module docstring (``ref_ranks``: the
    reference's ranks, when already computed)."""
    ref_const = np.ptp(reference, axis=-1) == 0
    est_const = np.ptp(estimate, axis=-1) == 0
    rho = rowwise("spearman", estimate, reference, (None, ref_ranks))
    rho = np.where(est_const, 0.0, rho)
    return np.where(ref_const, np.nan, rho)


def rollout_analysis(
    scores: pd.DataFrame,
    counts: pd.DataFrame,
    methods: Sequence[str],
    *,
    credit: str = "differences",
    outcomes: pd.Series | None = None,
    splits: int = 10,
    n_boot: int = 2000,
    seed: int = 0,
    source: str = "",
    max_traces: int = MAX_TRACES,
    clusters: Mapping[str, object] | None = None,
) -> RolloutAnalysis | None:
    """Rollout equivalence of ``methods`` (rows of ``scores``, credits already as compared) and
    the ceilings, from per-boundary ``counts`` (``counts_from_rollouts``/``counts_from_mc``);
    None when no trace has usable counts.

    At dataset scale the figures are estimated on a random ``max_traces`` of the traces with
    counts (seeded; ``RolloutAnalysis.subsampled`` says so), with fewer splits (at most
    ``SPLIT_BUDGET`` trace-splits in all, at least 2): averaging over many traces already
    averages over splits. ``clusters`` (trace id -> problem): the bootstrap resamples
    problems."""
    rng = np.random.default_rng(seed)
    skipped: dict[str, int] = {}
    ids_with = pd.Index(pd.unique(counts["trace_id"].astype(str)))
    subsampled = len(ids_with) > max_traces
    if subsampled:
        ids_with = pd.Index(np.sort(rng.choice(ids_with.to_numpy(), max_traces, replace=False)))
        counts = counts.loc[counts["trace_id"].astype(str).isin(ids_with)]
    splits = max(1, min(splits, max(2, SPLIT_BUDGET // max(len(ids_with), 1))))
    table = counts.pivot_table(index="trace_id", columns="boundary", values=["correct", "total"],
                               aggfunc="sum")
    data = wide(scores.loc[scores["trace_id"].isin(table.index)],
                {m: (m, "score") for m in methods})
    ids = data.trace_ids.astype(str)
    n_t = len(ids)
    if n_t == 0:
        return None
    per_method = {m: np.full(n_t, np.nan) for m in methods}
    curve_rows: list[np.ndarray] = []
    ceil_half, ceil_all = np.full(n_t, np.nan), np.full(n_t, np.nan)
    levels: int | None = None
    total_n = held = 0
    for g in data.groups:
        k = g.k
        tids = ids[g.traces]
        corr = table["correct"].reindex(tids).reindex(columns=range(k + 1)).to_numpy("float64")
        tot = table["total"].reindex(tids).reindex(columns=range(k + 1)).to_numpy("float64")
        good = np.isfinite(corr).all(axis=1) & np.isfinite(tot).all(axis=1)
        if good.any():
            same = (tot[good] == tot[good][:, :1]).all(axis=1)
            good[np.flatnonzero(good)[~same]] = False
        skipped["boundaries missing or unequal rollouts"] = skipped.get(
            "boundaries missing or unequal rollouts", 0) + int((~good).sum())
        if not good.any():
            continue
        c, n = corr[good].astype("int64"), tot[good].astype("int64")
        big_n = int(np.bincount(n[:, 0]).argmax())
        keep = n[:, 0] == big_n
        c, rows = c[keep], g.traces[good][keep]
        skipped["another number of rollouts"] = skipped.get("another number of rollouts", 0) + int(
            (~keep).sum())
        if big_n < 2:
            continue
        if levels is not None and big_n != total_n:
            skipped["another number of rollouts"] += len(rows)
            continue
        total_n, held = big_n, big_n // 2
        rest = big_n - held
        levels = rest
        zeta = None
        if credit == "return":
            zeta = (outcomes.reindex(ids[rows]).to_numpy("float64")
                    if outcomes is not None else np.full(len(rows), np.nan))
        m_vals = {m: g.values[m][np.isin(g.traces, rows)] for m in methods if m in g.values}
        agree_n = np.zeros((splits, len(rows), rest))
        agree_m = {m: np.zeros((splits, len(rows))) for m in m_vals}
        sim_half = np.zeros((2, splits, len(rows)))  # plug-in, one level down
        sim_all = np.zeros((2, splits, len(rows)))
        truth = _credits(c / big_n, zeta)
        truth_ranks = average_ranks(truth)
        for s in range(splits):
            # A random order of each boundary's rollouts (c of them correct): the first
            # `held` are the held-out half, MC(n) uses the next n.
            order = np.argsort(rng.random((*c.shape, big_n), dtype=np.float32), axis=-1)
            correct = order < c[..., None]
            h = correct[..., :held].sum(axis=-1)
            ref = _credits(h / held, zeta)
            ref_ranks = average_ranks(ref)  # one ranking serves every estimate of this split
            firsts = np.cumsum(correct[..., held:], axis=-1)
            for lev in range(1, rest + 1):
                sub = firsts[..., lev - 1]
                agree_n[s, :, lev - 1] = _agreement(_credits(sub / lev, zeta), ref, ref_ranks)
            for m, x in m_vals.items():
                agree_m[m][s] = _agreement(x, ref, ref_ranks)
            # Plug-in agreement of V̂ with simulated N-rollout MC, minus its bias estimated
            # one level down (V̂* = V̂ re-estimated from simulated rollouts): V̂ carries MC's
            # noise, which makes the plug-in ceiling too high.
            v_star = rng.binomial(big_n, c / big_n) / big_n
            truth_star = _credits(v_star, zeta)
            star_ranks = average_ranks(truth_star)
            for target, size in ((sim_half, held), (sim_all, big_n)):
                plug = _agreement(_credits(rng.binomial(size, c / big_n) / size, zeta), truth,
                                  truth_ranks)
                star = _agreement(_credits(rng.binomial(size, v_star) / size, zeta), truth_star,
                                  star_ranks)
                target[0, s], target[1, s] = plug, star
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN: left out in every split
            curve_rows.append((rows, np.nanmean(agree_n, axis=0)))
            for m, a in agree_m.items():
                per_method[m][rows] = np.nanmean(a, axis=0)
            for target, sims in ((ceil_half, sim_half), (ceil_all, sim_all)):
                plug, star = np.nanmean(sims[0], axis=0), np.nanmean(sims[1], axis=0)
                target[rows] = 2 * plug - star
    if levels is None:
        return None
    curve = np.full((n_t, levels), np.nan)
    for rows, vals in curve_rows:
        curve[rows] = vals
    # One trace set for the curve and every method: where the held-out half orders segments.
    used = np.isfinite(curve).all(axis=1)
    for m in methods:
        per_method[m] = np.where(used, per_method[m], np.nan)
    curve[~used] = np.nan
    boot = Resampler(n_t, n_boot, seed, cluster_codes(ids, clusters))
    cols = [curve[:, j] for j in range(levels)] + [per_method[m] for m in methods]
    cols += [ceil_half, ceil_all]
    values = np.column_stack(cols)
    resampled = boot.means(values)
    low, high = percentile_interval(resampled)
    means = np.array([np.nanmean(v) if np.isfinite(v).any() else np.nan for v in values.T])
    n_used = int(used.sum())
    curve_df = pd.DataFrame({"rollouts": np.arange(1, levels + 1), "agreement": means[:levels],
                             "ci_low": low[:levels], "ci_high": high[:levels], "n": n_used})
    eq = []
    for i, m in enumerate(methods):
        j = levels + i
        if not np.isfinite(per_method[m]).any():
            continue
        n_star = worth(means[:levels], means[j])
        boots = [worth(resampled[b, :levels], resampled[b, j]) for b in range(len(resampled))]
        boots = [b for b in boots if not np.isnan(b)]
        # no interpolation between resamples: the ends may be 0 (< MC(1)) or inf (> n_max)
        lo, hi = (np.quantile(boots, [0.025, 0.975], method="inverted_cdf") if boots
                  else (np.nan, np.nan))
        eq.append({"method": m, "agreement": means[j], "ci_low": low[j], "ci_high": high[j],
                   "rollouts": n_star, "rollouts_low": lo, "rollouts_high": hi,
                   "n": int(np.isfinite(per_method[m]).sum())})
    ceiling = pd.DataFrame({
        "rollouts": [held, total_n], "ceiling": means[-2:], "ci_low": low[-2:],
        "ci_high": high[-2:],
        "n": [int(np.isfinite(ceil_half).sum()), int(np.isfinite(ceil_all).sum())]})
    skipped["held-out half constant"] = max(0, int((~used).sum()) - sum(skipped.values()))
    return RolloutAnalysis(curve_df, pd.DataFrame(eq, columns=list(EQUIVALENCE_COLUMNS)),
                           ceiling, held, total_n, source,
                           {k: v for k, v in skipped.items() if v > 0}, splits, subsampled)


def worth(curve: np.ndarray, agreement: float) -> float:
    """The n (1-based, fractional) at which the MC(n) ``curve`` reaches ``agreement``: linear
    interpolation on the running maximum of the curve; 0 below MC(1), inf above the last n."""
    if not (np.isfinite(agreement) and np.isfinite(curve).all()):
        return np.nan
    mono = np.maximum.accumulate(curve)
    if agreement < mono[0]:
        return 0.0
    if agreement > mono[-1]:
        return np.inf
    # first n whose curve reaches the agreement, interpolated from the one before
    j = int(np.argmax(mono >= agreement))
    if j == 0:
        return 1.0
    lo, hi = mono[j - 1], mono[j]
    return float(j + (agreement - lo) / (hi - lo)) if hi > lo else float(j + 1)


def find_rollouts(mc_table: Path | str | None, given: str | Path | None = None) -> Path | None:
    """The rollouts table to use: ``given``, else ``rollouts.parquet`` beside the mc table."""
    if given:
        return Path(given)
    if mc_table is None:
        return None
    beside = Path(mc_table).parent / "rollouts.parquet"
    return beside if beside.exists() else None


def read_rollouts(path: Path | str) -> pd.DataFrame:
    """The columns of a rollouts table that the counts need (``UserError`` when missing)."""
    return io.read_table(path, ["trace_id", "boundary", "correct", "truncated"]).to_pandas()


def rollout_table(analysis: RolloutAnalysis) -> pd.DataFrame:
    """The curve, the equivalences and the ceilings as one tidy table (``kind`` says which):
    kind, method, rollouts, value, ci_low, ci_high, rollouts_low, rollouts_high, n."""
    curve = analysis.curve.assign(kind="mc_curve", method="mc", value=analysis.curve["agreement"])
    eq = analysis.equivalence.assign(kind="equivalence", value=analysis.equivalence["agreement"])
    ceil = analysis.ceiling.assign(kind="ceiling", method="error-free values",
                                   value=analysis.ceiling["ceiling"])
    cols = ["kind", "method", "rollouts", "value", "ci_low", "ci_high", "rollouts_low",
            "rollouts_high", "n"]
    out = pd.concat([curve, eq, ceil], ignore_index=True)
    for c in cols:
        if c not in out:
            out[c] = np.nan
    return out[cols].astype({"kind": "str", "method": "str", "rollouts": "float64"})
