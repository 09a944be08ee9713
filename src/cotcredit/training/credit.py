"""Credit sources for training: where each completion's segment rewards come from.

A credit source turns a batch of generated completions into per-segment rewards and the
segments' token spans (half-open, relative to the completion), or None for a completion it has
nothing to say about (that completion keeps its plain GRPO advantage). Every source has the same
method, ``score_batch(prompt_ids, completion_ids, examples, outcomes)``, so the trainer and the
two advantage forms (``advantages``) treat them alike:

- ``grpo``: no source; every token gets the completion's group advantage.
- ``rredcot``: RREDCoT from the current policy (``scoring.PolicySegmentRewards``): value
  differences g_k − g_{k−1} of R̂ (and v̂), no extra generation.
- ``mc`` (``McCredit``): Monte Carlo values at the segment boundaries, VinePPO's estimator.
  V_k is the fraction of ``rollouts`` completions sampled by the current policy from the state
  s_k (prompt + the first k segments) that reach the reference answer (``grade_completion``, as
  the ``correct`` reward grades; a cut-off rollout counts as wrong); V_K, the state after the
  whole reasoning, is the completion's own outcome ζ. Segment k's reward is V_k − V_{k−1}
  (they sum to ζ − V_0). Identical states are rolled out once per batch (the prompt state is
  shared by a whole group, and completions of one prompt often share their first lines), and
  all states of a batch go to the generator in one call. ``max_boundaries`` rolls out at most
  that many evenly spaced boundaries and interpolates V between them (``methods.mc``).
- ``oracle`` (``OracleCredit``): the task's checker. A wrong completion whose checker locates a
  first wrong step gets reward −1 on every line from that step's line to its end and 0 on the
  lines before it (``span="rest"``), or −1 on that line alone and 0 on every other
  (``span="first"``: the change in whether the state can still reach the right answer, a
  value difference; on long chains ``rest`` also penalises right steps and right stops after
  the first error); every other completion (correct, or wrong without a located step) gets
  None, i.e. plain GRPO. It needs no model: lines are cut from the completion's text. The
  positive control: the credit a perfect step checker would give.
- ``method`` (``method_credit.MethodCredit``): any registered method run on each completion
  (``value-head``; ``mc`` with ``rollouts: auto``, ``horizon``...): its rows' scores.
- ``shuffled``: another source's rewards permuted within each completion (the trainer's
  ``shuffle_seed``; ``advantages.shuffled_rewards``): the same spread, the placement lost. The
  negative control.

``credit_source(cfg, model, tokenizer, problems)`` builds the source a ``TrainConfig`` names.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from cotcredit.data.grading import grade_completion
from cotcredit.data.problems import Problem as DataProblem
from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm import ModelOptions, Scorer
from cotcredit.lm.encoding import EncodedTrace, completion_text
from cotcredit.lm.generation import SamplingOptions
from cotcredit.lm.sampling import HFGenerator
from cotcredit.methods.mc import interpolate, scored_boundaries
from cotcredit.segmentation import SegmentOptions, segment_encoded
from cotcredit.training.online import unwrap
from cotcredit.training.scoring import (
    OneAtATime,
    PolicyScorer,
    PolicySegmentRewards,
    prompt_text,
)

SOURCES = ("grpo", "rredcot", "mc", "oracle", "shuffled", "method")
ORACLE_SPANS = ("rest", "first")  # which lines of a wrong completion the oracle's −1 covers
SegmentRewards = tuple[list[float], list[tuple[int, int]]]


# ---- oracle ----------------------------------------------------------------------------------
def line_spans(text: str, token_starts: Sequence[int]) -> list[tuple[int, int]]:
    """Token spans of the lines of `text`: token i belongs to the line its first character is
    on (`token_starts[i]`); the spans tile tokens 0..len(token_starts). Lines are cut as the
    checkers cut them (``str.splitlines``), so a blank line that holds a token is a span of
    its own: a blank first wrong step must not take the right line before it along."""
    n = len(token_starts)
    if n == 0:
        return []
    starts, end = [], 0
    for line in text.splitlines(keepends=True)[:-1]:
        end += len(line)
        starts.append(end)
    spans: list[tuple[int, int]] = []
    begin, line = 0, 0
    for i, char in enumerate(token_starts):
        new_line = line
        while new_line < len(starts) and char >= starts[new_line]:
            new_line += 1
        if new_line != line and i > begin:
            spans.append((begin, i))
            begin = i
        line = new_line
    spans.append((begin, n))
    return spans


Check = Callable[[dict, str], Any]  # (dataset row, response) -> object with correct, error_char


class OracleCredit(OneAtATime):
    """Segment rewards from a checker (see the module docstring): per line of the completion, −1
    from the first wrong step's line on and 0 before it (``span="rest"``), or −1 on the first
    wrong step's line only (``span="first"``), for wrong completions whose first wrong step the
    checker locates; None otherwise.

    ``check(example, response)`` returns an object with ``correct`` (bool) and ``error_char``
    (where the first wrong step starts in ``response``; −1: none), e.g. a bench regime's
    ``StepLabel`` (``regime_check``). ``response`` is the completion's text as the reward
    functions grade it (decoded without special tokens).
    """

    def __init__(self, tokenizer, check: Check, span: str = "rest"):
        if span not in ORACLE_SPANS:
            raise ValueError(f"span must be one of {ORACLE_SPANS}, got {span!r}")
        self.tokenizer = tokenizer
        self.check = check
        self.span = span
        self.calls = 0  # completions looked at
        self.located = 0  # wrong completions whose first wrong step was located

    def score_batch(self, prompt_ids, completion_ids, examples, outcomes=None):
        """(rewards, spans) or None per completion."""
        out: list[SegmentRewards | None] = []
        for p_ids, c_ids, example in zip(prompt_ids, completion_ids, examples, strict=True):
            self.calls += 1
            text, _, starts, _ = completion_text(self.tokenizer, p_ids, c_ids)
            label = self.check(example, text)
            error = int(label.error_char)
            if label.correct or error < 0 or not starts:
                out.append(None)
                continue
            self.located += 1
            spans = line_spans(text, starts)
            first = max(i for i, (s, _) in enumerate(spans) if i == 0 or starts[s] <= error)
            end = len(spans) if self.span == "rest" else first + 1  # lines [first, end) get −1
            out.append(([-1.0 if first <= i < end else 0.0 for i in range(len(spans))], spans))
        return out


def regime_check(regime: str, problems: Sequence[DataProblem]) -> Check:
    """A checker for `OracleCredit` from a bench regime (``cotcredit.bench``): each dataset row
    is found by its ``problem_id`` among `problems` (read with their ``meta`` and ``solutions``
    fields, as the regime wrote them), and checked with the regime's ``check``."""
    from cotcredit.bench.regimes import get_regime
    from cotcredit.bench.regimes.base import Problem

    judge = get_regime(regime)
    by_id = {
        p.id: Problem(id=p.id, prompt=p.prompt, answer=p.answer, solution=p.solution or "",
                      solutions=tuple(p.extra.get("solutions") or ()),
                      meta=dict(p.extra.get("meta") or {}))
        for p in problems
    }
    missing = next((p for p in by_id.values() if not p.meta and regime != "hops"), None)
    if missing is not None:
        raise UserError(
            f"oracle.regime {regime}: problem '{missing.id}' has no 'meta' field; write the "
            "training problems with the regime's generator (cotcredit.bench)"
        )

    def check(example: dict, response: str):
        problem = by_id.get(str(example.get("problem_id")))
        if problem is None:
            raise ValueError(f"oracle: no training problem with id {example.get('problem_id')!r}")
        return judge.check(problem, response)

    return check


