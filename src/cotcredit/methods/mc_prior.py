"""Cheap priors for adaptive Monte Carlo (`mc-baseline --rollouts auto --prior NAME`): a credit
per segment, computed without rollouts, that says where the first drop in value is likely.

The search for the first drop (`cotcredit.methods.mc_adaptive`) ranks the segments by it
(lowest first) and asks first about the boundaries that split the ranked weight evenly. A prior
only moves where rollouts go; the values are the rollouts' as always.

    rhat     R̂_k = p(Y* | s_k ⊕ E): credit exp(R̂_k) − exp(R̂_(k−1)) (RREDCoT with --value rhat)
    rredcot  g_k = R̂_k + v̂_k with RREDCoT's default references: credit g_k − g_(k−1)
    entropy  minus the segment's mean token entropy (the model's own hesitation)
    paths    −1 on the segment where the reasoning leaves the last of its known paths (the
             `solution` and the listed `solutions`: the first line at which the prefix follows
             none of them), 0 elsewhere; no prior where the trace lists no path

Cost: rhat and rredcot run RREDCoT's probes on the trace's forward pass (counted in the run's
forward tokens); entropy reads that pass; paths reads text only. Whatever reads the trace pass
counts it (`TraceContext.extra_cost`), since Monte Carlo alone would not run it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from cotcredit.data.trace import first_departure

if TYPE_CHECKING:
    from cotcredit.lm.encoding import ForcingOptions
    from cotcredit.methods import TraceContext

#: The priors `--prior` knows ("none": the search asks for the middle boundary).
PRIORS = ("none", "rhat", "rredcot", "entropy", "paths")
#: The priors that read the trace's forward pass.
READS_TRACE_PASS = ("rhat", "rredcot", "entropy")


def prior_credits(ctx: TraceContext, prior: str, forcing: ForcingOptions) -> list[float] | None:
    """The prior's credit of every segment of the trace (lower: a drop is likelier there), or
    None (no prior, or none available for this trace)."""
    segments = ctx.segmentation.segments
    if prior == "none":
        return None
    if prior in ("rhat", "rredcot"):
        return _rredcot_credits(ctx, "rhat" if prior == "rhat" else "both", forcing)
    if prior == "entropy":
        return [-float(s.mean_entropy) for s in segments]
    if prior == "paths":
        return paths_credits(ctx.trace, [(s.char_start, s.char_end) for s in segments])
    raise ValueError(f"unknown prior {prior!r}")


def follows_paths(options) -> bool:
    """Whether an mc run's prior reads known paths (the rredcot prior of `--rollouts auto`)."""
    return options.adaptive and options.prior == "rredcot"


def prior_references(trace, siblings, options, notes: list[str]) -> list[list[str]]:
    """The known paths the rredcot prior's v̂ follows (RREDCoT's default `--references`,
    siblings from the run's input); none for the other priors. `MethodSpec.references` of mc."""
    if not follows_paths(options):
        return []
    from cotcredit.methods.rredcot import RredcotOptions, trace_references

    return trace_references(trace, RredcotOptions(), siblings, notes)


def paths_credits(trace, spans: list[tuple[int, int]]) -> list[float] | None:
    """−1 on the segment (character span of the response) holding the point where the reasoning
    leaves the last of the trace's known paths, 0 elsewhere; None without a listed path or when
    it follows one throughout."""
    from cotcredit.methods.rredcot.probes import listed_solutions

    paths = [p for p in dict.fromkeys([trace.solution or "", *listed_solutions(trace)]) if p]
    if not paths:
        return None
    offsets = [first_departure(trace.response, p) for p in paths]
    if min(offsets) < 0:  # it follows one of them throughout
        return None
    at = max(offsets)
    credits = [-1.0 if a <= at < b else 0.0 for a, b in spans]
    return credits if any(credits) else None


def _rredcot_credits(ctx: TraceContext, value: str, forcing: ForcingOptions) -> list[float]:
    """g_k − g_(k−1) of RREDCoT (through the registry: its default options but `value`)."""
    from cotcredit.methods import get_method

    spec = get_method("rredcot")
    options = dataclasses.replace(spec.options_type(), value=value, forcing=forcing)
    rows = spec.run(ctx, spec.prepare(ctx.scorer, options))["rredcot"]
    return [float(r["g_after"]) - float(r["g_before"]) for r in rows]
