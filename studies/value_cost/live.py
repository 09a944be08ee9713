"""The candidates that need the model: truncated rollouts (`mc --horizon N`, `--horizon-lines
L`, run live through `cotcredit.pipeline.run_analysis` on the bench's segmentation) and the value
head (`value-head`: features from one forward per trace, cross-fitted on mc-16 values of the
first problems of the split, or on outcomes).

Live tables go to OUT/<regime>/<split>/live/ (resumable: a rerun skips finished traces).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pandas as pd

from cotcredit.bench.regimes import get_regime
from cotcredit.methods.mc import McOptions
from cotcredit.methods.value_head_fit import HeadSpec, boundary_features, cross_fit
from cotcredit.pipeline.run import InputOptions, run_analysis, with_rendered_prompt

from .common import OUT, Split, evaluate, mc_values, replay_result

#: The truncation grid (PROTOCOL.md, amendment 1).
HORIZONS = (("tokens", 8), ("tokens", 16), ("tokens", 32), ("tokens", 64), ("lines", 1),
            ("lines", 2))
HORIZON_ROLLOUTS = (2, 4, 8)
#: The value head's grid.
FRACTIONS = (0.05, 0.10, 0.25)
LAYERS = ("last", "middle")
KINDS = ("linear", "mlp")
L2 = (1e-3, 1e-2, 1e-1)
FOLDS = 5
TARGET_ROLLOUTS = 16  # the head is fitted to mc-16's values


def scorer_of(split: Split):
    """The regime's checkpoint the bench sampled the traces with."""
    from cotcredit.pipeline.api import scorer_for

    model = next(iter(split.records.values()))["model"]
    return scorer_for(model)


# ---- truncated rollouts ----------------------------------------------------------------------
def horizon_options(split: Split, kind: str, n: int, rollouts: int) -> McOptions:
    regime = get_regime(split.regime)
    sampling = dict(regime.sampling)
    return McOptions(rollouts=rollouts, seed=0, **sampling,
                     horizon=n if kind == "tokens" else None,
                     horizon_lines=n if kind == "lines" else None,
                     forcing=_forcing(regime.exit_string))


def _forcing(exit_string: str):
    from cotcredit.lm.encoding import ForcingOptions

    return ForcingOptions(exit_string=exit_string)


def horizon_name(kind: str, n: int, rollouts: int) -> str:
    return f"horizon-{'t' if kind == 'tokens' else 'l'}{n}-n{rollouts}"


def horizon_grid() -> list[tuple[str, str, int, int]]:
    return [(horizon_name(k, n, r), k, n, r)
            for (k, n), r in itertools.product(HORIZONS, HORIZON_ROLLOUTS)]


def run_horizon(split: Split, scorer, name: str, options: McOptions, traces: int) -> Path:
    """One truncation configuration on the first `traces` traces of the split (live)."""
    table = OUT / split.regime / split.split / "live" / f"{name}.parquet"
    table.parent.mkdir(parents=True, exist_ok=True)
    run_analysis(split.folder / "traces.jsonl", scorer, methods={"mc": options},
                 segments_file=split.folder / "segments.parquet",
                 inputs=InputOptions(max_traces=traces), outputs={"mc": table},
                 keep_rows=False)
    return table


def table_result(split: Split, name: str, table: Path) -> pd.DataFrame:
    """Result rows of a live table (credits: its value differences)."""
    t = pd.read_parquet(table, columns=["trace_id", "segment", "score", "cost_forward_tokens",
                                        "cost_generated_tokens"]).sort_values(
        ["trace_id", "segment"])
    credits = {str(k): g["score"].tolist() for k, g in t.groupby("trace_id", sort=False)}
    first = t.groupby("trace_id").first()
    cost = {str(k): (int(r.cost_forward_tokens), int(r.cost_generated_tokens))
            for k, r in first.iterrows()}
    return evaluate(split, name, credits, cost)


