"""The attribution target shared by leave-one-out, Shapley and gradient attribution:

    f(S) = log p(Y* | prompt ⊕ reasoning with the segments not in S absent ⊕ E)

with E and Y* as in RREDCoT's R̂ (and its answer terminator), so f(all) = R̂_K. An absent
segment's tokens are deleted by offset (or replaced by `baseline_text`) and the kept tokens
follow each other as if the shorter reasoning had been written.

A coalition whose first absent segment is j shares the trace's tokens before segment j, so it is
one `Continuation` on the trace's KV cache: `ValueFunction` scores new coalitions in packed
passes and memoises them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cotcredit.errors import UserError
from cotcredit.lm.encoding import ForcingOptions, resolved
from cotcredit.lm.passes import Continuation
from cotcredit.methods import MethodCommand, TraceContext
from cotcredit.options import check_choices, option

if TYPE_CHECKING:  # numpy and torch load with the model (keeps `--help` fast)
    import numpy as np
    import torch

    from cotcredit.lm import Scorer


#: The page of `cotcredit attribute` (loo, shapley, gradient into one table) in the docs.
PAGE = """Leave-one-out, Shapley values and gradient attribution, on the same segments as every
other method, into one table (`attr.parquet`). Each method's estimate, cost and evidence:
[leave-one-out](../methods/loo.md), [Shapley values](../methods/shapley.md),
[gradient attribution](../methods/gradient.md).

```
cotcredit attribute traces.jsonl --method loo                    # -> attr.parquet
cotcredit attribute traces.jsonl --method loo,shapley,gradient --gradient ig,saliency
```

All attribution methods explain the same scalar, f(S) = log p(Y* | prompt ⊕ reasoning with the
segments outside S removed ⊕ E), with RREDCoT's exit string and answer terminator. A segment is
absent by deleting its tokens (by offset), or replaced by `--baseline-text`.

- `loo`: f(all) − f(all but k); positive means the segment helped the answer.
- `shapley`: segments are players; `--shapley-backend shap|captum`; exact when K ≤
  `--exact-max`, else `--samples` sampled orderings with `--seed`. Exact values sum to
  f(all) − f(none).
- `gradient`: captum on the input embeddings, `--gradient ig,saliency,ixg` (integrated
  gradients with `--steps`; saliency; input × gradient), token attributions summed per segment
  as `score`, their L2 norm as `l2`, IG's convergence `delta`. Rows are labelled
  `gradient-ig`, `gradient-saliency`, `gradient-ixg`.

Coalitions are scored many per forward pass: a perturbed trace shares the original's tokens up
to its first absent segment, so it is a continuation on the trace's KV cache, in the same packed
passes as RREDCoT's probes. The default output is `attr.parquet`.
"""

ATTRIBUTE = MethodCommand(
    name="attribute",
    help="""Attribute f = log p(Y* | prompt + reasoning + E) to the reasoning segments.

A segment is absent by deletion of its tokens (or replacement by --baseline-text). loo:
f(all) - f(all but k), positive = the segment helped the answer. shapley: Shapley values
of the segments (they sum to f(all) - f(none)). gradient: captum attributions on the input
embeddings, summed per segment (signed), with their L2 norm and the IG convergence delta.""",
    default_output="attr.parquet",
    method_help="Comma-separated: loo (f(all) - f(all but k)), shapley (Shapley values), "
    "gradient (captum on input embeddings). All write into one table.",
    default_methods="loo,shapley",
    page=PAGE,
)


@dataclass(frozen=True)
class TargetOptions:
    """What is attributed and what "absent" means (shared by loo, shapley and gradient)."""

    forcing: ForcingOptions = option(default_factory=ForcingOptions, help="Answer forcing.")
    baseline_text: str | None = option(
        None,
        help="Replace an absent segment by this text's tokens instead of deleting it (loo, "
        "shapley).",
    )
    probe_mode: str = option(
        "packed", choices=("packed", "naive"),
        help="packed: perturbed traces as continuations on the trace's KV cache, many per pass; "
        "naive: full passes (for checks).",
    )

    def validate(self) -> TargetOptions:
        """Check the options (a one-line UserError naming the flag); returns self."""
        check_choices(self)
        if self.baseline_text is not None and self.baseline_text == "":
            raise UserError("--baseline-text must not be empty (omit it to delete absent segments)")
        return self


def resolve_target(scorer, options):
    """`prepare` of loo, shapley and gradient: their target's exit string chosen for the run."""
    target = options.target
    return dataclasses.replace(
        options, target=dataclasses.replace(target, forcing=resolved(scorer, target.forcing))
    )


