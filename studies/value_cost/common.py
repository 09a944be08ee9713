"""What every part of the study reads: a bench split (traces, labels, segments, the rollout pool,
the cheap priors), per-trace metrics of a credit, and intervals by problem.

A *result* is one row per (configuration, trace): its tokens (forward, generated) and, for the
traces in each locating set, whether its lowest credit lands on the target segment (ties 1/m,
as `cotcredit.report.localization`):

* `loc`  first wrong step, traces with a wrong step and a wrong answer (localization);
* `dep`  valid departure from the reference, correct traces that depart validly (false blame);
* `ws`   wrong step the answer survived, traces with a wrong step and the right answer (false
  blame).

Credits are value differences V_k − V_(k−1) for every candidate (the bench's definition).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.data.trace import first_departure
from cotcredit.data.traces import iter_traces
from cotcredit.methods.mc import McOptions, Rollout
from cotcredit.methods.mc_prior import paths_credits
from cotcredit.methods.mc_replay import SavedTrace, prompt_len_of_fixed_run, replay

HERE = Path(__file__).resolve().parent
#: The benchmark's version-2 run (read only; `python -m studies.bench.full run` writes it there
#: by default) and this study's own outputs (ignored by git).
BENCH = Path(os.environ.get("VALUE_COST_BENCH", HERE.parent / "bench" / "run"))
OUT = Path(os.environ.get("VALUE_COST_OUT", HERE / "runs"))
REGIMES = ("unique", "multipath", "forecast", "long")
METRICS = ("loc", "dep", "ws")
RESULT_COLUMNS = ["config", "trace_id", "problem", "forward", "generated", *METRICS]
POOL = 32  # rollouts per boundary the bench saved


@dataclass
class Split:
    """One regime's split of the bench, as the study reads it."""

    regime: str
    split: str
    folder: Path
    records: dict[str, dict]
    order: list[str]  # trace ids in file order
    segments: pd.DataFrame
    traces: dict = field(default_factory=dict)  # trace id -> Trace
    pool: dict[str, SavedTrace] = field(default_factory=dict)
    mc_order: list[str] = field(default_factory=list)  # the traces with a pool, in file order

    def problem(self, tid: str) -> str:
        return str(self.records[tid]["problem_id"])

    @property
    def spans(self) -> dict[str, list[tuple[int, int]]]:
        if not hasattr(self, "_spans"):
            self._spans = {t: list(zip(g["char_start"], g["char_end"], strict=True))
                           for t, g in self.segments.groupby("trace_id", sort=False)}
        return self._spans

    def targets(self) -> dict[str, dict[str, int]]:
        """metric -> trace id -> the target segment's index (traces outside the set absent)."""
        if hasattr(self, "_targets"):
            return self._targets
        out: dict[str, dict[str, int]] = {m: {} for m in METRICS}
        for tid, r in self.records.items():
            error, right = int(r.get("error_char", -1)), bool(r["correct"])
            dep = int(r.get("departure_char", -1) if r.get("departure_char") is not None else -1)
            if error >= 0 and not right:
                metric, at = "loc", error
            elif error >= 0 and right:
                metric, at = "ws", error
            elif right and r.get("valid_departure") and dep >= 0:
                metric, at = "dep", dep
            else:
                continue
            hit = [i for i, (a, b) in enumerate(self.spans.get(tid, [])) if a <= at < b]
            if hit:
                out[metric][tid] = hit[0]
        self._targets = out
        return out


def load_split(regime: str, split: str, pool: bool = True) -> Split:
    """The bench's split of `regime` (traces, segments, and with `pool` the saved rollouts)."""
    folder = BENCH / regime / split
    lines = [json.loads(x) for x in (folder / "traces.jsonl").read_text().splitlines() if x]
    records = {str(r["id"]): r for r in lines}
    segments = pd.read_parquet(folder / "segments.parquet").sort_values(["trace_id", "segment"])
    s = Split(regime, split, folder, records, list(records), segments)
    s.traces = {t.id: t for t in iter_traces(folder / "traces.jsonl")}
    if pool:
        s.pool = read_pool(folder)
        s.mc_order = [t for t in s.order if t in s.pool]
    return s


