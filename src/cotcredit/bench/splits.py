"""One split of a bench run as the metrics read it (``SplitData``), from the run's tables
(``read_split``) or from the compact tables (``cotcredit.bench.compact``), and its metrics
(``split_metrics``).

What the metrics need of a split is small: each segment's span and the model's mean entropy
there; each row's credit per segment (value methods as value differences, ``cotcredit.report
.credit``); each row's cost per trace; the checker's labels per trace (with the problem each
answers); where each trace leaves its known paths (the three string comparisons); and Monte
Carlo's rollout outcomes per boundary (the pool, ``cotcredit.report.pool``), from which Monte
Carlo's credits and those of its smaller budgets (``mc-4``, ``mc-8``, ``mc-16``: the first n
rollouts of each boundary) are computed. Both sources give the same ``SplitData``, so a
leaderboard computed from the compact tables is recomputed from them exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from cotcredit.bench.metrics import BASELINES, RegimeMetrics, labels_frame, regime_metrics
from cotcredit.report.baselines import ENTROPY_COLUMN, REFDIFF, departures_from_traces
from cotcredit.report.costs import COST_COLUMNS
from cotcredit.report.pool import budget_rows, mc_rows, pack_pool, pool_counts

#: Monte Carlo's row label and the budgets computed from its pool (those below its rollouts).
REFERENCE = "mc"
BUDGETS = (4, 8, 16)
SEGMENT_COLUMNS = ("trace_id", "segment", "char_start", "char_end", ENTROPY_COLUMN)


@dataclass
class SplitData:
    """Everything the metrics read of one split (module docstring).

    Attributes:
        segments: one row per (trace, segment): ``SEGMENT_COLUMNS``.
        credits: trace_id, segment, method, score: every row but Monte Carlo's, credits as
            compared (value differences for value methods).
        costs: trace_id, method and the cost columns, one row per trace and row label (Monte
            Carlo's budgets included).
        labels: ``labels_frame`` of the traces (the problem of each among them).
        departures: per string comparison (``REFDIFF``), trace id -> departure offset.
        pool: Monte Carlo's packed rollouts (``pack_pool``), or None.
        segmentation_tokens: trace id -> forward tokens of the segmentation pass (what the
            ``entropy`` baseline costs), or None.
    """

    segments: pd.DataFrame
    credits: pd.DataFrame
    costs: pd.DataFrame
    labels: pd.DataFrame
    departures: dict[str, pd.Series] = field(default_factory=dict)
    pool: pd.DataFrame | None = None
    segmentation_tokens: pd.Series | None = None

    def rollouts(self) -> int:
        """Rollouts per boundary in the pool (0 without one)."""
        return int(self.pool["rollouts"].max()) if self.pool is not None and len(
            self.pool) else 0

    def budgets(self) -> list[int]:
        """The Monte Carlo budgets computed from the pool (``BUDGETS`` below its size)."""
        return [n for n in BUDGETS if n < self.rollouts()]

    def row_labels(self) -> list[str]:
        """The row labels: the methods' in order, then Monte Carlo's budgets."""
        return [*dict.fromkeys(self.credits["method"]),
                *([REFERENCE] if self.pool is not None else []),
                *(f"{REFERENCE}-{n}" for n in self.budgets())]

    def scores(self) -> pd.DataFrame:
        """The score rows the metrics read: the credits and Monte Carlo's (from the pool) on
        the segmentation, with each row's costs."""
        seg = self.segments.assign(text="")
        parts = [self.credits.merge(seg, on=["trace_id", "segment"], how="left")]
        if self.pool is not None:
            parts.append(mc_rows(seg, pool_counts(self.pool), REFERENCE)[
                ["trace_id", "segment", "method", "score", *seg.columns[2:]]])
            for n in self.budgets():
                rows = mc_rows(seg, pool_counts(self.pool, n), f"{REFERENCE}-{n}")
                parts.append(rows[["trace_id", "segment", "method", "score", *seg.columns[2:]]])
        scores = pd.concat(parts, ignore_index=True)
        scores = scores.merge(self.costs, on=["trace_id", "method"], how="left")
        return scores


def split_metrics(data: SplitData, *, n_boot: int = 2000, seed: int = 0, splits: int = 20,
                  baselines: Sequence[str] = BASELINES) -> RegimeMetrics:
    """The bench's metrics of one split (``cotcredit.bench.metrics.regime_metrics``)."""
    counts = pool_counts(data.pool) if data.pool is not None else None
    segments = None
    if data.segmentation_tokens is not None:
        segments = pd.DataFrame({"trace_id": data.segmentation_tokens.index.astype(str),
                                 "cost_forward_tokens": data.segmentation_tokens.to_numpy()})
    return regime_metrics(data.scores(), data.labels, methods=data.row_labels(),
                          baselines=baselines, departures=data.departures or None,
                          counts=counts, segments=segments, n_boot=n_boot, seed=seed,
                          splits=splits)


def read_records(path: Path) -> list[dict]:
    """The labelled trace records of a bench split (``traces.jsonl``)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()
            if line.strip()]


def trace_departures(records: Sequence[dict]) -> dict[str, pd.Series]:
    """Per string comparison (``REFDIFF``), where each trace leaves the paths it reads."""
    found = {name: departures_from_traces(records, paths) for name, paths in REFDIFF.items()}
    return {k: v for k, v in found.items() if len(v)}


def read_split(where: Path, tables: Sequence[Path | tuple[Path, Sequence[str]]],
               records: Sequence[dict] | None = None, rollouts: Path | None = None,
               rename: Mapping[str, str] | None = None) -> SplitData:
    """A split from a bench run's folder: its segmentation (``segments.parquet``), the score
    tables ``tables`` (a path, or a path and the row labels to read from it; Monte Carlo's
    table gives its costs, its credits come from the pool), its labelled traces (``records``,
    default ``traces.jsonl``) and the saved rollouts (``rollouts``, default
    ``rollouts.parquet`` when there). ``rename``: row labels of the tables -> the labels to
    show (a run made before a rename)."""
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.credit import value_credit

    where = Path(where)
    records = list(records) if records is not None else read_records(where / "traces.jsonl")
    seg_rows = pd.read_parquet(where / "segments.parquet")
    segments = seg_rows[list(SEGMENT_COLUMNS)].copy()
    segments["trace_id"] = segments["trace_id"].astype(str)
    tokens = None
    if "cost_forward_tokens" in seg_rows.columns:
        tokens = seg_rows.groupby(seg_rows["trace_id"].astype(str))["cost_forward_tokens"].first()
    plain = [t for t in tables if not isinstance(t, tuple)]
    parts = [load_scores(plain)] if plain else []
    parts += [load_scores([t[0]], list(t[1])) for t in tables if isinstance(t, tuple)]
    scores = value_credit(pd.concat(parts, ignore_index=True), "differences")
    scores["trace_id"] = scores["trace_id"].astype(str)
    scores["method"] = scores["method"].astype(str).replace(dict(rename or {}))
    cost_cols = [c for c in COST_COLUMNS if c in scores.columns]
    costs = scores.groupby(["trace_id", "method"], sort=False)[cost_cols].first().reset_index()
    credits = scores.loc[scores["method"] != REFERENCE, ["trace_id", "segment", "method",
                                                          "score"]].reset_index(drop=True)
    rollouts = rollouts or (where / "rollouts.parquet")
    pool = None
    if Path(rollouts).exists() and (costs["method"] == REFERENCE).any():
        pool = pack_pool(read_rollouts_with_tokens(Path(rollouts)))
        ref = costs.loc[costs["method"] == REFERENCE]
        if len(ref):
            budget = budget_rows(segments, pool, [n for n in BUDGETS
                                                  if n < int(pool["rollouts"].max())],
                                 reference=ref, prefix=REFERENCE)
            if len(budget):
                costs = pd.concat([costs, budget.groupby(["trace_id", "method"], sort=False)[
                    [c for c in cost_cols if c in budget.columns]].first().reset_index()],
                    ignore_index=True)
    labels = labels_frame(records)
    labels = labels.loc[labels["trace_id"].isin(set(segments["trace_id"]))]
    return SplitData(segments.reset_index(drop=True), credits, costs.reset_index(drop=True),
                     labels.reset_index(drop=True), trace_departures(records), pool, tokens)


def read_rollouts_with_tokens(path: Path) -> pd.DataFrame:
    """The columns of a saved rollouts table the pool needs."""
    from cotcredit.store import io

    return io.read_table(path, ["trace_id", "boundary", "sample", "correct", "truncated",
                                "n_tokens"]).to_pandas()


def split_facts(m: RegimeMetrics, labels: pd.DataFrame) -> dict:
    """What the leaderboard says of a regime's held-out split: its traces per set and those
    left out (``counts``, ``left_out``) and its problems."""
    return {"counts": {k: v.get("erroneous", v.get("traces", 0)) for k, v in m.counts.items()},
            "left_out": {k: {r: n for r, n in v.items() if r not in ("erroneous", "traces")
                             and n} for k, v in m.counts.items()},
            "problems": int(labels["problem"].nunique())}


def sibling_note(records: Sequence[dict]) -> str:
    """Where RREDCoT's default (``references: siblings``, at most ``max_references``, the
    listed solutions first) has no room left for a sibling: said when any trace is so."""
    from cotcredit.methods import get_method
    from cotcredit.report.baselines import listed_solutions

    limit = getattr(get_method("rredcot").options_type(), "max_references", None)
    if not limit or not records:
        return ""
    full = sum(len({tuple(" ".join(x.split()) for x in t.splitlines() if x.strip())
                    for t in listed_solutions(r)}) >= limit for r in records)
    if not full:
        return ""
    return (f"{full} of the {len(records)} held-out traces list at least {limit} distinct "
            f"solutions: RREDCoT's default reads at most {limit} references, the listed ones "
            "first, so on those it reads no sibling (refdiff-siblings reads them all).")
