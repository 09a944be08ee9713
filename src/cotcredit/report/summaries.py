"""The report's tables of numbers as formatted strings (one DataFrame each), shared by the
report's sections (Markdown, HTML, LaTeX) and the terminal summary, and the sentences that say
what was compared (`credit_text`, `baseline_text`)."""

from __future__ import annotations

import pandas as pd

from cotcredit.report.format import EMPTY, fmt, fmt_ci, fmt_count, fmt_ratio, fmt_seconds
from cotcredit.report.localization import Localization
from cotcredit.report.rollouts import RolloutAnalysis
from cotcredit.report.stats import Correlations

STAT_NAMES = {"spearman": "Spearman", "pearson": "Pearson", "kendall": "Kendall"}
STAT_ORDER = ("spearman", "pearson", "kendall")  # columns of the report's tables


def ci_cell(sel: pd.DataFrame, statistic: str) -> str:
    """The formatted value [CI] of `statistic` in an aggregate selection (a dash when absent)."""
    if statistic not in sel.index:
        return EMPTY
    return fmt_ci(*sel.loc[statistic, ["value", "ci_low", "ci_high"]])


def count_cell(sel: pd.DataFrame, statistic: str) -> str:
    """The n of `statistic` in an aggregate selection (0 when absent)."""
    return str(int(sel.loc[statistic, "n"])) if statistic in sel.index else "0"


AGREEMENT_HEADERS = [
    "comparison",
    "Spearman [95% CI]",
    "Pearson [95% CI]",
    "Kendall [95% CI]",
    "top-1 [95% CI]",
    "traces",
]


def agreement_summary(corr: Correlations) -> pd.DataFrame:
    """The headline table: every method's and baseline's agreement with the reference.

    One row per method, then per baseline (marked "(baseline)"), against the reference (mean
    per-trace correlations with 95% CIs, top-1 agreement, traces), then, for a method with
    split-half rows (Monte Carlo), the agreement of its two halves. Without the reference in
    the table, one row per pair of methods. Cells are formatted strings.
    """
    agg = corr.aggregates()

    def sel(a: str, b: str) -> pd.DataFrame:
        # Either order: a pair's means follow display order, reference rows put it second.
        hit = ((agg["method_a"] == a) & (agg["method_b"] == b)) | (
            (agg["method_a"] == b) & (agg["method_b"] == a)
        )
        return agg.loc[hit & ~agg["statistic"].str.startswith("paired_")].set_index("statistic")

    ref = corr.reference
    if ref is not None:
        pairs = [(m, ref) for m in corr.compared()]
    else:
        pairs = corr.pairs()
    rows = []
    for a, b in pairs:
        s = sel(a, b)
        name = f"{corr.label(a)} vs {b}"
        rows.append(
            [name]
            + [ci_cell(s, f"mean_{stat}") for stat in STAT_ORDER]
            + [ci_cell(s, "top1_agreement"), count_cell(s, "mean_spearman")]
        )
    for m in corr.split_half_methods():
        s = sel(m, m)
        rows.append(
            [f"{m} split-half (half vs half)"]
            + [ci_cell(s, f"mean_split_half_{stat}") for stat in STAT_ORDER]
            + [EMPTY, count_cell(s, "mean_split_half_spearman")]
        )
    return pd.DataFrame(rows, columns=AGREEMENT_HEADERS)


PAIRED_HEADERS = [
    "method",
    "versus",
    "Δ Spearman [95% CI]",
    "p",
    "Δ Pearson [95% CI]",
    "Δ top-1 [95% CI]",
    "traces",
]