def _as_masks(masks, K: int) -> np.ndarray:
    """Any (n, K) or (K,) array-like of 0/1 (bool, int, float, tensor) -> (n, K) bool array."""
    import numpy as np

    if hasattr(masks, "detach"):  # a torch tensor
        masks = masks.detach().cpu().numpy()
    arr = np.asarray(masks)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != K:
        raise ValueError(f"coalition masks must have shape (n, {K}), got {arr.shape}")
    return arr > 0.5


class ValueFunction:
    """f(S) for coalitions of one trace's segments; call it with an (n, K) 0/1 array.

    Memoised per coalition (LOO and Shapley share a trace's); `requested` counts coalitions
    asked for, `evaluated` the distinct ones computed.
    """

    def __init__(self, ctx: TraceContext, options: TargetOptions | None = None):
        self.ctx = ctx
        self.options = (options or TargetOptions()).validate()
        self.scorer: Scorer = ctx.scorer
        forcing = ctx.forcing(self.options.forcing)
        probe = forcing.answer_probe(ctx.trace.answer, ctx.trace.where)
        enc = ctx.encoded
        self.prompt_ids = list(enc.prompt_ids)
        self.reasoning = list(enc.reasoning_ids)
        self.spans = [(s.token_start, s.token_end) for s in ctx.segmentation.segments]
        self.K = len(self.spans)
        text = self.options.baseline_text
        self.baseline_ids = self.scorer.encode_text(text) if text else []
        if text and not self.baseline_ids:
            raise UserError(f"--baseline-text {text!r} gives no tokens")
        self.tail = list(probe.ids)  # E ⊕ Y*, tokenized together
        self.n_target = len(probe.ids) - probe.span("answer")[0]
        self.terminators = forcing.terminators or None
        self._values: dict[bytes, float] = {}
        self.requested = 0
        self.evaluated = 0
        self._recording: list[set[bytes]] = []

    # ---- the perturbed sequences -----------------------------------------------------------
    def reasoning_ids(self, mask: Sequence[bool]) -> list[int]:
        """Reasoning tokens of a coalition: kept segments, absent ones deleted (or replaced)."""
        out: list[int] = []
        for keep, (a, b) in zip(mask, self.spans, strict=True):
            out += self.reasoning[a:b] if keep else self.baseline_ids
        return out

    def sequence(self, mask: Sequence[bool]) -> tuple[list[int], int]:
        """(prompt ⊕ reasoning of the coalition ⊕ E ⊕ Y*, number of target tokens)."""
        return self.prompt_ids + self.reasoning_ids(mask) + self.tail, self.n_target

    def continuation(self, mask: Sequence[bool]) -> Continuation:
        """The coalition as a continuation of the trace after its first absent segment."""
        mask = [bool(m) for m in mask]
        n_target = self.n_target
        if all(mask):
            ids, prefix = list(self.tail), len(self.prompt_ids) + len(self.reasoning)
        else:
            j = mask.index(False)
            ids = self.reasoning_ids([True] * j + mask[j:])[self.spans[j][0] :] + self.tail
            prefix = len(self.prompt_ids) + self.spans[j][0]
        if prefix + len(ids) > self.scorer.max_context:
            raise UserError(
                f"{self.ctx.trace.where}: a perturbed trace has {prefix + len(ids)} tokens, more "
                f"than the model's context of {self.scorer.max_context} (shorter --baseline-text?)"
            )
        return Continuation(prefix, ids, len(ids) - n_target, self.terminators)

    # ---- evaluation --------------------------------------------------------------------------
    def __call__(self, masks) -> np.ndarray:
        """f for each row of an (n, K) 0/1 array (float64, shape (n,))."""
        import numpy as np

        m = _as_masks(masks, self.K)
        self.requested += len(m)
        keys = [row.tobytes() for row in m]
        for seen in self._recording:
            seen.update(keys)
        new: dict[bytes, np.ndarray] = {}
        for k, row in zip(keys, m, strict=True):
            if k not in self._values and k not in new:
                new[k] = row
        if new:
            rows = list(new.values())
            if self.options.probe_mode == "packed":
                conts = [self.continuation(r) for r in rows]
                if len(self.prompt_ids) < 1:
                    raise UserError(f"{self.ctx.trace.where}: the prompt has no tokens")
                scores = [
                    s.logprob for s in self.scorer.score_continuations(self.ctx.forward, conts)
                ]
            else:
                seqs = [self.sequence(r) for r in rows]
                scores = self.scorer.score_sequences(
                    [s for s, _ in seqs], [t for _, t in seqs], terminators=self.terminators
                )
            for k, v in zip(new, scores, strict=True):
                self._values[k] = float(v)
            self.evaluated += len(new)
        return np.array([self._values[k] for k in keys], dtype=np.float64)

    @contextmanager
    def record(self) -> Iterator[set[bytes]]:
        """Collect the distinct coalitions requested inside the `with` block."""
        seen: set[bytes] = set()
        self._recording.append(seen)
        try:
            yield seen
        finally:
            self._recording = [r for r in self._recording if r is not seen]

    def value(self, mask: Sequence[bool]) -> float:
        """f(S) of one coalition (a 0/1 mask over the K segments)."""
        return float(self([[bool(m) for m in mask]])[0])

    @property
    def full(self) -> float:
        """f(all segments present): log p(Y* | s_K ⊕ E)."""
        return self.value([True] * self.K)

    @property
    def empty(self) -> float:
        """f(no segment present): the prompt (or baselines) alone."""
        return self.value([False] * self.K)


