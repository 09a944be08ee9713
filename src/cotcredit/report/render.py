"""The report as a list of blocks, rendered to Markdown, to self-contained HTML and to LaTeX.

Each section of the report is one function returning its blocks; ``report_blocks`` runs them in
order. A block is ``("h1"|"h2"|"h3"|"p", text)``, ``("table", headers, rows)`` or ``("img",
filename, alt)``. Markdown links the figures; the HTML embeds them as base64 data URIs with inline
CSS and no external resource. The LaTeX file holds the tables a paper needs (agreement summary,
costs) as booktabs tables written by pandas' ``Styler.to_latex``.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from cotcredit.report.figures import pdf_path
from cotcredit.report.format import EMPTY, fmt, fmt_ci, fmt_count, fmt_ratio, fmt_seconds
from cotcredit.report.localization import Localization
from cotcredit.report.rollouts import RolloutAnalysis
from cotcredit.report.stats import Correlations

Block = tuple[Any, ...]

_STAT_NAMES = {"spearman": "Spearman", "pearson": "Pearson", "kendall": "Kendall"}
_STAT_ORDER = ("spearman", "pearson", "kendall")  # columns of the report's tables


@dataclass
class ReportFiles:
    """Paths written by ``write_report`` (figures None when there was nothing to draw).

    Every figure is a PNG with a PDF of the same name beside it (``pdfs()``).
    """

    out_dir: Path
    correlations: Path
    markdown: Path
    html: Path
    latex: Path
    heatmap: Path | None
    scatter: Path | None
    strips: list[Path]
    costs: Path | None = None
    paired: Path | None = None
    localization: Path | None = None
    rollouts: Path | None = None
    equivalence: Path | None = None  # the rollout-equivalence figure

    def figures(self) -> list[Path]:
        """The PNG figures."""
        fixed = (self.heatmap, self.scatter, self.equivalence)
        return [p for p in fixed if p is not None] + list(self.strips)

    def pdfs(self) -> list[Path]:
        """The PDF twin of every figure."""
        return [pdf_path(p) for p in self.figures()]

    def all(self) -> list[Path]:
        """Every file written."""
        tables = [self.correlations, self.markdown, self.html, self.latex, self.costs,
                  self.paired, self.localization, self.rollouts]
        return [p for p in tables if p is not None] + self.figures() + self.pdfs()


@dataclass
class ReportInput:
    """What the sections read."""

    scores: pd.DataFrame
    corr: Correlations
    title: str
    files: ReportFiles
    strip_ids: Sequence[str]
    notes: Mapping[str, Any] = field(default_factory=dict)
    costs: pd.DataFrame | None = None
    localization: Localization | None = None
    rollouts: RolloutAnalysis | None = None

    def aggregates_of(self, a: str, b: str) -> pd.DataFrame:
        """The aggregate rows of one (method_a, method_b), indexed by statistic."""
        agg = self.corr.aggregates()
        return agg.loc[(agg["method_a"] == a) & (agg["method_b"] == b)].set_index("statistic")


# ----------------------------------------------------------------------------- tables of numbers


def _ci_cell(sel: pd.DataFrame, statistic: str) -> str:
    if statistic not in sel.index:
        return EMPTY
    return fmt_ci(*sel.loc[statistic, ["value", "ci_low", "ci_high"]])


def _count_cell(sel: pd.DataFrame, statistic: str) -> str:
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
            + [_ci_cell(s, f"mean_{stat}") for stat in _STAT_ORDER]
            + [_ci_cell(s, "top1_agreement"), _count_cell(s, "mean_spearman")]
        )
    for m in corr.split_half_methods():
        s = sel(m, m)
        rows.append(
            [f"{m} split-half (half vs half)"]
            + [_ci_cell(s, f"mean_split_half_{stat}") for stat in _STAT_ORDER]
            + [EMPTY, _count_cell(s, "mean_split_half_spearman")]
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


def _frame_block(frame: pd.DataFrame) -> Block:
    return ("table", list(frame.columns), frame.to_numpy(dtype=str).tolist())


# ----------------------------------------------------------------------------- sections


def _overview(r: ReportInput) -> list[Block]:
    corr = r.corr
    n_segments = r.scores.groupby("method").size()
    n_traces = r.scores.groupby("method")["trace_id"].nunique()
    return [
        ("h1", r.title),
        (
            "p",
            f"{len(corr.methods)} method(s), {corr.n_traces} trace(s). Correlations are computed "
            f"per trace over its segments, then averaged across traces (95% percentile bootstrap "
            f"CI over traces, {corr.params.get('n_boot')} resamples, seed "
            f"{corr.params.get('seed')}) and pooled over all segments. Traces with fewer than "
            f"{corr.params.get('min_segments')} segments, NaN scores or constant scores are left "
            "out of a pair's statistics and counted below.",
        ),
        (
            "table",
            ["method", "traces", "segments"],
            [
                [m, str(int(n_traces.get(m, 0))), str(int(n_segments.get(m, 0)))]
                for m in corr.methods
            ],
        ),
    ]


def _notes(r: ReportInput) -> list[Block]:
    if not r.notes:
        return []
    rows = [[str(k), _note(v)] for k, v in r.notes.items()]
    return [("h2", "Notes"), ("table", ["key", "value"], rows)]


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
    if "uniform" in corr.baselines:
        parts.append("uniform = the trace's outcome spread evenly over its segments (orders "
                     "nothing: per-trace correlation 0, top-1 at chance)")
    return ("Baselines read no reasoning text; every method must beat them: "
            + "; ".join(parts) + ".")


def _agreement(r: ReportInput) -> list[Block]:
    corr = r.corr
    if not corr.pairs():
        return []
    ref = corr.reference
    if ref is not None:
        intro = (
            f"Each method's and baseline's agreement with {ref}: mean per-trace correlation "
            f"(95% bootstrap CI over traces) and top-1 agreement (the fraction of traces whose "
            f"highest-scored segment is {ref}'s)."
        )
    else:
        intro = "Mean per-trace correlation of every pair of methods (95% bootstrap CI)."
    blocks: list[Block] = [("h2", "Agreement summary"), ("p", intro), ("p", credit_text(corr))]
    if corr.baselines:
        blocks.append(("p", baseline_text(corr)))
    blocks.append(_frame_block(agreement_summary(corr)))
    for m in corr.split_half_methods():
        blocks.append(("p", f"{m} split-half: {m}'s credits from the even-indexed rollouts of "
                       "each boundary correlated per trace with those from the odd-indexed ones "
                       "(two runs with half the rollouts each). It is no ceiling for the rows "
                       "above: see the ceiling and rollout equivalence."))
    blocks.append(("p", f"The same table for a paper: {r.files.latex.name} (LaTeX, booktabs)."))
    return blocks


def _paired(r: ReportInput) -> list[Block]:
    corr = r.corr
    table = paired_summary(corr)
    if table.empty:
        return []
    return [
        ("h2", f"Paired differences (agreement with {corr.reference})"),
        ("p", "Per trace, the method's agreement with the reference minus the other's, on the "
              "traces where both are defined; mean over traces with a 95% bootstrap CI (the "
              "same resamples of traces for both members of every pair) and a two-sided "
              "bootstrap p. A method is better than another only where this interval excludes "
              "0."),
        _frame_block(table),
    ]


def _means(r: ReportInput) -> list[Block]:
    corr = r.corr
    blocks: list[Block] = [("h2", "Mean per-trace correlation")]
    if not corr.pairs():
        return [*blocks, ("p", "Only one method in the table: there is nothing to correlate.")]
    rows = []
    for a, b in corr.pairs():
        sel = r.aggregates_of(a, b)
        cells = [_ci_cell(sel, f"mean_{s}") for s in _STAT_ORDER]
        rows.append([a, b, *cells, _count_cell(sel, "mean_spearman")])
    for m in corr.split_half_methods():
        sel = r.aggregates_of(m, m)
        cells = [_ci_cell(sel, f"mean_split_half_{s}") for s in _STAT_ORDER]
        rows.append(
            [f"{m} (half A)", f"{m} (half B)", *cells, _count_cell(sel, "mean_split_half_spearman")]
        )
    headers = ["method A", "method B", *(f"{_STAT_NAMES[s]} [95% CI]" for s in _STAT_ORDER)]
    blocks.append(("table", [*headers, "traces"], rows))
    if r.files.heatmap is not None:
        blocks.append(("img", r.files.heatmap.name, "Mean per-trace Spearman heatmap"))
    return blocks


def _pooled(r: ReportInput) -> list[Block]:
    if not r.corr.pairs():
        return []
    rows = []
    for a, b in r.corr.pairs():
        sel = r.aggregates_of(a, b)
        cells = [
            fmt(sel.loc[f"pooled_{s}", "value"]) if f"pooled_{s}" in sel.index else EMPTY
            for s in _STAT_ORDER
        ]
        rows.append([a, b, *cells, _count_cell(sel, "pooled_spearman")])
    headers = ["method A", "method B", *(_STAT_NAMES[s] for s in _STAT_ORDER), "segments"]
    blocks: list[Block] = [("h2", "Pooled over segments"), ("table", headers, rows)]
    if r.files.scatter is not None:
        blocks.append(("img", r.files.scatter.name, "Pairwise scatter of per-segment scores"))
    return blocks


def _split_half(r: ReportInput) -> list[Block]:
    methods = r.corr.split_half_methods()
    if not methods:
        return []
    blocks: list[Block] = [
        ("h2", "Split-half agreement"),
        (
            "p",
            "Per trace, the credits computed from one half of the rollouts correlated with those "
            "from the other half; mean over traces with 95% bootstrap CI. Not stepped up to all "
            "rollouts: Spearman–Brown applies to reliability coefficients, not to a mean of "
            "per-trace rank correlations over a few segments.",
        ),
    ]
    rows = []
    for m in methods:
        sel = r.aggregates_of(m, m)
        for s in _STAT_ORDER:
            rows.append(
                [
                    m,
                    _STAT_NAMES[s],
                    _ci_cell(sel, f"mean_split_half_{s}"),
                    _count_cell(sel, f"mean_split_half_{s}"),
                ]
            )
    headers = ["method", "statistic", "split-half [95% CI]", "traces"]
    blocks.append(("table", headers, rows))
    return blocks


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


def _localization(r: ReportInput) -> list[Block]:
    loc = r.localization
    if loc is None:
        return []
    c = loc.counts
    text = (
        f"From the column {loc.field!r} (the character offset where the first wrong step "
        f"starts). {c.get('erroneous', 0)} erroneous trace(s) used; {c.get('no_error', 0)} "
        f"without error, {c.get('unknown', 0)} unknown, {c.get('after_reasoning', 0)} with the "
        f"error at or after the end of the reasoning (in the final answer) and "
        f"{c.get('outside_segments', 0)} between segments, left out. Top-1: the lowest-credit "
        "segment is the one holding the offset (a tied minimum counts 1/m); rank 1 = lowest "
        "credit; chance = a random order. 95% bootstrap CIs over the erroneous traces."
    )
    blocks: list[Block] = [("h2", "First-error localization"), ("p", text)]
    summary = localization_summary(loc, r.corr)
    if summary.empty:
        return [*blocks, ("p", "No erroneous trace with its offset inside a segment.")]
    blocks.append(_frame_block(summary))
    paired = localization_paired(loc, r.corr)
    if not paired.empty:
        blocks.append(("p", "Paired differences of top-1 with each baseline (per trace, same "
                            "resamples):"))
        blocks.append(_frame_block(paired))
    return blocks


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


def _rollouts(r: ReportInput) -> list[Block]:
    ro = r.rollouts
    if ro is None:
        return []
    ref = r.corr.reference or "mc"
    blocks: list[Block] = [
        ("h2", "Ceiling and rollout equivalence"),
        ("p", f"From {ro.total} rollouts per boundary ({Path(ro.source).name})"
              + (", on a random subset of the traces (see the traces column)"
                 if ro.subsampled else "")
              + ". Each boundary's "
              f"rollouts are split at random into a held-out half ({ro.held_out}) and the rest; "
              f"MC(n) = credits from n of the rest. Agreement = mean per-trace Spearman with the "
              f"held-out half's credits, averaged over {ro.splits} random splits. A method is "
              "worth n rollouts per boundary where the MC(n) curve reaches its agreement "
              "(interpolated; never extrapolated beyond the largest n). Costs at that n: "
              f"{ref}'s measured seconds per trace scaled to n rollouts per boundary."),
        _frame_block(equivalence_summary(ro, r.costs, ref, r.corr)),
        ("table", ["n", "MC(n) agreement [95% CI]", "traces"],
         [[str(int(c.rollouts)), fmt_ci(c.agreement, c.ci_low, c.ci_high), str(int(c.n))]
          for c in ro.curve.itertuples(index=False)]),
        ("p", "Agreement ceiling: how well error-free values would agree with an N-rollout "
              "Monte Carlo on the same statistic, simulated from the fitted values V̂ = correct "
              "/ rollouts with a bootstrap bias correction (V̂ carries MC's noise: the plug-in "
              f"alone is too high). The {ro.held_out}-rollout row bounds the equivalence "
              f"column above; the {ro.total}-rollout row bounds the agreement summary."),
        _frame_block(ceiling_summary(ro)),
    ]
    if ro.skipped:
        blocks.append(("p", "Traces left out: " + ", ".join(
            f"{k}: {v}" for k, v in ro.skipped.items()) + "."))
    if r.files.equivalence is not None:
        blocks.append(("img", r.files.equivalence.name, "Rollout equivalence"))
    return blocks


def _costs(r: ReportInput) -> list[Block]:
    if r.costs is None:
        return []
    n = int(r.costs["traces"].max()) if len(r.costs) else 0
    return [
        ("h2", "Cost"),
        (
            "p",
            f"Mean per trace over the {n} trace(s) every listed method scored: wall-clock "
            "seconds, tokens run through the model (forward) and tokens sampled (generated); "
            "ratios divide a method's mean by rredcot's (tokens: forward + generated).",
        ),
        _frame_block(cost_rows(r.costs)),
    ]


def _skipped(r: ReportInput) -> list[Block]:
    blocks: list[Block] = [("h2", "Skipped traces")]
    skipped = r.corr.skipped
    if skipped.empty:
        return [*blocks, ("p", "None: every trace entered every pair's statistics.")]
    rows = [
        [s.method_a, s.method_b, s.reason, str(s.n_traces)] for s in skipped.itertuples(index=False)
    ]
    return [*blocks, ("table", ["method A", "method B", "reason", "traces"], rows)]


def _position(r: ReportInput) -> list[Block]:
    ref = r.corr.reference
    blocks: list[Block] = [("h2", "Position analysis" + (f" (reference: {ref})" if ref else ""))]
    if ref is None:
        return [
            *blocks,
            (
                "p",
                f"The reference method {r.corr.params.get('reference')!r} is not in the table: "
                "position analysis and top-1 agreement are omitted.",
            ),
        ]
    blocks.append(
        (
            "p",
            "Pooled correlation with the reference within the early half (relative position "
            "< 0.5) and the late half (>= 0.5) of each trace's segments.",
        )
    )
    rows = []
    for m in r.corr.compared():
        sel = r.aggregates_of(m, ref)

        def cell(stat: str, sel: pd.DataFrame = sel) -> str:
            return fmt(sel.loc[stat, "value"]) if stat in sel.index else EMPTY

        rows.append(
            [
                r.corr.label(m),
                cell("early_spearman"),
                cell("late_spearman"),
                cell("early_pearson"),
                cell("late_pearson"),
                _count_cell(sel, "early_spearman"),
                _count_cell(sel, "late_spearman"),
            ]
        )
    headers = [
        "method",
        "early Spearman",
        "late Spearman",
        "early Pearson",
        "late Pearson",
        "early segments",
        "late segments",
    ]
    return [*blocks, ("table", headers, rows)]


def _top1(r: ReportInput) -> list[Block]:
    ref = r.corr.reference
    if ref is None:
        return []
    rows = []
    for m in r.corr.compared():
        sel = r.aggregates_of(m, ref)
        rows.append([r.corr.label(m), _ci_cell(sel, "top1_agreement"),
                     _count_cell(sel, "top1_agreement")])
    return [
        ("h2", f"Top-1 agreement with {ref}"),
        (
            "p",
            "Fraction of traces whose highest-scored segment is the reference's (95% bootstrap "
            "CI over traces; traces with a tied maximum are left out).",
        ),
        ("table", ["method", "agreement [95% CI]", "traces"], rows),
    ]


def _strips(r: ReportInput) -> list[Block]:
    blocks: list[Block] = [("h2", "Credit strips")]
    strips = r.files.strips
    if not strips:
        return [*blocks, ("p", "No strips drawn.")]
    blocks.append(
        (
            "p",
            f"The first {len(strips)} trace(s): each segment's text shaded by its score, one "
            "panel per method (red < 0 < blue, scaled per method; bars mark segment starts).",
        )
    )
    for tid, path in zip(r.strip_ids, strips, strict=True):
        blocks.append(("h3", f"Trace {tid}"))
        blocks.append(("img", path.name, f"Credit strip of trace {tid}"))
    return blocks


def _files(r: ReportInput) -> list[Block]:
    files = r.files
    text = (
        f"All statistics are in {files.correlations.name}: "
        f"pd.read_parquet('{files.correlations.name}'); aggregate rows have trace_id 'all'. "
        f"Tables for a paper: {files.latex.name} (needs \\usepackage{{booktabs}})."
    )
    if files.costs is not None:
        text += f" Costs per method: {files.costs.name}."
    pdfs = [p.name for p in files.pdfs()]
    if pdfs:
        listed = ", ".join(pdfs[:3]) + (" ..." if len(pdfs) > 3 else "")
        text += f" Every figure is also saved as PDF (vector, for a paper): {listed}"
    return [("h2", "Files"), ("p", text)]


#: The report's sections, in order.
SECTIONS: tuple[Callable[[ReportInput], list[Block]], ...] = (
    _overview,
    _agreement,
    _paired,
    _rollouts,
    _localization,
    _notes,
    _means,
    _pooled,
    _split_half,
    _costs,
    _skipped,
    _position,
    _top1,
    _strips,
    _files,
)


def report_blocks(r: ReportInput) -> list[Block]:
    """Every section's blocks, in order."""
    return [block for section in SECTIONS for block in section(r)]