def paired_summary(corr: Correlations, only_first_method: bool = False) -> pd.DataFrame:
    """Paired differences of agreement with the reference, one row per (method, versus):
    mean per-trace difference with its bootstrap CI (the same resamples for both members), the
    bootstrap p of the Spearman difference, traces used. Cells are formatted strings."""
    paired = corr.paired
    if paired is None or paired.empty:
        return pd.DataFrame(columns=PAIRED_HEADERS)
    rows = []
    for (a, b), g in paired.groupby(["method", "versus"], sort=False):
        g = g.set_index("statistic")

        def cell(stat: str, g: pd.DataFrame = g) -> str:
            if stat not in g.index:
                return EMPTY
            return fmt_ci(*g.loc[stat, ["difference", "ci_low", "ci_high"]])

        p = fmt(g.loc["mean_spearman", "p_boot"]) if "mean_spearman" in g.index else EMPTY
        n = str(int(g.loc["mean_spearman", "n"])) if "mean_spearman" in g.index else "0"
        rows.append([corr.label(a), corr.label(b), cell("mean_spearman"), p,
                     cell("mean_pearson"), cell("top1_agreement"), n])
    return pd.DataFrame(rows, columns=PAIRED_HEADERS)


COST_HEADERS = [
    "method",
    "traces",
    "seconds / trace",
    "forward tokens / trace",
    "generated tokens / trace",
    "time / rredcot",
    "tokens / rredcot",
]


def cost_rows(costs: pd.DataFrame, baseline: str = "rredcot") -> pd.DataFrame:
    """``cost_summary``'s table as formatted strings (headers from ``COST_HEADERS``); a column
    no method recorded (seconds, when the runs were not timed) is left out."""
    rows = [
        [
            r.method,
            str(r.traces),
            fmt_seconds(r.seconds),
            fmt_count(r.forward_tokens),
            fmt_count(r.generated_tokens),
            fmt_ratio(r.seconds_ratio),
            fmt_ratio(r.tokens_ratio),
        ]
        for r in costs.itertuples(index=False)
    ]
    headers = [h.replace("rredcot", baseline) for h in COST_HEADERS]
    frame = pd.DataFrame(rows, columns=headers)
    return frame.loc[:, (frame != EMPTY).any(axis=0)]


def credit_text(corr: Correlations) -> str:
    """One sentence saying what was correlated (``cotcredit.report.credit``)."""
    credit = corr.params.get("credit", "score")
    redefined = corr.params.get("value_methods") or []
    which = ", ".join(redefined) if redefined else "none in this table"
    if credit == "differences":
        what = ("value differences v_k − v_(k−1) for every value-based method (rredcot: "
                "g_k − g_(k−1) without g_0 and without the terminal correction; mc: "
                "V_k − V_(k−1))")
    elif credit == "return":
        what = ("return-equivalent credits for every value-based method (value differences, "
                "the start value on the first segment and ζ − the last value on the last, so "
                "each trace's credits sum to its outcome)")
    else:
        what = "each table's score column as written"
    return (f"Credit compared (--credit {credit}): {what}; value-based methods here: {which}. "
            "Other methods' scores are used as written.")


def baseline_text(corr: Correlations) -> str:
    """What the baseline rows are (empty without baselines)."""
    if not corr.baselines:
        return ""
    parts = []
    if "position" in corr.baselines:
        parts.append(
            f"position = the mean {corr.params.get('reference')} credit at the same relative "
            "segment position among the other traces with the same outcome (leave one trace "
            "out)"
        )
    if "position-length" in corr.baselines:
        parts.append(
            f"position-length = the mean {corr.params.get('reference')} credit at the same "
            "segment index among the other traces with as many segments and the same outcome "
            "(leave one trace out)"
        )
    if "uniform" in corr.baselines:
        parts.append("uniform = the trace's outcome spread evenly over its segments (orders "
                     "nothing: per-trace correlation 0, top-1 at chance)")
    if "random" in corr.baselines:
        parts.append("random = uniform draws seeded per trace (the negative control)")
    if "refdiff" in corr.baselines:
        parts.append("refdiff = −1 on the first segment whose reasoning line departs from the "
                     "reference solution, 0 elsewhere (reads the reference)")
    if "entropy" in corr.baselines:
        parts.append("entropy = minus the segment's mean token entropy under the model (the "
                     "line it was least sure of is lowest)")
    return ("Baselines are cheap (no credit method); every method must beat them: "
            + "; ".join(parts) + ".")


LOCALIZATION_HEADERS = [
    "method",
    "top-1 [95% CI]",
    "chance (1/K)",
    "top-1 − chance [95% CI]",
    "mean rank [95% CI]",
    "chance rank",
    "traces",
]