def value_function(ctx: TraceContext, options: TargetOptions | None = None) -> ValueFunction:
    """The trace's value function for these target options, shared by the methods of a run."""
    options = (options or TargetOptions()).validate()
    if options not in ctx.value_functions:
        ctx.value_functions[options] = ValueFunction(ctx, options)
    return ctx.value_functions[options]


class EmbeddingTarget:
    """f(all) as a differentiable function of the reasoning tokens' input embeddings: called
    with (B, n_reasoning, hidden), gives (B,); at the trace's own embeddings it equals
    `ValueFunction.full`."""

    def __init__(self, ctx: TraceContext, options: TargetOptions | None = None):
        options = (options or TargetOptions()).validate()
        self.scorer = scorer = ctx.scorer
        forcing = ctx.forcing(options.forcing)
        probe = forcing.answer_probe(ctx.trace.answer, ctx.trace.where)
        enc = ctx.encoded
        self.prompt = scorer.embed(list(enc.prompt_ids))
        self.reasoning = scorer.embed(list(enc.reasoning_ids))
        self.tail = scorer.embed(probe.ids)
        self.answer = probe.ids[probe.span("answer")[0] :]
        self.terminators = forcing.terminators or None
        self.length = len(self.prompt) + len(self.reasoning) + len(self.tail)
        self.pad = None
        pad_id = scorer.tokenizer.pad_token_id
        if pad_id is not None:
            self.pad = scorer.embed([pad_id])[0]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        B = x.shape[0]
        full = torch.cat(
            [self.prompt.expand(B, -1, -1), x.to(self.prompt.dtype), self.tail.expand(B, -1, -1)],
            dim=1,
        )
        return self.scorer.score_embeddings(full, self.answer, self.terminators)