def read_pool(folder: Path) -> dict[str, SavedTrace]:
    """Every trace's saved rollouts, with its prompt length from the bench's Monte Carlo cost."""
    ro = pd.read_parquet(folder / "rollouts.parquet",
                         columns=["trace_id", "boundary", "token", "sample", "n_tokens",
                                  "correct", "truncated"])
    mc = pd.read_parquet(folder / "mc.parquet", columns=[
        "trace_id", "segment", "cost_forward_tokens", "trace_rollouts"])
    cost = mc.groupby("trace_id").first()
    ro = ro.sort_values(["trace_id", "boundary", "sample"])
    out = {}
    for tid, g in ro.groupby("trace_id", sort=False):
        b = g["boundary"].to_numpy()
        tokens = g.groupby("boundary")["token"].first().tolist()
        rollouts = {}
        for k, tok, j, n, c, tr in zip(b, g["token"], g["sample"], g["n_tokens"], g["correct"],
                                       g["truncated"], strict=True):
            rollouts.setdefault(int(k), []).append(
                Rollout(int(k), int(tok), int(j), "", int(n), None, bool(c), bool(tr)))
        row = cost.loc[tid]
        prompt_len = prompt_len_of_fixed_run(int(row["cost_forward_tokens"]),
                                             int(row["trace_rollouts"]), tokens[-1])
        out[str(tid)] = SavedTrace(str(tid), tokens, rollouts, prompt_len)
    return out


def lowest_hit(credits, target: int) -> float:
    """1/m when the target segment is among the m segments of lowest credit, else 0."""
    x = np.asarray(credits, dtype="float64")
    low = x == x.min()
    return float(low[target]) / float(low.sum())


def evaluate(split: Split, config: str, credits: dict[str, list[float]],
             cost: dict[str, tuple[float, float]]) -> pd.DataFrame:
    """Result rows (module docstring) of one configuration on the traces it scored."""
    targets = split.targets()
    rows = []
    for tid, c in credits.items():
        f, g = cost[tid]
        row = {"config": config, "trace_id": tid, "problem": split.problem(tid), "forward": f,
               "generated": g}
        for m in METRICS:
            row[m] = lowest_hit(c, targets[m][tid]) if tid in targets[m] else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def replay_result(split: Split, config: str, options: McOptions, prior: dict | None = None,
                  prior_cost: dict | None = None, traces: list[str] | None = None
                  ) -> pd.DataFrame:
    """Result rows of an `mc` configuration replayed on the pool (`mc_replay`)."""
    credits, cost = {}, {}
    for tid in traces or split.mc_order:
        r = replay(split.pool[tid], options, None if prior is None else prior.get(tid),
                   0 if prior_cost is None else int(prior_cost.get(tid, 0)))
        credits[tid] = [row["score"] for row in r.rows]
        cost[tid] = (r.forward_tokens, r.generated_tokens)
    return evaluate(split, config, credits, cost)


def mc_values(split: Split, n: int, tid: str) -> list[float]:
    """V_0..V_K of Monte Carlo with the first n rollouts of the pool."""
    r = replay(split.pool[tid], McOptions(rollouts=n))
    return [r.rows[0]["value_before"], *[row["value_after"] for row in r.rows]]


