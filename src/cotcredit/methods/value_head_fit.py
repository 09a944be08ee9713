"""Fitting the value head of the `value-head` method: a small model on the policy's hidden state at
each boundary, fitted to Monte Carlo values (or to outcomes alone), cross-fitted by problem.

Features. The hidden state of the last token of state s_k (prompt + reasoning tokens [:b_k]) at
one layer (`boundary_features`): one forward pass over the trace gives every boundary's.

Heads (`HeadSpec`). `linear`: logistic regression, V̂ = σ(w·z + c) on the standardized
features z, fitted to soft targets in [0, 1] by cross-entropy plus l2·|w|² (L-BFGS); `mlp`: one
hidden layer of `hidden` ReLU units, the same loss and penalty on both weight matrices (Adam,
full batch, a fixed number of steps). Targets: Monte Carlo V_k (e.g. 16 rollouts per boundary)
or, for the cheap control, the trace's outcome at every boundary. Both are written here, on
torch, because scikit-learn is not a dependency: the loss and its optimizer are a few lines.

Cross-fitting (`cross_fit`). The problems of the fitting traces are split into folds; fold g's
model is fitted on the fitting traces of every other fold and scores the traces of fold g's
problems; one more model, fitted on every fitting trace, scores the problems outside the fitting
set. So no trace is ever scored by a model fitted on its own problem (`FittedHead.model_for`).

Cost (`FittedHead.amortized`). What fitting spent (the Monte Carlo of its fitting traces and
their feature passes), divided by the number of traces the head is meant to score: the share
each scored trace carries in the method's cost besides its own forward pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cotcredit.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from cotcredit.data.trace import Trace
    from cotcredit.lm import Scorer
    from cotcredit.lm.encoding import EncodedTrace

KINDS = ("linear", "mlp")
TARGETS = ("mc", "outcome")


@dataclass(frozen=True)
class HeadSpec:
    """What head is fitted and how."""

    kind: str = "linear"  # linear | mlp
    layer: str = "last"  # last | middle | an index of the model's hidden states
    l2: float = 1e-2  # penalty on the weights (mean loss + l2·|w|²)
    hidden: int = 64  # mlp: hidden units
    steps: int = 400  # mlp: Adam steps (full batch); linear: L-BFGS iterations
    seed: int = 0

    def validate(self) -> HeadSpec:
        if self.kind not in KINDS:
            raise UserError(f"value head: kind must be one of {', '.join(KINDS)}, got "
                            f"{self.kind!r}")
        if self.l2 < 0:
            raise UserError(f"value head: l2 must be at least 0, got {self.l2}")
        return self


def boundary_positions(prompt_len: int, boundaries: Sequence[int]) -> list[int]:
    """Positions of the last token of each state s_k (prompt + reasoning[:b_k])."""
    return [prompt_len + b - 1 for b in boundaries]


def boundary_features(scorer: Scorer, encoded: EncodedTrace, boundaries: Sequence[int],
                      layer: str | int) -> torch.Tensor:
    """Hidden states (K+1, hidden) at the boundaries of one encoded trace: one forward pass."""
    return scorer.hidden_states(encoded.ids, boundary_positions(encoded.prompt_len, boundaries),
                                layer)


def _model(spec: HeadSpec, width: int) -> torch.nn.Module:
    import torch

    torch.manual_seed(spec.seed)
    if spec.kind == "linear":
        return torch.nn.Linear(width, 1)
    return torch.nn.Sequential(torch.nn.Linear(width, spec.hidden), torch.nn.ReLU(),
                               torch.nn.Linear(spec.hidden, 1))


def _penalty(model: torch.nn.Module) -> torch.Tensor:
    return sum((p ** 2).sum() for n, p in model.named_parameters() if n.endswith("weight"))


def fit_model(x: torch.Tensor, y: torch.Tensor, spec: HeadSpec) -> dict:
    """One head fitted to targets `y` in [0, 1] from features `x` (rows: boundaries). Returns
    its state: the standardization and the weights."""
    import torch

    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / std
    model = _model(spec, x.shape[1])
    bce = torch.nn.BCEWithLogitsLoss()

    def loss() -> torch.Tensor:
        return bce(model(z)[:, 0], y) + spec.l2 * _penalty(model)

    if spec.kind == "linear":
        opt = torch.optim.LBFGS(model.parameters(), max_iter=spec.steps,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            value = loss()
            value.backward()
            return value

        opt.step(closure)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(spec.steps):
            opt.zero_grad()
            loss().backward()
            opt.step()
    return {"mean": mean, "std": std,
            "weights": {k: v.detach().clone() for k, v in model.state_dict().items()}}


def predict(state: dict, spec: HeadSpec, x: torch.Tensor) -> torch.Tensor:
    """V̂ = σ(head(standardized x)) of one fitted state."""
    import torch

    model = _model(spec, x.shape[1])
    model.load_state_dict(state["weights"])
    with torch.no_grad():
        return torch.sigmoid(model((x - state["mean"]) / state["std"])[:, 0])


def problem_folds(problems: Sequence[str], folds: int) -> dict[str, int]:
    """Problem -> fold, by a hash of the problem (deterministic, independent of order)."""
    def h(p: str) -> int:
        return int.from_bytes(hashlib.sha256(p.encode()).digest()[:8], "little")

    ordered = sorted(dict.fromkeys(problems), key=h)
    return {p: i % folds for i, p in enumerate(ordered)}


@dataclass
class FittedHead:
    """Cross-fitted heads: `folds[g]` scores the problems `fold_of` maps to g (it was fitted on
    the other folds), `outside` every problem not among the fitting ones."""

    spec: HeadSpec
    fold_of: dict[str, int]
    folds: list[dict]
    outside: dict
    target: str = "mc"
    amortized: dict[str, float] = field(default_factory=dict)  # cost column -> tokens per trace
    fitted_on: dict[str, list[str]] = field(default_factory=dict)  # model -> its problems

    def model_for(self, problem: str) -> tuple[str, dict]:
        """(name, state) of the model that scores `problem`: never one fitted on it."""
        if problem in self.fold_of:
            g = self.fold_of[problem]
            return f"fold{g}", self.folds[g]
        return "outside", self.outside

    def values(self, problem: str, x: torch.Tensor) -> list[float]:
        """V̂ at every boundary of a trace of `problem` from its boundary features."""
        _, state = self.model_for(problem)
        return [float(v) for v in predict(state, self.spec, x)]

    def save(self, path: str | Path) -> Path:
        import torch

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"format": "cotcredit value head 1", "spec": asdict(self.spec),
                    "fold_of": self.fold_of, "folds": self.folds, "outside": self.outside,
                    "target": self.target, "amortized": self.amortized,
                    "fitted_on": self.fitted_on}, path)
        return path


def load_head(path: str | Path) -> FittedHead:
    """A head saved by `FittedHead.save` (a one-line error for anything else)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise UserError(f"--head {path}: no such file (fit one with "
                        "cotcredit.methods.value_head_fit.fit_value_head)")
    try:
        d = torch.load(path, weights_only=True)
    except Exception as e:  # noqa: BLE001 (any unreadable file)
        raise UserError(f"--head {path}: not a value head ({type(e).__name__})") from None
    if not isinstance(d, dict) or d.get("format") != "cotcredit value head 1":
        raise UserError(f"--head {path}: not a value head saved by cotcredit")
    return FittedHead(HeadSpec(**d["spec"]), d["fold_of"], d["folds"], d["outside"],
                      d["target"], d["amortized"], d["fitted_on"])


