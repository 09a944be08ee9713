"""Gradient attribution (captum) of the attribution target f = log p(Y* | prompt ⊕ reasoning ⊕
E) (`methods.attribution`) to the input embeddings x_i of the reasoning tokens:

- `ig`: a_i = (x_i − x'_i) ⊙ ∫_0^1 ∂f/∂x_i (x' + α(x − x')) dα, baseline x' = 0 or the pad
  embedding, `steps` Gauss–Legendre points; the completeness gap is `delta`.
- `saliency`: a_i = ∂f/∂x_i (signed).
- `ixg`: a_i = x_i ⊙ ∂f/∂x_i.

Segment k gets score_k = Σ_{i ∈ k} Σ_d a_{i,d} and `l2` = ‖a_{i ∈ k}‖_F (a magnitude signed
cancellation cannot hide). IG runs in batches of about `batch_tokens` tokens to bound memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cotcredit.errors import UserError
from cotcredit.extras import require
from cotcredit.methods import MethodRows, MethodSpec, TraceContext
from cotcredit.methods.attribution import (
    ATTRIBUTE,
    EmbeddingTarget,
    TargetOptions,
    resolve_target,
)
from cotcredit.options import option

if TYPE_CHECKING:  # torch loads with the model (keeps `--help` fast)
    import torch

KINDS = ("ig", "saliency", "ixg")


@dataclass(frozen=True)
class GradientOptions:
    """Options of gradient attribution."""

    # baseline_text does not apply: the baseline of integrated gradients is an embedding.
    target: TargetOptions = option(default_factory=TargetOptions, help="What is attributed.")
    kinds: tuple[str, ...] = option(
        ("ig",), flag="--gradient",
        help="Comma-separated gradient kinds: ig (integrated gradients), saliency, ixg (input x "
        "gradient); rows labelled gradient-<kind>.",
    )
    steps: int = option(32, help="Integrated-gradients steps.")
    ig_baseline: str = option(
        "zero", choices=("zero", "pad"),
        help="Integrated-gradients baseline embedding: zero | pad (pad token).",
    )
    batch_tokens: int = option(
        4096, flag="--ig-batch-tokens",
        help="Tokens per internal batch of integrated-gradient steps (bounds memory; at least "
        "one sequence).",
    )

    def validate(self) -> GradientOptions:
        """Check the options (a one-line UserError naming the flag); returns self."""
        self.target.validate()
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise UserError(
                f"--gradient must be a comma-separated list of {', '.join(KINDS)}, "
                f"got '{','.join(self.kinds)}'"
            )
        if self.steps < 1:
            raise UserError("--steps must be at least 1")
        if self.ig_baseline not in ("zero", "pad"):
            raise UserError(f"--ig-baseline must be zero or pad, got '{self.ig_baseline}'")
        if self.batch_tokens < 1:
            raise UserError("--batch-tokens must be at least 1")
        require("gradient", "attribution", ["captum"])
        return self


def _per_segment(ctx: TraceContext, attr: torch.Tensor) -> tuple[list[float], list[float]]:
    """Signed sums and Frobenius norms of (n_reasoning, hidden) attributions per segment."""
    attr = attr.detach().double().cpu()
    token = attr.sum(1)
    sums, norms = [], []
    for s in ctx.segmentation.segments:
        sums.append(float(token[s.token_start : s.token_end].sum()))
        norms.append(float(attr[s.token_start : s.token_end].norm()))
    return sums, norms


def run(ctx: TraceContext, options: GradientOptions) -> MethodRows:
    """Rows per requested kind (gradient-ig, gradient-saliency, gradient-ixg) for one trace."""
    import torch

    require("gradient", "attribution", ["captum"])
    from captum.attr import IntegratedGradients, Saliency

    f = EmbeddingTarget(ctx, options.target)
    x = f.reasoning[None].clone().requires_grad_()
    out: MethodRows = {}
    with torch.no_grad():
        value = float(f(x)[0])
    with torch.enable_grad():
        if "ig" in options.kinds:
            if options.ig_baseline == "pad" and f.pad is None:
                raise UserError("--ig-baseline pad: the tokenizer has no pad token")
            base = (
                torch.zeros_like(x) if options.ig_baseline == "zero" else f.pad.expand_as(x).clone()
            )
            ibs = max(1, options.batch_tokens // f.length)
            attr, delta = IntegratedGradients(f).attribute(
                x,
                baselines=base,
                n_steps=options.steps,
                method="gausslegendre",
                internal_batch_size=ibs,
                return_convergence_delta=True,
            )
            with torch.no_grad():
                f_base = float(f(base)[0])
            sums, norms = _per_segment(ctx, attr[0])
            out["gradient-ig"] = [
                {
                    "score": s,
                    "l2": n,
                    "delta": float(delta[0]),
                    "steps": options.steps,
                    "value_full": value,
                    "value_baseline": f_base,
                }
                for s, n in zip(sums, norms, strict=True)
            ]
        if "saliency" in options.kinds or "ixg" in options.kinds:
            grad = Saliency(f).attribute(x, abs=False)[0]
            for kind, attr in (("saliency", grad), ("ixg", grad * x[0].detach())):
                if kind in options.kinds:
                    sums, norms = _per_segment(ctx, attr)
                    out[f"gradient-{kind}"] = [
                        {
                            "score": s,
                            "l2": n,
                            "delta": None,
                            "steps": None,
                            "value_full": value,
                            "value_baseline": None,
                        }
                        for s, n in zip(sums, norms, strict=True)
                    ]
    return out


def _labels(options: GradientOptions) -> list[str]:
    return [f"gradient-{k}" for k in options.kinds]


SPEC = MethodSpec(
    name="gradient",
    options_type=GradientOptions,
    run=run,
    labels=_labels,
    reserve=lambda scorer, trace, options: 64,
    description="captum gradient attribution (ig, saliency, ixg) on input embeddings, per segment",
    columns={"l2": "float64", "delta": "float64", "steps": "int64", "value_full": "float64",
             "value_baseline": "float64"},
    order=4,
    all_labels=tuple(f"gradient-{k}" for k in KINDS),
    prepare=resolve_target,
    command=ATTRIBUTE,
)
