"""Leave-one-out: how much the answer's log-probability drops when one segment is deleted.

With the attribution target f(S) = log p(Y* | prompt ⊕ reasoning of the segments in S ⊕ E)
(`methods.attribution`):

    loo_k = f(all) − f(all \\ {k})

Positive: the segment helped the model state the reference answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from cotcredit.methods import MethodRows, MethodSpec, TraceContext
from cotcredit.methods.attribution import ATTRIBUTE, TargetOptions, resolve_target, value_function
from cotcredit.options import option


@dataclass(frozen=True)
class LooOptions:
    """Options of leave-one-out (only the shared target)."""

    target: TargetOptions = option(default_factory=TargetOptions, help="What is attributed.")

    def validate(self) -> LooOptions:
        """Check the options (a one-line UserError naming the flag); returns self."""
        self.target.validate()
        return self


def run(ctx: TraceContext, options: LooOptions) -> MethodRows:
    """LOO rows for one trace: score = f(all) − f(all but k), with both values as columns."""
    import numpy as np

    f = value_function(ctx, options.target)
    K = f.K
    masks = np.ones((K + 1, K), dtype=bool)
    masks[np.arange(1, K + 1), np.arange(K)] = False  # row 0: all; row k+1: all but k
    values = f(masks)
    full = float(values[0])
    return {
        "loo": [
            {
                "score": full - float(values[k + 1]),
                "value_full": full,
                "value_without": float(values[k + 1]),
            }
            for k in range(K)
        ]
    }


def reserve(scorer, trace, options: LooOptions) -> int:
    """Context kept free after the trace: E ⊕ Y*, plus room for baseline texts."""
    extra = (
        len(scorer.encode_text(options.target.baseline_text)) if options.target.baseline_text else 0
    )
    return 64 + 16 * extra  # replacements may lengthen the trace a little


SPEC = MethodSpec(
    name="loo",
    options_type=LooOptions,
    run=run,
    labels=lambda options: ["loo"],
    reserve=reserve,
    description="leave-one-out: f(all) − f(all but segment k), f = log p(Y* | reasoning ⊕ E)",
    columns={"value_full": "float64", "value_without": "float64"},
    order=2,
    prepare=resolve_target,
    command=ATTRIBUTE,
)