def _note(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


# ----------------------------------------------------------------------------- Markdown and HTML


def _md_cell(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: Sequence[Block]) -> str:
    """The blocks as Markdown (figures linked by file name)."""
    out: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + " ".join(str(block[1]).split()))
        elif kind == "p":
            out.append(str(block[1]))
        elif kind == "table":
            headers, rows = block[1], block[2]
            out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            out.extend("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows)
        elif kind == "img":
            out.append(f"![{_md_cell(block[2])}]({block[1]})")
        out.append("")
    return "\n".join(out)


_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 2em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: left; }
th { background: #f3f3f3; }
tr:nth-child(even) td { background: #fafafa; }
td { font-variant-numeric: tabular-nums; }
img { max-width: 100%; height: auto; display: block; margin: 1em 0; border: 1px solid #eee; }
footer { margin-top: 3em; color: #777; font-size: 12px; }
"""


def render_html(blocks: Sequence[Block], out_dir: Path, title: str) -> str:
    """The blocks as one self-contained HTML page (figures read from ``out_dir``, embedded)."""
    esc = html.escape
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            body.append(f"<{kind}>{esc(str(block[1]))}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{esc(str(block[1]))}</p>")
        elif kind == "table":
            headers, rows = block[1], block[2]
            head = "".join(f"<th>{esc(str(h))}</th>" for h in headers)
            trs = "".join(
                "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode((out_dir / block[1]).read_bytes()).decode("ascii")
            body.append(f'<img src="data:image/png;base64,{data}" alt="{esc(str(block[2]))}">')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + "\n<footer>Generated by cotcredit. Self-contained: figures are embedded.</footer>\n"
        "</body>\n</html>\n"
    )


# ----------------------------------------------------------------------------- LaTeX


def _latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in plain text (captions); en dashes become ``--``."""
    table = {
        "–": "--",
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
    }
    return "".join(table.get(c, c) for c in text)


def latex_table(frame: pd.DataFrame, caption: str, label: str) -> str:
    """One booktabs table (``table`` float, centred) of string cells, via ``Styler.to_latex``.

    Cells and headers are escaped; en dashes (``EMPTY`` cells too) are written as ``--``.
    """
    cells = frame.map(lambda v: str(v).replace("–", "--"))
    cells.columns = [str(c).replace("–", "--") for c in cells.columns]
    styler = (
        cells.style.hide(axis="index")
        .format(escape="latex")
        .format_index(escape="latex", axis="columns")
    )
    text = styler.to_latex(
        hrules=True,  # \toprule, \midrule, \bottomrule (booktabs)
        column_format="l" + "r" * (len(frame.columns) - 1),
        caption=_latex_escape(caption),
        label=label,
        position="t",
        position_float="centering",
    )
    for char, command in _LATEX_MATH.items():  # pdflatex has no glyphs for these
        text = text.replace(char, command)
    return text


_LATEX_MATH = {"Δ": r"\ensuremath{\Delta}", "ζ": r"\ensuremath{\zeta}",
               "−": r"\ensuremath{-}", "≈": r"\ensuremath{\approx}", "×": r"\ensuremath{\times}"}


def render_latex(
    corr: Correlations,
    costs: pd.DataFrame | None = None,
    localization: Localization | None = None,
    rollouts: RolloutAnalysis | None = None,
) -> str:
    """The agreement summary, paired differences, rollout equivalence, localization and costs
    (those present) as LaTeX booktabs tables."""
    parts = ["% Tables written by cotcredit compare. Needs \\usepackage{booktabs}.\n"]
    if corr.pairs():
        n_boot = corr.params.get("n_boot")
        ref = corr.reference
        caption = (
            f"Agreement with {ref}: mean per-trace correlation over traces (95% percentile "
            f"bootstrap CI, {n_boot} resamples); top-1: fraction of traces whose highest-scored "
            f"segment is {ref}'s."
            if ref
            else f"Agreement between methods: mean per-trace correlation over traces (95% "
            f"percentile bootstrap CI, {n_boot} resamples)."
        )
        caption += " " + credit_text(corr)
        if corr.baselines:
            caption += " " + baseline_text(corr)
        for m in corr.split_half_methods():
            caption += (
                f" {m} split-half: {m}'s credits from two disjoint halves of its rollouts "
                "correlated with each other."
            )
        parts.append(latex_table(agreement_summary(corr), caption, "tab:cotcredit-agreement"))
        paired = paired_summary(corr)
        if not paired.empty:
            caption = (
                f"Paired differences of agreement with {ref}: mean over traces of the per-trace "
                "difference between two rows' agreement (95% percentile bootstrap CI, the same "
                "resamples for both; p: two-sided bootstrap)."
            )
            parts.append(latex_table(paired, caption, "tab:cotcredit-paired"))
    if rollouts is not None and len(rollouts.equivalence):
        caption = (
            f"Rollout equivalence: mean per-trace Spearman with {rollouts.held_out} held-out "
            f"rollouts per boundary ({rollouts.splits} random splits, 95% bootstrap CI) and the "
            "number n of rollouts per boundary at which Monte Carlo agrees as well; costs at "
            "that n."
        )
        parts.append(latex_table(equivalence_summary(rollouts, costs, corr.reference or "mc",
                                                     corr), caption, "tab:cotcredit-equivalence"))
        caption = ("Agreement ceiling: error-free (fitted) values against simulated N-rollout "
                   "Monte Carlo, same statistic.")
        parts.append(latex_table(ceiling_summary(rollouts), caption, "tab:cotcredit-ceiling"))
    if localization is not None:
        loc = localization_summary(localization, corr)
        if not loc.empty:
            caption = (
                f"First-error localization over {localization.counts.get('erroneous', 0)} "
                "erroneous traces: top-1 = the lowest-credit segment holds the first wrong step; "
                "rank 1 = lowest credit; chance = random order (95% bootstrap CIs)."
            )
            parts.append(latex_table(loc, caption, "tab:cotcredit-localization"))
    if costs is not None:
        caption = (
            f"Cost per trace, mean over {int(costs['traces'].max())} traces: wall-clock seconds, "
            "tokens run through the model and tokens sampled, and the ratio to rredcot."
        )
        parts.append(latex_table(cost_rows(costs), caption, "tab:cotcredit-cost"))
    return "\n".join(parts)


__all__ = [
    "AGREEMENT_HEADERS",
    "COST_HEADERS",
    "PAIRED_HEADERS",
    "Block",
    "ReportFiles",
    "ReportInput",
    "agreement_summary",
    "cost_rows",
    "ceiling_summary",
    "credit_text",
    "equivalence_summary",
    "latex_table",
    "localization_summary",
    "paired_summary",
    "render_html",
    "render_latex",
    "render_markdown",
    "report_blocks",
]
