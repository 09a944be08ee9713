"""Shapley values of the segments for the attribution target f (`methods.attribution`):

    φ_k = Σ_{S ⊆ N \\ {k}} |S|! (K − |S| − 1)! / K! · (f(S ∪ {k}) − f(S))

k's mean marginal contribution over orderings; Σ_k φ_k = f(all) − f(none). Exact when
K ≤ `exact_max`, else over `samples` orderings drawn with `seed` (still exactly efficient).
The library (shap's Exact/Permutation explainers, whose sampled orderings are antithetic so
`samples` rounds up to even, or captum's ShapleyValues/ShapleyValueSampling) walks the
orderings; cotcredit scores the coalitions in batches of packed passes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cotcredit.errors import UserError
from cotcredit.extras import require
from cotcredit.methods import MethodRows, MethodSpec, TraceContext
from cotcredit.methods.attribution import (
    ATTRIBUTE,
    TargetOptions,
    ValueFunction,
    resolve_target,
    value_function,
)
from cotcredit.options import check_choices, option

if TYPE_CHECKING:  # numpy and torch load with the model (keeps `--help` fast)
    import numpy as np
    import torch

CAPTUM_EXACT_MAX = 8  # captum's exact ShapleyValues walks K! orderings (~18 s of its own at 8)


@dataclass(frozen=True)
class ShapleyOptions:
    """Options of Shapley attribution."""

    target: TargetOptions = option(default_factory=TargetOptions, help="What is attributed.")
    backend: str = option(
        "shap", choices=("shap", "captum"), flag="--shapley-backend",
        help="shap: shap's Exact/Permutation explainers; captum: "
        "ShapleyValues/ShapleyValueSampling.",
    )
    samples: int = option(
        32, help="Shapley: orderings of the segments sampled when K > --exact-max.")
    exact_max: int = option(
        10,
        help="Shapley: exact (all 2^K coalitions) when there are at most this many segments "
        "(captum: at most 8).",
    )
    seed: int = option(0, help="Seed of the sampled Shapley orderings.")

    def validate(self) -> ShapleyOptions:
        """Check the options (a one-line UserError naming the flag); returns self."""
        self.target.validate()
        check_choices(self)
        if self.samples < 1:
            raise UserError("--samples must be at least 1")
        if self.exact_max < 0 or self.exact_max > 16:
            raise UserError("--exact-max must be between 0 and 16 (2^K coalitions)")
        require("shapley", "attribution", [self.backend])
        return self


@dataclass
class ShapleyResult:
    """Shapley values of a trace's segments and how they were computed."""
    values: np.ndarray  # φ_k
    exact: bool
    samples: int  # orderings walked (0 when exact)
    base_value: float  # f(none) as the library saw it


def _is_exact(K: int, options: ShapleyOptions) -> bool:
    limit = (
        options.exact_max if options.backend == "shap" else min(options.exact_max, CAPTUM_EXACT_MAX)
    )
    return K <= limit


def shapley_shap(f: ValueFunction, options: ShapleyOptions) -> ShapleyResult:
    """Shapley values of `f` with shap: exact (`ExactExplainer`) for few segments, else sampled
    permutations (`PermutationExplainer`)."""
    import numpy as np

    require("shapley", "attribution", ["shap"])
    import shap

    K = f.K
    exact = _is_exact(K, options)
    masker = shap.maskers.Independent(np.zeros((1, K)), max_samples=1)
    x = np.ones((1, K))
    state = np.random.get_state()  # shap seeds numpy's global generator; leave it as it was
    try:
        if exact:
            expl = shap.explainers.Exact(f, masker)(x, batch_size=1 << K, silent=True)
            samples = 0
        else:
            pairs = (options.samples + 1) // 2
            explainer = shap.explainers.Permutation(f, masker, seed=options.seed)
            expl = explainer(x, max_evals=pairs * (2 * K + 1), batch_size=2 * K + 1, silent=True)
            samples = 2 * pairs
    finally:
        np.random.set_state(state)
    return ShapleyResult(
        np.asarray(expl.values[0], dtype=np.float64),
        exact,
        samples,
        float(np.asarray(expl.base_values).reshape(-1)[0]),
    )


def _orderings(K: int, samples: int, seed: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.permutation(K).tolist() for _ in range(samples)]


def shapley_captum(f: ValueFunction, options: ShapleyOptions) -> ShapleyResult:
    """Shapley values of `f` with captum: exact (`ShapleyValues`) for few segments, else
    `ShapleyValueSampling` over sampled orderings."""
    import numpy as np
    import torch

    require("shapley", "attribution", ["captum"])
    from captum.attr import ShapleyValues, ShapleyValueSampling

    K = f.K
    exact = _is_exact(K, options)

    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(f(x), dtype=torch.float64)

    inputs = torch.ones(1, K, dtype=torch.float64)
    baselines = torch.zeros(1, K, dtype=torch.float64)
    if exact:
        # Every coalition occurs: score all 2^K in one batch, then captum walks the K! orderings.
        f(np.array(list(itertools.product([False, True], repeat=K)), dtype=bool))
        values = ShapleyValues(forward).attribute(
            inputs, baselines=baselines, perturbations_per_eval=K
        )
        samples = 0
    else:
        orders = _orderings(K, options.samples, options.seed)
        # The coalitions captum will meet: each prefix of each ordering. Score them in one batch.
        rows = []
        for order in orders:
            m = np.zeros(K, dtype=bool)
            rows.append(m.copy())
            for k in order:
                m[k] = True
                rows.append(m.copy())
        masks = np.array(rows)
        f(masks)
        svs = ShapleyValueSampling(forward)
        svs.permutation_generator = lambda num_features, num_samples: iter(orders)
        values = svs.attribute(
            inputs, baselines=baselines, n_samples=len(orders), perturbations_per_eval=K
        )
        samples = len(orders)
    return ShapleyResult(values[0].double().numpy(), exact, samples, f.empty)


def run(ctx: TraceContext, options: ShapleyOptions) -> MethodRows:
    """Shapley rows for one trace: score = φ_k; backend, exact, samples and f(all), f(none)."""
    f = value_function(ctx, options.target)
    with f.record() as seen:
        result = (shapley_shap if options.backend == "shap" else shapley_captum)(f, options)
    full, empty = f.full, f.empty
    return {
        "shapley": [
            {
                "score": float(result.values[k]),
                "backend": options.backend,
                "exact": result.exact,
                "samples": result.samples,
                "coalitions": len(seen),
                "value_full": full,
                "value_empty": empty,
            }
            for k in range(f.K)
        ]
    }


def reserve(scorer, trace, options: ShapleyOptions) -> int:
    """Context kept free after the trace: E ⊕ Y*, plus room for baseline texts."""
    extra = (
        len(scorer.encode_text(options.target.baseline_text)) if options.target.baseline_text else 0
    )
    return 64 + 16 * extra


SPEC = MethodSpec(
    name="shapley",
    options_type=ShapleyOptions,
    run=run,
    labels=lambda options: ["shapley"],
    reserve=reserve,
    description="Shapley values of segments for f = log p(Y* | reasoning ⊕ E) (shap or captum)",
    columns={"backend": "string", "exact": "bool", "samples": "int64", "coalitions": "int64",
             "value_full": "float64", "value_empty": "float64"},
    order=3,
    prepare=resolve_target,
    shortcuts={"shapley_samples": "samples"},
    command=ATTRIBUTE,
)
