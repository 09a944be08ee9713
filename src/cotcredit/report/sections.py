"""The report as a list of blocks, one function per section (`report_blocks` runs them in
order).

A block is ``("h1"|"h2"|"h3"|"p", text)``, ``("table", headers, rows)`` or ``("img", filename,
alt)``. A table a paper needs (agreement, paired differences, rollout equivalence and ceiling,
localization, costs) carries a fourth element, ``(caption, label)``: `render.render_latex`
writes those tables as LaTeX; Markdown and HTML show every block.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from cotcredit.report.figures import pdf_path
from cotcredit.report.format import EMPTY, fmt, fmt_ci
from cotcredit.report.localization import Localization
from cotcredit.report.rollouts import RolloutAnalysis
from cotcredit.report.stats import Correlations
from cotcredit.report.summaries import (
    STAT_NAMES,
    STAT_ORDER,
    agreement_summary,
    baseline_text,
    ceiling_summary,
    ci_cell,
    cost_rows,
    count_cell,
    credit_text,
    equivalence_summary,
    localization_paired,
    localization_summary,
    paired_summary,
)

Block = tuple[Any, ...]


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


def _frame_block(frame: pd.DataFrame, latex: tuple[str, str] | None = None) -> Block:
    """A table block of a formatted frame; `latex` = (caption, label) puts it in report.tex."""
    block = ("table", list(frame.columns), frame.to_numpy(dtype=str).tolist())
    return block if latex is None else (*block, latex)


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
    blocks.append(_frame_block(agreement_summary(corr),
                               (_agreement_caption(corr), "tab:cotcredit-agreement")))
    for m in corr.split_half_methods():
        blocks.append(("p", f"{m} split-half: {m}'s credits from the even-indexed rollouts of "
                       "each boundary correlated per trace with those from the odd-indexed ones "
                       "(two runs with half the rollouts each). It is no ceiling for the rows "
                       "above: see the ceiling and rollout equivalence."))
    blocks.append(("p", f"The same table for a paper: {r.files.latex.name} (LaTeX, booktabs)."))
    return blocks


def _agreement_caption(corr: Correlations) -> str:
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
        caption += (f" {m} split-half: {m}'s credits from two disjoint halves of its rollouts "
                    "correlated with each other.")
    return caption


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
        _frame_block(table, (
            f"Paired differences of agreement with {corr.reference}: mean over traces of the "
            "per-trace difference between two rows' agreement (95% percentile bootstrap CI, the "
            "same resamples for both; p: two-sided bootstrap).", "tab:cotcredit-paired")),
    ]


def _means(r: ReportInput) -> list[Block]:
    corr = r.corr
    blocks: list[Block] = [("h2", "Mean per-trace correlation")]
    if not corr.pairs():
        return [*blocks, ("p", "Only one method in the table: there is nothing to correlate.")]
    rows = []
    for a, b in corr.pairs():
        sel = r.aggregates_of(a, b)
        cells = [ci_cell(sel, f"mean_{s}") for s in STAT_ORDER]
        rows.append([a, b, *cells, count_cell(sel, "mean_spearman")])
    for m in corr.split_half_methods():
        sel = r.aggregates_of(m, m)
        cells = [ci_cell(sel, f"mean_split_half_{s}") for s in STAT_ORDER]
        rows.append(
            [f"{m} (half A)", f"{m} (half B)", *cells, count_cell(sel, "mean_split_half_spearman")]
        )
    headers = ["method A", "method B", *(f"{STAT_NAMES[s]} [95% CI]" for s in STAT_ORDER)]
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
            for s in STAT_ORDER
        ]
        rows.append([a, b, *cells, count_cell(sel, "pooled_spearman")])
    headers = ["method A", "method B", *(STAT_NAMES[s] for s in STAT_ORDER), "segments"]
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
        for s in STAT_ORDER:
            rows.append(
                [
                    m,
                    STAT_NAMES[s],
                    ci_cell(sel, f"mean_split_half_{s}"),
                    count_cell(sel, f"mean_split_half_{s}"),
                ]
            )
    headers = ["method", "statistic", "split-half [95% CI]", "traces"]
    blocks.append(("table", headers, rows))
    return blocks


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
    blocks.append(_frame_block(summary, (
        f"First-error localization over {c.get('erroneous', 0)} erroneous traces: top-1 = the "
        "lowest-credit segment holds the first wrong step; rank 1 = lowest credit; chance = "
        "random order (95% bootstrap CIs).", "tab:cotcredit-localization")))
    paired = localization_paired(loc, r.corr)
    if not paired.empty:
        blocks.append(("p", "Paired differences of top-1 with each baseline (per trace, same "
                            "resamples):"))
        blocks.append(_frame_block(paired))
    return blocks


def _rollouts(r: ReportInput) -> list[Block]:
    ro = r.rollouts
    if ro is None:
        return []
    latex = bool(len(ro.equivalence))  # report.tex holds the two tables when there are rows
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
        _frame_block(equivalence_summary(ro, r.costs, ref, r.corr), (
            f"Rollout equivalence: mean per-trace Spearman with {ro.held_out} held-out "
            f"rollouts per boundary ({ro.splits} random splits, 95% bootstrap CI) and the "
            "number n of rollouts per boundary at which Monte Carlo agrees as well; costs at "
            "that n.", "tab:cotcredit-equivalence") if latex else None),
        ("table", ["n", "MC(n) agreement [95% CI]", "traces"],
         [[str(int(c.rollouts)), fmt_ci(c.agreement, c.ci_low, c.ci_high), str(int(c.n))]
          for c in ro.curve.itertuples(index=False)]),
        ("p", "Agreement ceiling: how well error-free values would agree with an N-rollout "
              "Monte Carlo on the same statistic, simulated from the fitted values V̂ = correct "
              "/ rollouts with a bootstrap bias correction (V̂ carries MC's noise: the plug-in "
              f"alone is too high). The {ro.held_out}-rollout row bounds the equivalence "
              f"column above; the {ro.total}-rollout row bounds the agreement summary."),
        _frame_block(ceiling_summary(ro), (
            "Agreement ceiling: error-free (fitted) values against simulated N-rollout Monte "
            "Carlo, same statistic.", "tab:cotcredit-ceiling") if latex else None),
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
        _frame_block(cost_rows(r.costs), (
            f"Cost per trace, mean over {n} traces: wall-clock seconds, tokens run through the "
            "model and tokens sampled, and the ratio to rredcot.", "tab:cotcredit-cost")),
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
                count_cell(sel, "early_spearman"),
                count_cell(sel, "late_spearman"),
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
        rows.append([r.corr.label(m), ci_cell(sel, "top1_agreement"),
                     count_cell(sel, "top1_agreement")])
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