def cross_fit(features: Mapping[str, torch.Tensor], targets: Mapping[str, Sequence[float]],
              problem_of: Mapping[str, str], fit_traces: Sequence[str], spec: HeadSpec,
              folds: int = 5, target: str = "mc") -> FittedHead:
    """Heads cross-fitted by problem (module docstring) on the traces `fit_traces`: `features`
    and `targets` per trace id (K+1 rows and values each), `problem_of` each trace's problem."""
    import torch

    spec.validate()
    problems = [problem_of[t] for t in fit_traces]
    distinct = list(dict.fromkeys(problems))
    if len(distinct) < 2:
        raise UserError("value head: cross-fitting needs fitting traces of at least 2 problems")
    fold_of = problem_folds(distinct, min(folds, len(distinct)))

    def fit(traces: list[str]) -> dict:
        x = torch.cat([features[t] for t in traces])
        y = torch.tensor([v for t in traces for v in targets[t]], dtype=torch.float32)
        return fit_model(x, y, spec)

    n_folds = max(fold_of.values()) + 1
    fold_models, fitted_on = [], {}
    for g in range(n_folds):
        train = [t for t, p in zip(fit_traces, problems, strict=True) if fold_of[p] != g]
        fold_models.append(fit(train))
        fitted_on[f"fold{g}"] = sorted({problem_of[t] for t in train})
    outside = fit(list(fit_traces))
    fitted_on["outside"] = sorted(distinct)
    return FittedHead(spec, fold_of, fold_models, outside, target, {}, fitted_on)