# ---- priors and string baselines (per trace: a credit per segment, and what it cost) ------------
def priors(split: Split) -> dict[str, tuple[dict, dict]]:
    """prior -> (trace id -> credits, trace id -> forward tokens it costs), for the priors of
    `mc --prior` read from the bench's tables: rhat (rredcot-rhat), rredcot (RREDCoT's default,
    the bench's rredcot-siblings), entropy (the segmentation's pass), paths (text only)."""
    out = {}
    for name, table in (("rhat", "rredcot-rhat"), ("rredcot", "rredcot-siblings")):
        t = pd.read_parquet(split.folder / f"{table}.parquet", columns=[
            "trace_id", "segment", "g_before", "g_after", "cost_forward_tokens"])
        t = t.sort_values(["trace_id", "segment"])
        credits = {str(k): (g["g_after"] - g["g_before"]).tolist()
                   for k, g in t.groupby("trace_id", sort=False)}
        out[name] = (credits, t.groupby("trace_id")["cost_forward_tokens"].first().to_dict())
    seg = split.segments
    out["entropy"] = ({str(k): (-g["mean_entropy"]).tolist()
                       for k, g in seg.groupby("trace_id", sort=False)},
                      seg.groupby("trace_id")["cost_forward_tokens"].first().to_dict())
    out["paths"] = ({tid: paths_credits(split.traces[tid], split.spans[tid])
                     for tid in split.order}, {})
    return out


def string_baselines(split: Split) -> dict[str, dict[str, list[float]]]:
    """The string comparisons, −1 on the segment where the response leaves its last known path
    (0 elsewhere; all 0 when it follows one): `refdiff` the one solution, `refdiff-solutions` the
    listed solutions too, `refdiff-siblings` also the split's right responses to its problem."""
    right: dict[str, list[tuple[str, str]]] = {}
    for tid, r in split.records.items():
        if r["correct"]:
            right.setdefault(split.problem(tid), []).append((tid, r["response"]))
    out: dict[str, dict[str, list[float]]] = {k: {} for k in (
        "refdiff", "refdiff-solutions", "refdiff-siblings")}
    for tid, r in split.records.items():
        sol = [r.get("solution") or ""]
        listed = sol + list(r.get("solutions") or [])
        sib = listed + [x for t, x in right.get(split.problem(tid), []) if t != tid]
        for name, paths in (("refdiff", sol), ("refdiff-solutions", listed),
                            ("refdiff-siblings", sib)):
            out[name][tid] = _leaves(r["response"], [p for p in paths if p], split.spans[tid])
    return out


def _leaves(response: str, paths: list[str], spans: list[tuple[int, int]]) -> list[float]:
    offsets = [first_departure(response, p) for p in paths]
    if not offsets or min(offsets) < 0:
        return [0.0] * len(spans)
    at = max(offsets)
    return [-1.0 if a <= at < b else 0.0 for a, b in spans]


# ---- intervals by problem ------------------------------------------------------------------
def problem_bootstrap(values: pd.DataFrame, problems: pd.Series, n_boot: int = 2000,
                      seed: int = 0) -> pd.DataFrame:
    """Mean and 95% percentile interval of each column of `values` (rows: traces; NaN: not in
    the set), resampling problems with all their traces (one set of resamples for every column).
    Returns columns value, low, high, n."""
    codes, uniq = pd.factorize(problems.to_numpy())
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(uniq), size=(n_boot, len(uniq)))
    counts = np.zeros((n_boot, len(uniq)))
    for b in range(n_boot):
        counts[b] = np.bincount(draws[b], minlength=len(uniq))
    out = []
    for col in values.columns:
        x = values[col].to_numpy(dtype="float64")
        ok = np.isfinite(x)
        s = np.bincount(codes[ok], weights=x[ok], minlength=len(uniq))
        n = np.bincount(codes[ok], minlength=len(uniq)).astype("float64")
        with np.errstate(invalid="ignore", divide="ignore"):
            means = (counts @ s) / (counts @ n)
        lo, hi = np.nanpercentile(means, [2.5, 97.5]) if ok.any() else (np.nan, np.nan)
        out.append({"column": col, "value": float(x[ok].mean()) if ok.any() else np.nan,
                    "low": float(lo), "high": float(hi), "n": int(ok.sum())})
    return pd.DataFrame(out).set_index("column")


def write_results(frame: pd.DataFrame, regime: str, split: str, name: str) -> Path:
    """Save result rows under OUT/<regime>/<split>/<name>.parquet."""
    path = OUT / regime / split / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)
    return path


def read_results(regime: str, split: str, name: str) -> pd.DataFrame | None:
    path = OUT / regime / split / f"{name}.parquet"
    return pd.read_parquet(path) if path.exists() else None