def horizon_results(split: Split, traces: int, configs=None) -> pd.DataFrame:
    scorer = scorer_of(split)
    parts = []
    for name, kind, n, r in configs or horizon_grid():
        table = run_horizon(split, scorer, name, horizon_options(split, kind, n, r), traces)
        parts.append(table_result(split, name, table))
    return pd.concat(parts, ignore_index=True)


# ---- the value head ----------------------------------------------------------------------------
def features(split: Split, scorer, layer: str) -> tuple[dict, dict]:
    """Boundary features of every trace (one forward each) and each pass's tokens."""
    import torch

    feats, tokens = {}, {}
    seg = split.segments
    bounds = {t: [0, *map(int, g["token_end"])] for t, g in seg.groupby("trace_id", sort=False)}
    with torch.no_grad():
        for tid in split.order:
            trace = with_rendered_prompt(split.traces[tid], scorer)
            enc = scorer.encode(trace, reserve=0)
            feats[tid] = boundary_features(scorer, enc, bounds[tid], layer)
            tokens[tid] = len(enc.ids)
    return feats, tokens


def fitting_traces(split: Split, fraction: float) -> list[str]:
    """Every trace of the first ⌈fraction · P⌉ problems that have the pool (P: the split's
    problems)."""
    problems = list(dict.fromkeys(split.problem(t) for t in split.order))
    with_pool = list(dict.fromkeys(split.problem(t) for t in split.mc_order))
    chosen = set(with_pool[:math.ceil(fraction * len(problems))])
    return [t for t in split.mc_order if split.problem(t) in chosen]


def head_name(target: str, fraction: float | None, layer: str, kind: str, l2: float) -> str:
    f = "all" if fraction is None else f"f{round(fraction * 100):02d}"
    return f"head-{target}-{f}-{layer}-{kind}-l2{l2:g}"


def head_results(split: Split, configs=None) -> pd.DataFrame:
    """Every value-head configuration (mc-16 targets at each fraction, and the outcome head):
    cross-fitted, scoring every trace of the split."""
    scorer = scorer_of(split)
    problem_of = {t: split.problem(t) for t in split.order}
    mc16 = replay_result(split, "mc-16", McOptions(rollouts=TARGET_ROLLOUTS))
    mc_tokens = dict(zip(mc16["trace_id"], mc16["forward"] + mc16["generated"], strict=True))
    targets = {t: mc_values(split, TARGET_ROLLOUTS, t) for t in split.mc_order}
    outcome = {t: [float(split.records[t]["correct"])] * len(split.spans[t]) + [
        float(split.records[t]["correct"])] for t in split.order}
    parts = []
    for layer in LAYERS:
        feats, passes = features(split, scorer, layer)
        n = len(split.order)
        grid = configs or [(tg, f, layer, k, l2) for tg, f in
                           [*(("mc", f) for f in FRACTIONS), ("outcome", None)]
                           for k in KINDS for l2 in L2]
        for target, fraction, lay, kind, l2 in grid:
            if lay != layer:
                continue
            spec = HeadSpec(kind, layer, l2)
            if target == "mc":
                fit = fitting_traces(split, fraction)
                head = cross_fit(feats, targets, problem_of, fit, spec, FOLDS)
                spent = sum(mc_tokens[t] + passes[t] for t in fit)
            else:
                fit = list(split.order)
                head = cross_fit(feats, outcome, problem_of, fit, spec, FOLDS, "outcome")
                spent = sum(passes[t] for t in fit)
            credits, cost = {}, {}
            for tid in split.order:
                v = head.values(problem_of[tid], feats[tid])
                credits[tid] = [b - a for a, b in zip(v, v[1:], strict=False)]
                cost[tid] = (passes[tid] + spent / n, 0.0)
            parts.append(evaluate(split, head_name(target, fraction, layer, kind, l2), credits,
                                  cost))
    return pd.concat(parts, ignore_index=True)