def mc_targets(table: pd.DataFrame,
               trace_ids: Sequence[str] | None = None) -> dict[str, list[float]]:
    """V_0..V_K per trace from a Monte Carlo table's rows (value_before of the first segment,
    then value_after of each)."""
    rows = table.sort_values(["trace_id", "segment"])
    if trace_ids is not None:
        rows = rows[rows["trace_id"].isin(set(trace_ids))]
    out = {}
    for tid, g in rows.groupby("trace_id", sort=False):
        out[str(tid)] = [float(g["value_before"].iloc[0]), *map(float, g["value_after"])]
    return out


def fit_value_head(traces: str | Path | Sequence[Trace], values: str | Path | pd.DataFrame,
                   scorer: Scorer, output: str | Path, *, spec: HeadSpec = HeadSpec(),
                   folds: int = 5, target: str = "mc", scored_traces: int | None = None
                   ) -> FittedHead:
    """Fit a value head and save it to `output`.

    Args:
        traces: the traces (a file any reader takes, or `Trace`s) with their problems; the head
            is fitted on those `values` covers.
        values: a Monte Carlo table (path or DataFrame; its segmentation is the one scored):
            its V_k are the targets (target "mc"), or only its boundaries are read and every
            boundary's target is the trace's outcome (target "outcome").
        scorer: the policy (its hidden states are the features).
        spec: head, layer, penalty; folds: problem folds of the cross-fit.
        scored_traces: how many traces the head is meant to score, over which its fitting cost
            is spread [default: the number of `traces`].
    """
    import pandas as pd

    from cotcredit.data.trace import problem_key, trace_outcome
    from cotcredit.data.traces import iter_traces

    if target not in TARGETS:
        raise UserError(f"value head: target must be one of {', '.join(TARGETS)}")
    table = pd.read_parquet(values) if isinstance(values, (str, Path)) else values
    records = list(iter_traces(traces)) if isinstance(traces, (str, Path)) else list(traces)
    covered = set(table["trace_id"].astype(str))
    chosen = [t for t in records if t.id in covered]
    if not chosen:
        raise UserError("value head: the values table covers none of the traces")
    per_trace = table.groupby("trace_id").first()
    features, targets, problem_of = {}, {}, {}
    spent_forward = spent_generated = 0
    mc = mc_targets(table)
    for t in chosen:
        rows = table[table["trace_id"] == t.id].sort_values("segment")
        bounds = [0, *map(int, rows["token_end"])]
        enc = scorer.encode(t)
        features[t.id] = boundary_features(scorer, enc, bounds, spec.layer)
        spent_forward += len(enc.ids)
        targets[t.id] = (mc[t.id] if target == "mc"
                         else [trace_outcome(t)] * len(bounds))
        problem_of[t.id] = problem_key(t)
        if target == "mc":
            row = per_trace.loc[t.id]
            spent_forward += int(row.get("cost_forward_tokens", 0) or 0)
            spent_generated += int(row.get("cost_generated_tokens", 0) or 0)
    head = cross_fit(features, targets, problem_of, [t.id for t in chosen], spec, folds, target)
    n = scored_traces or len(records)
    head.amortized = {"cost_forward_tokens": spent_forward / n,
                      "cost_generated_tokens": spent_generated / n}
    head.save(output)
    return head
