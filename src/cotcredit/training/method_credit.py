"""Any registered method as a training credit source (``advantage: method``).

``MethodCredit`` runs one method of the registry (``cotcredit.methods``) on each completion, on
the path ``run_analysis`` takes for a trace: the completion's own ids
(``Scorer.encode_completion``), one forward pass over prompt + reasoning, the segments, then the
method's ``run`` on that context. A segment's reward is the ``score`` of its row; the spans are
the segments' completion tokens. So ``value-head`` (V̂_k − V̂_(k−1) from a fitted head) and
``mc`` with every option of ``mc-baseline`` (``rollouts: auto``, ``first_round: ends``,
``prior``, ``horizon``, ``horizon_lines``) train with nothing written for them::

    advantage: method
    method: {name: mc, options: {rollouts: auto, rollout_budget: 4, first_round: ends}}

The ``mc`` and ``rredcot`` sources of ``training.credit`` are those two methods' batched
estimators; this one scores one completion at a time and reaches every method and option.
Rollouts are keyed by the batch and the row, so each batch draws fresh ones (as ``mc`` does).
A value head reads the current policy's hidden states: it was fitted on the checkpoint it was
fitted on, and drifts from it as the policy trains.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from cotcredit.errors import UserError
from cotcredit.lm import ModelOptions
from cotcredit.methods import RunCache
from cotcredit.training.scoring import OneAtATime, PolicyScorer, prompt_text


def method_options(name: str | None, options: dict[str, Any]):
    """The options of method `name` built from `options` (as ``compare --set`` names them) and
    validated; a ValueError (one line) for an unknown method, key or value."""
    from cotcredit.methods import get_method
    from cotcredit.options import build_options

    if not name:
        raise ValueError("the method credit needs 'method.name' (a registered method, e.g. "
                         "value-head or mc)")
    try:
        spec = get_method(name)
        return build_options(spec.options_type, options, "method.options").validate()
    except UserError as exc:
        raise ValueError(str(exc)) from None


class MethodCredit(OneAtATime, PolicyScorer):
    """Segment rewards from a registered method, scored by the current policy (module doc).

    ``method``: the method's name; ``options``: its options object (``method_options``);
    ``segments``: as in the other sources (a number or "lines"). A completion without reasoning
    before its answer, too long for the context, or whose method gave a non-finite score gets
    None (its plain advantage).
    """

    def __init__(self, model, tokenizer, method: str, options, *, segments: int | str = 8,
                 model_options: ModelOptions | None = None, name: str = "policy"):
        from cotcredit.methods import get_method
        from cotcredit.segmentation import SegmentOptions

        self.spec = get_method(method)
        self.model = model
        self.tokenizer = tokenizer
        self.options = options
        self.segment_options = SegmentOptions(segments=segments).validate()
        self.model_options = model_options or ModelOptions()
        self.name = name
        self.cache = RunCache()  # the run's generator, answer forcing, a value head's file
        self._prepared = None
        self.calls = 0  # completions scored (or tried)
        self.batches = 0
        self.notes: list[str] = []

    def score_batch(self, prompt_ids, completion_ids, examples, outcomes=None):
        """(rewards, spans) or None per completion."""
        import torch

        with torch.no_grad():
            scorer = self.scorer
            if self._prepared is None:  # e.g. the exit string chosen for the model, once
                self._prepared = self.spec.prepare(scorer, self.options)
            out = [self._one(scorer, i, p, c, e)
                   for i, (p, c, e) in enumerate(zip(prompt_ids, completion_ids, examples,
                                                     strict=True))]
        self.calls += len(out)
        self.batches += 1
        return out

    def _one(self, scorer, i: int, p_ids: Sequence[int], c_ids: Sequence[int], example: dict):
        from cotcredit.data.trace import Trace
        from cotcredit.methods import TraceContext
        from cotcredit.segmentation import segment_encoded

        answer = example.get("answer")
        if answer is None or str(answer) == "":
            raise ValueError(f"row {i}: the method credit needs the reference answer")
        # The id keys the rollouts: fresh ones every batch, the same for a rerun.
        trace = Trace(id=f"{self.batches}-{i}", prompt=prompt_text(example), response="",
                      answer=str(answer), solution=example.get("solution") or None,
                      extra={k: v for k, v in example.items() if k == "problem_id"})
        options = self._prepared
        try:
            enc = scorer.encode_completion(trace, p_ids, c_ids,
                                           reserve=self.spec.reserve(scorer, trace, options))
        except UserError:  # no reasoning before the answer, or too long for the context
            return None
        fwd = scorer.forward(enc.ids, keep_cache=True, stats_from=enc.prompt_len)
        seg = segment_encoded(enc, fwd.entropies, self.segment_options)
        refs = (self.spec.references(enc.trace, None, options, self.notes)
                if self.spec.references is not None else None)
        ctx = TraceContext(scorer, enc, fwd, seg, self.notes, references=refs, cache=self.cache)
        label = self.spec.labels(options)[0]
        scores = [float(r["score"]) for r in self.spec.run(ctx, options)[label]]
        fwd.cache = None
        if not scores or not all(math.isfinite(x) for x in scores):
            return None
        return scores, [(s.token_start, s.token_end) for s in seg.segments]
