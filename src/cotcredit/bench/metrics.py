"""The benchmark's metrics on one regime's traces: localization, false blame, Monte Carlo
tracking and cost, every rate with a 95% interval and paired differences.

Input: the methods' score rows (one segmentation, as the methods wrote them) and the checker's
labels of each trace (``LABEL_COLUMNS``). Credits are compared as value differences
(``cotcredit.report.credit``, ``differences``: no start value, no terminal correction) for the
value methods (RREDCoT, Monte Carlo); attributions as written. Trace sets, by the labels:

* ``localization``: traces with a wrong step (``error_char`` ≥ 0) AND a wrong answer. Top-1 =
  how often the lowest-credit segment holds ``error_char``; mean rank of that segment by
  ascending credit (``cotcredit.report.localization.localize``: ties count 1/m, chance 1/K).
* ``blame_departure`` (false blame on valid paths): correct traces whose every step is valid
  and that depart from the reference solution (``valid_departure``, ``departure_char`` ≥ 0):
  how often the lowest credit lands on the segment holding ``departure_char``.
* ``blame_wrong_step`` (false blame on repaired errors): traces with a wrong step and the right
  answer: how often the lowest credit lands on the segment holding ``error_char``.
  Each rate stands beside chance (mean 1/K over the same traces) and its paired difference
  with chance. A method that reads value, not resemblance, should stay near chance on both.
* ``mc_tracking``: every trace Monte Carlo scored: the mean per-trace Spearman of a method's
  credits with MC's (``cotcredit.report.stats.correlate``, traces with ≥ ``min_segments``
  segments), the agreement ceiling of error-free values with MC at its rollout count and the
  rollout equivalence (``cotcredit.report.rollouts``).
* ``cost``: mean seconds, forward and generated tokens per trace (``cotcredit.report.costs``).

Baselines, each a row like a method (``cotcredit.report.baselines``): the string comparisons
``refdiff`` (−1 on the first segment that departs from the reference solution),
``refdiff-solutions`` (... that leaves every listed solution) and ``refdiff-siblings`` (... every
listed solution and every other right response to the problem), ``entropy`` (minus the model's
mean token entropy per segment), ``random`` (the negative control), and the text-free
``position`` and ``position-length``. The text-free two are fitted to each metric's own target,
leave one trace out: for the locating metrics to the first-error segments of the other wrong-answer
traces of the same split (−1 there, 0 elsewhere: minus the rate at which the first error falls
at that position), for MC tracking to the other traces' MC credits. So each metric meets the
strongest position prior it has, not one fitted to something else.

Intervals: percentile bootstrap over problems (a problem drawn brings all its samples; the
labels' ``problem`` column), one set of resamples per trace set, shared by every row and paired
difference of that set (``cotcredit.report.bootstrap.Resampler``). A paired difference is taken
on the traces both rows scored, and its ``n`` says how many.

Rows that share Monte Carlo's rollouts (``mc-4``, ``mc-8``, ``mc-16``: its first n per
boundary, ``cotcredit.report.pool``) are not scored on MC tracking (their agreement with the
run they are part of is no estimate of anything); the rollout equivalence says what n
rollouts are worth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from cotcredit.report.baselines import (
    ENTROPY_COLUMN,
    REFDIFF,
    departures_by_name,
    entropy_baseline,
    position_baseline,
    position_length_baseline,
    random_baseline,
    refdiff_baseline,
)
from cotcredit.report.costs import COST_COLUMNS, cost_summary
from cotcredit.report.credit import value_credit
from cotcredit.report.localization import localize
from cotcredit.report.rollouts import rollout_analysis
from cotcredit.report.stats import correlate

#: Per-trace label columns the metrics read (``problem``: what the bootstrap resamples).
LABEL_COLUMNS = ("trace_id", "correct", "error_char", "departure_char", "valid_departure",
                 "problem")
#: The metrics, in leaderboard order.
METRICS = ("localization", "mc_tracking", "blame_departure", "blame_wrong_step", "cost")
#: The metrics that ask where a method's lowest credit lands.
LOCATING = ("localization", "blame_departure", "blame_wrong_step")
#: The baselines every bench report carries.
BASELINES = (*REFDIFF, "entropy", "position", "position-length", "random")
#: Columns of ``RegimeMetrics.table``.
METRIC_COLUMNS = ("metric", "method", "statistic", "value", "ci_low", "ci_high", "n")
#: Row label of the target the text-free baselines are fitted to for the locating metrics.
TARGET = "first-error"
_NO_COST_BASELINES = (*REFDIFF, "position", "position-length", "random")
#: Row labels that share the reference's rollouts (Monte Carlo with its first n of them).
SHARES_ROLLOUTS = ("mc-",)


@dataclass
class RegimeMetrics:
    """What ``regime_metrics`` computed on one regime's split.

    Attributes:
        table: tidy rows (``METRIC_COLUMNS``). Locating metrics: statistics ``top1``,
            ``mean_rank``, ``chance_top1``, ``chance_rank``, ``top1_minus_chance`` and
            ``top1_minus_<row>`` (paired, per trace, with every other method and baseline).
            ``mc_tracking``: ``spearman``, ``spearman_minus_<row>`` (paired), ``rollouts``
            (the rollout equivalence: MC rollouts per boundary worth the method's agreement),
            and on the reference's rows ``ceiling`` / ``ceiling_half`` (``n`` = rollouts).
            ``cost``: ``seconds``, ``forward_tokens``, ``generated_tokens`` per trace.
        counts: traces per set and how many were left out and why.
        methods: the methods' row labels; baselines: the baselines' (both in report order).
        notes: baselines left out and why.
    """

    table: pd.DataFrame
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    methods: list[str] = field(default_factory=list)
    baselines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def value(self, metric: str, method: str, statistic: str) -> float:
        """One value of ``table`` (NaN when it was not computed)."""
        t = self.table
        hit = t.loc[(t["metric"] == metric) & (t["method"] == method)
                    & (t["statistic"] == statistic), "value"]
        return float(hit.iloc[0]) if len(hit) else float("nan")


def labels_frame(records: Sequence[dict]) -> pd.DataFrame:
    """The label columns of labelled trace records (``id`` or ``trace_id``); missing
    ``departure_char`` / ``valid_departure`` become -1 / False; ``problem`` is the
    ``problem_id`` field, else the prompt, else the trace itself."""
    frame = pd.DataFrame(list(records))
    if "trace_id" not in frame and "id" in frame:
        frame = frame.rename(columns={"id": "trace_id"})
    problem = frame["trace_id"].astype(str).radd("trace:")
    for key in ("prompt", "problem_id"):
        if key in frame:
            problem = frame[key].astype("string").radd(f"{key}:").fillna(problem)
    frame["problem"] = problem.astype(str)
    defaults = {"departure_char": -1, "valid_departure": False}
    for col, default in defaults.items():
        if col not in frame:
            frame[col] = default
    out = frame[list(LABEL_COLUMNS)].copy()
    out["trace_id"] = out["trace_id"].astype(str)
    out["correct"] = out["correct"].astype(bool)
    out["valid_departure"] = out["valid_departure"].fillna(False).astype(bool)
    for col in ("error_char", "departure_char"):
        out[col] = pd.to_numeric(out[col]).fillna(-1).astype("int64")
    return out.reset_index(drop=True)


def shares_rollouts(label: str) -> bool:
    """Whether a row is Monte Carlo with the first n of the reference's rollouts."""
    return str(label).startswith(SHARES_ROLLOUTS)


def problems_of(labels: pd.DataFrame) -> pd.Series | None:
    """trace id -> its problem (what the bootstrap resamples), None without the column."""
    if "problem" not in labels:
        return None
    return labels.set_index(labels["trace_id"].astype(str))["problem"]


def target_offsets(labels: pd.DataFrame) -> dict[str, pd.Series]:
    """For each locating metric, the offset that counts as a hit on each trace of its set
    (trace id -> offset; the other traces are absent)."""
    lab = labels.set_index("trace_id")
    error = lab["error_char"] >= 0
    sets = {
        "localization": lab.loc[error & ~lab["correct"], "error_char"],
        "blame_departure": lab.loc[lab["correct"] & lab["valid_departure"] & ~error
                                   & (lab["departure_char"] >= 0), "departure_char"],
        "blame_wrong_step": lab.loc[error & lab["correct"], "error_char"],
    }
    return {name: s.astype("Int64") for name, s in sets.items()}


def target_rows(scores: pd.DataFrame, offsets: pd.Series) -> pd.DataFrame:
    """Rows of the fitting target ``TARGET``: −1 on the segment holding each trace's offset, 0
    on its other segments; traces whose offset lies in no segment get none."""
    seg = scores[["trace_id", "segment", "char_start", "char_end", "text"]].drop_duplicates(
        ["trace_id", "segment"])
    at = seg["trace_id"].map(offsets.astype("float64")).to_numpy(dtype="float64")
    inside = (seg["char_start"].to_numpy() <= at) & (at < seg["char_end"].to_numpy())
    has = pd.Series(inside).groupby(seg["trace_id"].to_numpy()).transform("any").to_numpy()
    out = seg.loc[has].copy()
    out["method"] = TARGET
    out["score"] = np.where(inside[has], -1.0, 0.0)
    return out


def metric_baselines(
    scores: pd.DataFrame,
    baselines: Sequence[str],
    fit_to: str,
    *,
    departures: pd.Series | dict | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, list[str]]:
    """Rows of ``baselines`` for the traces of ``scores``; the text-free ones fitted to the
    rows labelled ``fit_to``; ``departures``: per string comparison (``REFDIFF``) trace id ->
    offset, or one Series (``refdiff``'s). Returns the rows and notes on baselines left
    out."""
    parts, notes = [], []
    found = departures_by_name(departures)
    missing = [b for b in baselines if b in REFDIFF and not len(found.get(b, ()))]
    if missing:
        notes.append(f"{', '.join(missing)} left out: no reference solutions")
    for name in baselines:
        if name in REFDIFF:
            if name not in missing:
                parts.append(refdiff_baseline(scores, found[name], name))
        elif name == "entropy":
            if ENTROPY_COLUMN not in scores.columns:
                notes.append("entropy left out: the tables have no mean_entropy column")
                continue
            parts.append(entropy_baseline(scores))
        elif name == "random":
            parts.append(random_baseline(scores, seed))
        elif name == "position":
            parts.append(position_baseline(scores, fit_to).drop(columns="position_bin"))
        elif name == "position-length":
            parts.append(position_length_baseline(scores, fit_to))
        else:
            raise ValueError(f"unknown baseline {name!r}")
    if not parts:
        return pd.DataFrame(columns=["trace_id", "segment", "method", "score"]), notes
    return pd.concat(parts, ignore_index=True), notes


def _with_outcome(scores: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """``scores`` with each trace's outcome from the labels (what the position baselines group
    by)."""
    outcome = labels.set_index("trace_id")["correct"].astype("float64")
    return scores.assign(outcome=scores["trace_id"].map(outcome))


_SEGMENT_COLUMNS = ["trace_id", "segment", "method", "score", "char_start", "char_end", "text"]


def _segment_columns(rows: pd.DataFrame) -> pd.DataFrame:
    """The columns the statistics and the baselines read (the entropy when present)."""
    return rows[[*_SEGMENT_COLUMNS, *([ENTROPY_COLUMN] if ENTROPY_COLUMN in rows else [])]]


def locating_metrics(
    rows: pd.DataFrame,
    labels: pd.DataFrame,
    methods: Sequence[str],
    baselines: Sequence[str],
    *,
    departures: pd.Series | dict | None = None,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[list[pd.DataFrame], dict[str, dict[str, int]], list[str]]:
    """The three locating metrics (module docstring) of ``methods`` and ``baselines``."""
    offsets = target_offsets(labels)
    target = target_rows(rows, offsets["localization"])
    fitted = _with_outcome(pd.concat([_segment_columns(rows), target], ignore_index=True),
                           labels)
    base, notes = metric_baselines(fitted, baselines, TARGET, departures=departures, seed=seed)
    present = [b for b in baselines if b in set(base["method"])]
    every = pd.concat([rows[_SEGMENT_COLUMNS], base[_SEGMENT_COLUMNS]], ignore_index=True)
    names = [*methods, *present]
    tables, counts = [], {}
    for metric in LOCATING:
        loc = localize(every, offsets[metric], names, baselines=names, n_boot=n_boot, seed=seed,
                       clusters=problems_of(labels))
        counts[metric] = {k: v for k, v in loc.counts.items() if k not in ("no_error", "unknown")}
        tables.append(loc.table.assign(metric=metric))
    return tables, counts, notes


def tracking_metrics(
    rows: pd.DataFrame,
    labels: pd.DataFrame,
    methods: Sequence[str],
    baselines: Sequence[str],
    *,
    reference: str = "mc",
    counts: pd.DataFrame | None = None,
    departures: pd.Series | dict | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    min_segments: int = 3,
    splits: int = 20,
) -> tuple[list[pd.DataFrame], dict[str, int]]:
    """MC tracking (module docstring): agreement with ``reference``, paired differences, the
    ceiling and rollout equivalence (from per-boundary rollout ``counts``, when given). Rows
    that share the reference's rollouts (``SHARES_ROLLOUTS``) are left out."""
    methods = [m for m in methods if m == reference or not shares_rollouts(m)]
    rows = rows.loc[rows["method"].isin(methods)]
    fitted = _with_outcome(_segment_columns(rows), labels)
    base, _ = metric_baselines(fitted, baselines, reference, departures=departures, seed=seed)
    present = [b for b in baselines if b in set(base["method"])]
    every = pd.concat([rows[_SEGMENT_COLUMNS], base[_SEGMENT_COLUMNS]], ignore_index=True)
    corr = correlate(every, n_boot=n_boot, seed=seed, min_segments=min_segments,
                     clusters=problems_of(labels),
                     reference=reference, baselines=present)
    compared = [m for m in [*methods, *present] if m != reference]
    agg = corr.aggregates()
    out = []
    spear = agg.loc[(agg["statistic"] == "mean_spearman")
                    & ((agg["method_a"] == reference) | (agg["method_b"] == reference))]
    other = spear["method_a"].where(spear["method_b"] == reference, spear["method_b"])
    out.append(pd.DataFrame({"method": other, "statistic": "spearman",
                             "value": spear["value"], "ci_low": spear["ci_low"],
                             "ci_high": spear["ci_high"], "n": spear["n"]}))
    paired = corr.paired.loc[corr.paired["statistic"] == "mean_spearman"]
    for flip in (False, True):  # the pairs are stored once: A - B and, flipped, B - A
        a, b = ("versus", "method") if flip else ("method", "versus")
        sign = -1.0 if flip else 1.0
        lo, hi = ("ci_high", "ci_low") if flip else ("ci_low", "ci_high")
        out.append(pd.DataFrame({
            "method": paired[a], "statistic": "spearman_minus_" + paired[b],
            "value": sign * paired["difference"], "ci_low": sign * paired[lo],
            "ci_high": sign * paired[hi], "n": paired["n"]}))
    skipped = {}
    if counts is not None and len(counts):
        outcome = labels.set_index("trace_id")["correct"].astype("float64")
        ro = rollout_analysis(every, counts, compared, credit="differences", outcomes=outcome,
                              splits=splits, n_boot=n_boot, seed=seed,
                              clusters=problems_of(labels))
        if ro is not None:
            eq = ro.equivalence
            out.append(pd.DataFrame({"method": eq["method"], "statistic": "rollouts",
                                     "value": eq["rollouts"], "ci_low": eq["rollouts_low"],
                                     "ci_high": eq["rollouts_high"], "n": eq["n"]}))
            ceil = ro.ceiling.assign(statistic=["ceiling_half", "ceiling"])
            out.append(pd.DataFrame({"method": reference, "statistic": ceil["statistic"],
                                     "value": ceil["ceiling"], "ci_low": ceil["ci_low"],
                                     "ci_high": ceil["ci_high"], "n": ceil["rollouts"]}))
            skipped = dict(ro.skipped)
    n_used = int(spear["n"].max()) if len(spear) else 0
    return ([t.assign(metric="mc_tracking") for t in out],
            {"traces": n_used, **{f"ceiling: {k}": v for k, v in skipped.items()}})


def cost_metrics(scores: pd.DataFrame, methods: Sequence[str], baselines: Sequence[str],
                 segments: pd.DataFrame | None = None) -> pd.DataFrame:
    """Mean cost per trace of each method (and the baselines: refdiff, position,
    position-length and random run no model; entropy costs the segmentation's forward pass)."""
    rows = []
    costs = cost_summary(scores.loc[scores["method"].isin(methods)])
    if costs is not None:
        for r in costs.itertuples(index=False):
            for stat, value in (("seconds", r.seconds), ("forward_tokens", r.forward_tokens),
                                ("generated_tokens", r.generated_tokens)):
                rows.append({"method": r.method, "statistic": stat, "value": value,
                             "n": r.traces})
    n_traces = int(scores["trace_id"].nunique())
    for b in baselines:
        forward = 0.0
        if b == "entropy":
            source = segments if segments is not None else scores
            if "cost_forward_tokens" not in source.columns:
                continue
            per_trace = pd.to_numeric(source.groupby("trace_id")["cost_forward_tokens"].first())
            forward = float(per_trace.mean())
        elif b not in _NO_COST_BASELINES:
            continue
        rows += [{"method": b, "statistic": "forward_tokens", "value": forward, "n": n_traces},
                 {"method": b, "statistic": "generated_tokens", "value": 0.0, "n": n_traces}]
    frame = pd.DataFrame(rows, columns=["method", "statistic", "value", "n"])
    return frame.assign(metric="cost", ci_low=np.nan, ci_high=np.nan)


def regime_metrics(
    scores: pd.DataFrame,
    labels: pd.DataFrame,
    *,
    methods: Sequence[str] | None = None,
    baselines: Sequence[str] = BASELINES,
    departures: pd.Series | dict | None = None,
    reference: str = "mc",
    counts: pd.DataFrame | None = None,
    segments: pd.DataFrame | None = None,
    n_boot: int = 2000,
    seed: int = 0,
    min_segments: int = 3,
    splits: int = 20,
) -> RegimeMetrics:
    """Every metric of one regime's split (see the module docstring).

    Args:
        scores: the methods' score rows, on one segmentation (Monte Carlo's among them for
            ``mc_tracking``), as written (credits are redefined here).
        labels: one row per trace with ``LABEL_COLUMNS`` (``labels_frame``).
        methods: row labels to score (default: every label in ``scores``).
        baselines: which of ``BASELINES`` to add.
        departures: trace id -> where the response departs from its reference solution
            (``first_departure``); without it ``refdiff`` is left out.
        reference: the Monte Carlo row label of ``mc_tracking``.
        counts: correct/total rollouts per (trace_id, boundary), for the ceiling.
        segments: the segmentation table (the cost of the ``entropy`` baseline).
    """
    scores = scores.assign(trace_id=scores["trace_id"].astype(str),
                           method=scores["method"].astype(str))
    labels = labels.loc[labels["trace_id"].isin(set(scores["trace_id"]))]
    rows = value_credit(scores, "differences")
    present = list(dict.fromkeys(rows["method"]))
    names = [m for m in (methods or present) if m in present]
    tables, counts_by, notes = locating_metrics(rows, labels, names, baselines,
                                                departures=departures, n_boot=n_boot, seed=seed)
    if reference in names:
        more, tracked = tracking_metrics(rows, labels, names, baselines, reference=reference,
                                         counts=counts, departures=departures, n_boot=n_boot,
                                         seed=seed, min_segments=min_segments, splits=splits)
        tables += more
        counts_by["mc_tracking"] = tracked
    scored = set(pd.concat([t["method"] for t in tables]))
    used = [b for b in baselines if b in scored]
    cost_cols = [c for c in COST_COLUMNS if c in scores.columns]
    tables.append(cost_metrics(scores[["trace_id", "method", *cost_cols]], names, used,
                               segments))
    table = pd.concat([t for t in tables if len(t)], ignore_index=True)
    table = table[list(METRIC_COLUMNS)].astype({"metric": "str", "method": "str",
                                                "statistic": "str", "value": "float64",
                                                "ci_low": "float64", "ci_high": "float64",
                                                "n": "int64"})
    return RegimeMetrics(table.reset_index(drop=True), counts_by, names, used, notes)