# ---- Monte Carlo -----------------------------------------------------------------------------
class McCredit(OneAtATime, PolicyScorer):
    """Monte Carlo segment rewards from the current policy (see the module docstring).

    ``model`` is the policy object the trainer updates (rollouts use its current weights);
    ``segments`` as in RREDCoT (a number or "lines"); ``rollouts`` samples per state;
    ``temperature``, ``top_p``, ``max_new_tokens`` how they are sampled; ``max_boundaries``:
    at most that many boundaries rolled out per completion (``methods.mc.scored_boundaries``;
    None: all); ``seed``: the rollouts' seed (each batch draws fresh ones).
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        segments: int | str = 8,
        rollouts: int = 4,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 256,
        max_boundaries: int | None = None,
        seed: int = 0,
        model_options: ModelOptions | None = None,
        max_batch_tokens: int = 16384,
    ):
        if rollouts < 1:
            raise ValueError(f"rollouts must be >= 1, got {rollouts}")
        self.model = model
        self.tokenizer = tokenizer
        self.segment_options = SegmentOptions(segments=segments).validate()
        self.sampling = dict(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        SamplingOptions(n=rollouts, **self.sampling).validate()
        self.rollouts = rollouts
        self.max_boundaries = max_boundaries
        self.seed = seed
        self.model_options = model_options or ModelOptions()
        self.max_batch_tokens = max_batch_tokens
        self.calls = 0  # completions scored (or tried)
        self.batches = 0
        self.states = 0  # distinct states rolled out
        self.rollouts_sampled = 0
        self.seconds = 0.0

    def _segment(self, scorer: Scorer, encs: list[EncodedTrace]):
        """Segmentations of `encs` (a forward pass for the entropies unless segments is
        'lines', which needs none)."""
        from cotcredit.segmentation import line_segmentation

        if self.segment_options.segments == "lines":
            return [line_segmentation(e) for e in encs]
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        chunks, cur = [], []
        for i in order:
            if cur and (len(cur) + 1) * len(encs[i].ids) > self.max_batch_tokens:
                chunks.append(cur)
                cur = []
            cur.append(i)
        if cur:
            chunks.append(cur)
        found = {}
        for chunk in chunks:
            passes, _ = scorer.forward_batch([encs[i].ids for i in chunk],
                                             [encs[i].prompt_len for i in chunk])
            for i, fwd in zip(chunk, passes, strict=True):
                found[i] = segment_encoded(encs[i], fwd.entropies, self.segment_options)
        return [found[i] for i in range(len(encs))]

    def score_batch(self, prompt_ids, completion_ids, examples, outcomes=None):
        """(rewards, spans) or None (no reasoning before the answer) per completion."""
        import torch

        start = time.perf_counter()
        n = len(prompt_ids)
        outcomes = list(outcomes) if outcomes is not None else [None] * n
        self.calls += n
        with torch.no_grad():
            scorer = self.scorer
            rows: list[tuple[int, EncodedTrace, float]] = []
            for i in range(n):
                example = examples[i]
                answer = example.get("answer")
                if answer is None or str(answer) == "":
                    raise ValueError(f"row {i}: McCredit needs the reference answer")
                trace = Trace(id=str(i), prompt=prompt_text(example), response="",
                              answer=str(answer))
                try:
                    enc = scorer.encode_completion(trace, prompt_ids[i], completion_ids[i])
                except UserError:  # no reasoning before the answer, or too long
                    continue
                zeta = outcomes[i]
                if zeta is None:
                    zeta = 1.0 if grade_completion(enc.trace.response, str(answer)).correct \
                        else 0.0
                rows.append((i, enc, float(zeta)))
            segmentations = self._segment(scorer, [enc for _, enc, _ in rows])
            # Distinct states: (state ids, answer) -> index; each rolled out once.
            states: dict[tuple, int] = {}
            state_ids: list[list[int]] = []
            state_grading: list[tuple[str, str]] = []  # (reasoning prefix text, answer)
            wanted: list[dict[int, int]] = []  # per row: boundary k -> state index
            for (_, enc, _), seg in zip(rows, segmentations, strict=True):
                bounds = seg.boundaries
                K = len(seg.segments)
                picks: dict[int, int] = {}
                for k in scored_boundaries(K, self.max_boundaries):
                    if k == K:
                        continue  # V_K is the completion's own outcome
                    ids = enc.prefix(bounds[k])
                    key = (tuple(ids), enc.trace.answer)
                    if key not in states:
                        states[key] = len(state_ids)
                        state_ids.append(ids)
                        state_grading.append(
                            (enc.trace.response[: enc.token_starts[bounds[k]]], enc.trace.answer))
                    picks[k] = states[key]
                wanted.append(picks)
            values = self._values(state_ids, state_grading)
        out: list[SegmentRewards | None] = [None] * n
        for (i, _, zeta), seg, picks in zip(rows, segmentations, wanted, strict=True):
            K = len(seg.segments)
            if K == 0:
                continue
            V = interpolate(K, {**{k: values[s] for k, s in picks.items()}, K: zeta})
            rewards = [V[k] - V[k - 1] for k in range(1, K + 1)]
            out[i] = (rewards, [(s.token_start, s.token_end) for s in seg.segments])
        self.batches += 1
        self.seconds += time.perf_counter() - start
        return out

    def _values(self, state_ids: list[list[int]], grading: list[tuple[str, str]]) -> list[float]:
        """V of each state: the fraction of its rollouts graded correct (cut-off ones wrong)."""
        if not state_ids:
            return []
        options = SamplingOptions(n=self.rollouts, seed=self.seed, **self.sampling)
        generator = HFGenerator(unwrap(self.model), self.tokenizer)
        # Keyed by the batch and the state: fresh rollouts every batch, the same for a rerun.
        keys = [f"mc-{self.batches}-{j}" for j in range(len(state_ids))]
        completions = generator.generate(state_ids, options, keys=keys)
        self.states += len(state_ids)
        values = []
        for (prefix, answer), cs in zip(grading, completions, strict=True):
            self.rollouts_sampled += len(cs)
            right = sum(
                not c.truncated and bool(grade_completion(c.text, answer, prefix=prefix).correct)
                for c in cs
            )
            values.append(right / len(cs))
        return values


# ---- from a config ---------------------------------------------------------------------------
def credit_source(cfg, model, tokenizer, problems: Sequence[DataProblem], *,
                  temperature: float = 1.0, max_new_tokens: int = 256, name: str = "policy"):
    """The credit source a ``TrainConfig`` names (``advantage``; for ``shuffled`` the source
    ``credit.shuffled`` names: the trainer permutes its rewards), or None for ``grpo``.
    `problems` are the training problems (the oracle looks each completion's problem up by id);
    `temperature` and `max_new_tokens` are the training generation's (Monte Carlo rollouts
    default to them)."""
    from cotcredit.lm import ModelOptions

    source = cfg.credit.shuffled if cfg.advantage == "shuffled" else cfg.advantage
    model_options = ModelOptions(model=cfg.model, chat_template=cfg.chat_template,
                                 system_prompt=cfg.system_prompt)
    if source == "grpo":
        return None
    if source == "rredcot":
        return PolicySegmentRewards(
            model, tokenizer, segments=cfg.credit.segments, options=cfg.rredcot.options(),
            model_options=model_options, name=name,
            terminal_in_weights=cfg.rredcot.terminal_in_weights,
        )
    if source == "mc":
        return McCredit(
            model, tokenizer, segments=cfg.credit.segments, rollouts=cfg.mc.rollouts,
            temperature=cfg.mc.temperature or temperature, top_p=cfg.mc.top_p,
            max_new_tokens=cfg.mc.max_new_tokens or max_new_tokens,
            max_boundaries=cfg.mc.max_boundaries, seed=cfg.seed, model_options=model_options,
        )
    if source == "oracle":
        return OracleCredit(tokenizer, regime_check(cfg.oracle.regime, problems),
                            span=cfg.oracle.span)
    if source == "method":
        from cotcredit.training.method_credit import MethodCredit, method_options

        return MethodCredit(model, tokenizer, cfg.method.name,
                            method_options(cfg.method.name, cfg.method.options),
                            segments=cfg.credit.segments, model_options=model_options, name=name)
    raise ValueError(f"unknown credit source {source!r}; known: {', '.join(SOURCES)}")