def localization_summary(loc: Localization, corr: Correlations | None = None) -> pd.DataFrame:
    """Per method and baseline: top-1 localization, chance, the paired difference with chance,
    mean rank of the erroneous segment and its chance (formatted strings)."""
    t = loc.table
    rows = []
    for m in loc.methods:
        sel = t.loc[t["method"] == m].set_index("statistic")
        if "top1" not in sel.index:
            continue

        def cell(stat: str, sel: pd.DataFrame = sel) -> str:
            if stat not in sel.index:
                return EMPTY
            return fmt_ci(*sel.loc[stat, ["value", "ci_low", "ci_high"]])

        name = corr.label(m) if corr is not None else m
        rows.append([name, cell("top1"), fmt(sel.loc["chance_top1", "value"]),
                     cell("top1_minus_chance"), cell("mean_rank"),
                     fmt(sel.loc["chance_rank", "value"]), str(int(sel.loc["top1", "n"]))])
    return pd.DataFrame(rows, columns=LOCALIZATION_HEADERS)


def localization_paired(loc: Localization, corr: Correlations | None = None) -> pd.DataFrame:
    """Paired top-1 differences of every method with every baseline (formatted strings)."""
    t = loc.table
    rows = []
    for b in loc.baselines:
        hit = t.loc[t["statistic"] == f"top1_minus_{b}"]
        for r in hit.itertuples(index=False):
            name = corr.label(r.method) if corr is not None else r.method
            rows.append([name, f"{b} (baseline)", fmt_ci(r.value, r.ci_low, r.ci_high),
                         str(int(r.n))])
    return pd.DataFrame(rows, columns=["method", "versus", "Δ top-1 [95% CI]", "traces"])


EQUIVALENCE_HEADERS = [
    "method",
    "agreement with held-out [95% CI]",
    "worth n rollouts [95% CI]",
    "MC(n) seconds / trace",
    "method seconds / trace",
    "MC(n) time / method's",
]


def _fmt_n(value: float, n_max: int) -> str:
    if value != value:
        return EMPTY
    if value == 0:
        return "< 1"
    if value == float("inf"):
        return f"> {n_max}"
    return f"{value:.1f}"


def equivalence_summary(
    ro: RolloutAnalysis, costs: pd.DataFrame | None, reference: str,
    corr: Correlations | None = None,
) -> pd.DataFrame:
    """Per method: agreement with the held-out half, the n it is worth (CI), and the costs
    at that n: MC's measured seconds per trace scaled to n rollouts per boundary."""
    n_max = int(ro.curve["rollouts"].max()) if len(ro.curve) else 0
    seconds = {}
    if costs is not None:
        seconds = dict(zip(costs["method"], costs["seconds"], strict=True))
    mc_seconds = seconds.get(reference, float("nan"))
    rows = []
    for e in ro.equivalence.itertuples(index=False):
        n_star = e.rollouts
        finite = n_star == n_star and 0 < n_star < float("inf")
        mc_at_n = mc_seconds * n_star / ro.total if finite else float("nan")
        own = seconds.get(e.method, float("nan"))
        name = corr.label(e.method) if corr is not None else e.method
        interval = f"[{_fmt_n(e.rollouts_low, n_max)}, {_fmt_n(e.rollouts_high, n_max)}]"
        rows.append([name, fmt_ci(e.agreement, e.ci_low, e.ci_high),
                     f"{_fmt_n(n_star, n_max)} {interval}", fmt_seconds(mc_at_n),
                     fmt_seconds(own), fmt_ratio(mc_at_n / own) if finite else EMPTY])
    return pd.DataFrame(rows, columns=EQUIVALENCE_HEADERS)


def ceiling_summary(ro: RolloutAnalysis) -> pd.DataFrame:
    """The agreement ceilings (formatted strings)."""
    rows = [[f"{int(c.rollouts)} rollouts per boundary", fmt_ci(c.ceiling, c.ci_low, c.ci_high),
             str(int(c.n))] for c in ro.ceiling.itertuples(index=False)]
    return pd.DataFrame(rows, columns=["Monte Carlo with", "ceiling [95% CI]", "traces"])
