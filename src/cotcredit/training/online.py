"""RREDCoT segment credit for freshly generated completions, in batches, inside any trainer.

``OnlineRredcot`` is built once from the policy (any transformers ``PreTrainedModel``; a model
wrapped by DDP/DeepSpeed/``torch.compile`` is unwrapped, a PEFT model is scored with its
adapters) and its tokenizer. Called on a batch of (prompt ids, completion ids, reference answer,
optional reference solution, optional outcome), it returns per completion the segments' token
spans (half-open, relative to the completion: token 0 is the first generated token) and their
rewards. ``token_advantages`` (the same function ``cotcredit train`` uses) turns them and one
plain advantage per completion into a (B, T) tensor of per-token advantages.

Per completion it runs what ``cotcredit redistribute`` runs on the same text, through the same
functions: ``Scorer.encode_completion`` (the completion's own ids, its reasoning cut by the rule
of ``cotcredit.lm.encoding``), a forward pass over prompt + reasoning, ``segment_encoded``,
``methods.rredcot.build_probes`` and ``methods.rredcot.combine`` (R̂, v̂ and g at every boundary;
``estimate`` is the two around one trace's probes) and ``redistribute_rewards``.
The outcome ζ is the ``outcome`` given for the row (a trainer's reward), else the completion's
graded correctness (math-verify against the reference answer); the rewards sum to ζ − g_0
(``sum_to="advantage"``, the default here) or to ζ (``"return"``), checked for every row.

Batched for real: the completions of a batch (in micro-batches of at most ``max_batch_tokens``
padded tokens) share one right-padded forward pass, and the probes of all of them share packed
passes on that pass's KV cache (``Scorer.forward_batch``, ``Scorer.score_continuation_batch``);
then each completion's scores are combined on their own. Out-of-memory halves the micro-batch
(``lm.backoff``; one completion then takes the single-trace path). The numbers equal one
completion at a time up to float rounding (tests/training/test_online.py checks 1e-5).

Errors: a batch whose lists differ in length, a row without a reference answer, a completion
without reasoning before its final answer (with ``on_unscorable="raise"``, the default), one
that does not fit the context, or a model whose output head is not reproduced: one
``CompletionError`` (a ``UserError`` and a ``ValueError``) saying which row and why, never a
wrong number. With ``on_unscorable="skip"`` unscorable rows give ``None`` (a trainer then keeps
their plain advantage).

Stability: ``OnlineRredcot``, ``CompletionCredit``, ``CompletionError`` and ``token_advantages``
(exported as ``cotcredit.OnlineRredcot`` etc.) keep their signatures within a minor version.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from cotcredit.data.grading import grade_completion
from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm import ModelOptions, Scorer, TracePass
from cotcredit.lm.backoff import BatchSize, run_batched
from cotcredit.lm.encoding import EncodedTrace
from cotcredit.methods import RunCache, TraceContext
from cotcredit.methods.rredcot import (
    BoundaryEstimates,
    RredcotOptions,
    RredcotProbes,
    build_probes,
    combine,
    estimate,
    redistribute_rewards,
    terminal_value,
)
from cotcredit.methods.rredcot import reserve as rredcot_reserve
from cotcredit.segmentation import Segmentation, SegmentOptions, segment_encoded
from cotcredit.training.advantages import batch_token_advantages as token_advantages

__all__ = ["CompletionCredit", "CompletionError", "OnlineRredcot", "token_advantages", "unwrap"]

ONLINE_OPTIONS = RredcotOptions(value="rhat", sum_to="advantage")  # what `cotcredit train` uses


class CompletionError(UserError, ValueError):
    """Bad input for one row of a batch (or for the whole batch: ``row`` is None)."""

    def __init__(self, message: str, row: int | None = None):
        super().__init__(message if row is None else f"row {row}: {message}")
        self.row = row


@dataclass
class CompletionCredit:
    """RREDCoT credit of one completion.

    ``spans[k] = (start, end)``: segment k's completion tokens (they tile the reasoning; the
    final-answer tokens after it belong to no segment). ``rewards[k]``: its reward; Σ rewards =
    ``total`` = ζ − g_0 (``sum_to="advantage"``) or ζ (``"return"``). ``g``: g_0..g_K.
    """

    spans: list[tuple[int, int]]
    rewards: list[float]
    outcome: float
    g: list[float]
    total: float
    encoded: EncodedTrace = dataclasses.field(repr=False)


def unwrap(model):
    """The module that holds the weights: through DDP/DeepSpeed (``.module``) and
    ``torch.compile`` (``._orig_mod``) wrappers; a PEFT model is kept (its adapters score)."""
    seen = 0
    while seen < 8:
        seen += 1
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, torch.nn.Module):
            model = inner
            continue
        inner = getattr(model, "module", None)
        if isinstance(inner, torch.nn.Module) and not hasattr(model, "config"):
            model = inner
            continue
        break
    if not hasattr(model, "config") or not hasattr(model, "get_output_embeddings"):
        raise TypeError(
            f"{type(model).__name__} is not a transformers causal LM (no config / output head); "
            "pass the policy's PreTrainedModel (or a PEFT model around it)"
        )
    return model


@dataclass
class _Row:
    index: int
    enc: EncodedTrace
    outcome: float
    references: list[str] = dataclasses.field(default_factory=list)  # v̂'s reference texts
    forward: TracePass | None = None
    segmentation: Segmentation | None = None
    estimates: BoundaryEstimates | None = None  # once its probes are scored


class OnlineRredcot:
    """RREDCoT segment rewards of generated completions, scored by the policy (see module doc).

    ``model``: the policy (scored with its current weights at every call: the object a trainer
    updates in place); ``options``: RREDCoT options (default: R̂ alone, rewards summing to
    ζ − g_0); ``segments``: target segments per completion, ``"lines"`` (one per
    reasoning line) or ``SegmentOptions``;
    ``model_options``: chat template / system prompt used to render a text prompt (ids given to
    the call are used as they are); ``on_unscorable``: ``"raise"`` or ``"skip"`` (None for
    completions without reasoning or too long for the context); ``max_batch_tokens``: padded
    tokens per shared forward pass.
    """

    def __init__(
        self,
        model,
        tokenizer,
        options: RredcotOptions | None = None,
        *,
        segments: int | str | SegmentOptions = 8,
        model_options: ModelOptions | None = None,
        on_unscorable: str = "raise",
        max_batch_tokens: int = 16384,
        name: str = "policy",
    ):
        if on_unscorable not in ("raise", "skip"):
            raise ValueError(f"on_unscorable must be 'raise' or 'skip', got {on_unscorable!r}")
        if max_batch_tokens < 1:
            raise ValueError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.options = (options or ONLINE_OPTIONS).validate()
        self.segment_options = (
            segments if isinstance(segments, SegmentOptions) else SegmentOptions(segments=segments)
        ).validate()
        self.model_options = model_options or ModelOptions()
        self.on_unscorable = on_unscorable
        self.max_batch_tokens = max_batch_tokens
        self.name = name
        self._scorer: Scorer | None = None
        self.cache = RunCache()  # what its calls build once (the answer forcing)
        # Completions scored with value 'both' that had no reference solution: their g is R̂
        # alone (v̂ needs the solution). Warned once, counted always: a caller that forgets to
        # pass solutions would otherwise get R̂ credit labelled as R̂ + v̂.
        self.without_solution = 0
        # Rows of the last call skipped because a probe could not be built (on_unscorable
        # "skip"): {row: message}. Rows without reasoning are skipped silently.
        self.last_errors: dict[int, str] = {}

    @property
    def scorer(self) -> Scorer:
        """A ``Scorer`` on the (unwrapped) policy, made at first use and kept with its caches;
        device and dtype follow the model (a trainer may move it after construction)."""
        model = unwrap(self.model)
        if self._scorer is None or self._scorer.model is not model:
            self._scorer = Scorer(model, self.tokenizer, self.model_options, name=self.name)
        scorer = self._scorer
        param = next(model.parameters())
        if scorer.device != param.device:
            fresh = Scorer(model, self.tokenizer, self.model_options, name=self.name)
            scorer.query_budget = fresh.query_budget
        scorer.device, scorer.dtype = param.device, param.dtype
        return scorer

    # ---- the call ------------------------------------------------------------------------
    def __call__(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        answers: Sequence[str],
        solutions: Sequence[str | Sequence[str] | None] | None = None,
        outcomes: Sequence[float | None] | None = None,
        prompts: Sequence[str] | None = None,
    ) -> list[CompletionCredit | None]:
        """Segment credit of each completion of the batch (see the class doc).

        All sequences have one entry per completion; ``prompt_ids[i]`` are the ids the policy
        was given (no padding), ``completion_ids[i]`` what it generated (trailing EOS/padding
        are dropped), ``answers[i]`` the reference final answer, ``solutions[i]`` an optional
        reference solution or a list of them (used by v̂; ``options.references`` says which:
        ``solution`` the first, ``solutions`` all, ``siblings`` also the other completions of
        the batch given the same prompt ids whose outcome is at least 0.5, as in a GRPO
        group), ``outcomes[i]`` an optional outcome ζ (e.g. the
        trainer's reward; None: graded correctness), ``prompts[i]`` the prompt's text (only for
        messages; optional).
        """
        n = len(prompt_ids)
        sizes = {"prompt_ids": n, "completion_ids": len(completion_ids), "answers": len(answers)}
        for key, seq in (("solutions", solutions), ("outcomes", outcomes), ("prompts", prompts)):
            if seq is not None:
                sizes[key] = len(seq)
        if len(set(sizes.values())) > 1:
            raise CompletionError(
                "batch sizes differ: " + ", ".join(f"{k} {v}" for k, v in sizes.items())
            )
        self.last_errors = {}
        with torch.no_grad():
            scorer = self.scorer
            scorer.check_head()  # a model we cannot reproduce fails before any row
            rows: list[_Row] = []
            results: list[CompletionCredit | None] = [None] * n
            for i in range(n):
                row = self._encode(
                    scorer, i, prompt_ids[i], completion_ids[i], answers[i],
                    solutions[i] if solutions is not None else None,
                    outcomes[i] if outcomes is not None else None,
                    prompts[i] if prompts is not None else None,
                )
                if row is not None:
                    rows.append(row)
            if self.options.references == "siblings":
                self._add_siblings(scorer, rows, prompt_ids)
                self._count_without_references(sum(not r.references for r in rows))
            for batch in self._micro_batches(rows):
                self._score_rows(scorer, batch)
            for row in rows:
                if row.estimates is not None:
                    results[row.index] = self._credit(row)
        return results

    def score_one(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int], answer: str,
        solution: str | Sequence[str] | None = None, outcome: float | None = None,
    ) -> CompletionCredit | None:
        """One completion (the same numbers as a batch holding it)."""
        return self([prompt_ids], [completion_ids], [answer], [solution], [outcome])[0]

    # ---- steps ---------------------------------------------------------------------------
    def _encode(self, scorer, i, p_ids, c_ids, answer, solution, outcome, prompt) -> _Row | None:
        if answer is None or str(answer) == "":
            raise CompletionError("no reference answer", i)
        vocab = scorer.model.get_input_embeddings().num_embeddings
        checked = []
        for what, ids in (("prompt", p_ids), ("completion", c_ids)):
            try:
                ids = [operator.index(t) for t in ids]  # ints, numpy ints, 0-d tensors
            except TypeError:
                raise CompletionError(f"{what} ids must be integer token ids", i) from None
            bad = next((t for t in ids if not 0 <= t < vocab), None)
            if bad is not None:
                raise CompletionError(f"{what} token id {bad!r} is not in the vocabulary", i)
            checked.append(ids)
        p_ids, c_ids = checked
        if not p_ids:
            raise CompletionError("empty prompt_ids", i)
        if outcome is not None and not math.isfinite(float(outcome)):
            raise CompletionError(f"outcome must be finite, got {outcome!r}", i)
        given = ([solution] if isinstance(solution, str) or solution is None
                 else [str(s) for s in solution])
        given = [s for s in given if s]
        if self.options.references == "solution":
            given = given[:1]
        trace = Trace(id=str(i), prompt=str(prompt or ""), response="", answer=str(answer),
                      solution=given[0] if given else None)
        siblings = self.options.references == "siblings"
        if self.options.value == "vhat" and not given and not siblings:
            raise CompletionError("value 'vhat' needs a reference solution", i)
        if not given and not siblings:  # with siblings: counted once they are known
            self._count_without_references(1)
        try:
            enc = scorer.encode_completion(
                trace, p_ids, c_ids,
                reserve=rredcot_reserve(scorer, trace, self.options, references=given),
            )
        except UserError as e:  # no reasoning before the answer, or too long for the context
            if self.on_unscorable == "skip":
                return None
            raise CompletionError(str(e), i) from None
        zeta = (
            float(outcome) if outcome is not None
            else 1.0 if grade_completion(enc.trace.response, trace.answer).correct else 0.0
        )
        return _Row(i, enc, zeta, given)

    def _count_without_references(self, n: int) -> None:
        """Count `n` completions whose v̂ has no reference under value 'both' (g from R̂
        alone), warning at the first."""
        if self.options.value != "both" or not n:
            return
        if not self.without_solution:
            warnings.warn(
                "value 'both' without a reference solution: such completions get g from "
                "R̂ alone (pass solutions=... for v̂; count in .without_solution)",
                stacklevel=4,
            )
        self.without_solution += n

    def _add_siblings(self, scorer: Scorer, rows: list[_Row], prompt_ids) -> None:
        """`references="siblings"`: each row also follows the other completions of the batch
        given the same prompt ids whose outcome is at least 0.5 (those whose probe would not
        fit the context left out)."""
        groups: dict[tuple[int, ...], list[_Row]] = {}
        for row in rows:
            groups.setdefault(tuple(prompt_ids[row.index]), []).append(row)
        answer_len = {}
        for group in groups.values():
            right = [r for r in group if r.outcome >= 0.5]
            for row in group:
                room = scorer.max_context - len(row.enc.ids) - 64
                key = row.enc.trace.answer
                if key not in answer_len:
                    answer_len[key] = len(scorer.encode_text(key))
                for other in right:
                    text = other.enc.trace.response
                    if other is not row and (
                            len(scorer.encode_text(text)) + answer_len[key] <= room):
                        row.references.append(text)
            for row in group:
                if not row.references and self.options.value == "vhat":
                    raise CompletionError("value 'vhat' needs a reference solution (none given, "
                                          "no sibling reached the answer)", row.index)

    def _micro_batches(self, rows: list[_Row]) -> list[list[_Row]]:
        """Rows by length (less padding), cut so rows x longest ≤ max_batch_tokens."""
        batches: list[list[_Row]] = []
        cur: list[_Row] = []
        for row in sorted(rows, key=lambda r: len(r.enc.ids)):
            width = len(row.enc.ids)  # sorted: the newest row is the longest
            if cur and (len(cur) + 1) * width > self.max_batch_tokens:
                batches.append(cur)
                cur = []
            cur.append(row)
        if cur:
            batches.append(cur)
        return batches

    def _score_rows(self, scorer: Scorer, rows: list[_Row]) -> None:
        """Forward, segmentation and every probe of `rows`, sharing passes; halves the batch on
        out-of-memory (one row then takes the single-trace path with its own memory handling)."""
        run_batched(rows, lambda batch: self._score_together(scorer, batch), BatchSize(len(rows)),
                    alone=lambda batch: self._score_alone(scorer, batch[0]))

    def _score_together(self, scorer: Scorer, rows: Sequence[_Row]) -> list[None]:
        """The rows' forward passes in one batch, then every row's probes in shared packed
        passes, then each row's R̂, v̂, g (`rredcot.build_probes`, `rredcot.combine`)."""
        passes, cache = scorer.forward_batch(
            [r.enc.ids for r in rows], [r.enc.prompt_len for r in rows]
        )
        asked: list[tuple[_Row, RredcotProbes]] = []
        for row, fwd in zip(rows, passes, strict=True):
            row.forward = fwd
            row.segmentation = segment_encoded(row.enc, fwd.entropies, self.segment_options)
            try:
                asked.append((row, build_probes(self._context(scorer, row), self.options,
                                                row.references)))
            except UserError as e:  # e.g. an exit string this completion cannot take
                self._unscorable(row, e)
        scores = scorer.score_continuation_batch(
            cache, [r.enc.ids for r, _ in asked], [p.continuations for _, p in asked]
        )
        for (row, probes), s in zip(asked, scores, strict=True):
            row.estimates = combine(probes, s, self.options)
        return [None] * len(rows)

    def _score_alone(self, scorer: Scorer, row: _Row) -> list[None]:
        row.forward = scorer.forward(row.enc.ids, stats_from=row.enc.prompt_len)
        row.segmentation = segment_encoded(row.enc, row.forward.entropies, self.segment_options)
        try:
            row.estimates = estimate(self._context(scorer, row), self.options, row.references)
        except UserError as e:
            self._unscorable(row, e)
        row.forward.cache = None
        return [None]

    def _context(self, scorer: Scorer, row: _Row) -> TraceContext:
        return TraceContext(scorer, row.enc, row.forward, row.segmentation, cache=self.cache)

    def _unscorable(self, row: _Row, error: UserError) -> None:
        if self.on_unscorable == "raise":
            raise CompletionError(str(error), row.index) from None
        self.last_errors[row.index] = str(error)

    def _credit(self, row: _Row) -> CompletionCredit:
        est = row.estimates
        o = self.options
        terminal = terminal_value(row.outcome, est.g, o.space, o.log_floor)
        rewards, _ = redistribute_rewards(est.g, terminal, o.sum_to)
        total = terminal - est.g[0] if o.sum_to == "advantage" else terminal
        scale = max(1.0, abs(total), *(abs(r) for r in rewards))
        if not math.isclose(math.fsum(rewards), total, abs_tol=1e-9 * scale * len(rewards)):
            raise CompletionError(
                f"segment rewards sum to {math.fsum(rewards)!r}, not the outcome's {total!r}",
                row.index,
            )
        spans = [(s.token_start, s.token_end) for s in row.segmentation.segments]
        return CompletionCredit(spans, list(rewards), row.outcome, list(est.g), total, row.enc)
