"""Per-token advantages from per-segment rewards: the two forms credit takes in training.

Plain GRPO gives every token of a completion the same advantage ``A`` (the completion's reward,
normalised within its group of ``num_generations``), so the completion as a whole receives
``A · n`` (``n`` = its number of tokens). A credit source (``credit``: RREDCoT, Monte Carlo, an
oracle, or one of them shuffled) gives each segment of a completion a reward ``r_k``; a *form*
turns those into per-token advantages. Both forms below give plain GRPO when the rewards are all
equal, keep the completion's total ``A · n``, and leave tokens outside every segment at ``A``.

Form ``reweight`` (sign-preserving): keep the total and only move it between the reasoning
segments, according to their rewards ``r_k``:

    s    = sign(A)
    e_k  = exp(strength · s · r_k)                           (one weight per segment k)
    c_k  = N · e_k / Σ_j n_j · e_j                           (N = Σ_j n_j, tokens in segments)
    c_k ← floor + (1 − floor) · c_k
    a_t  = A · c_k   for every token t of segment k
    a_t  = A         for every token outside all segments (e.g. the final answer after the
                     reasoning); they count in the sum like any other token.

``n_k`` is the number of tokens of segment k. Segments are half-open token spans ``[start, end)``
relative to the completion (token 0 = first generated token); they must lie inside the
completion and must not overlap; empty spans are allowed and get nothing.

Properties (all tested):

- Sum: ``Σ_t a_t = A · n`` exactly (up to float rounding), because the token-weighted mean of
  ``c_k`` over the segment tokens is 1 (also after mixing in ``floor``). So every TRL loss type
  that sums or averages tokens (``dapo``, ``bnpo``, ``dr_grpo``, ``grpo``) gives the completion the
  same total weight as plain GRPO; only where the weight sits changes.
- Plain GRPO as a special case: one segment, all ``r_k`` equal, ``strength = 0`` or
  ``floor = 1`` give ``a_t = A`` everywhere. The reweighting is continuous in the rewards: nearly
  equal rewards give nearly plain GRPO.
- Signs: ``c_k > 0``, so no token's advantage has the opposite sign of ``A``. This matters
  beyond taste: TRL's clipping, the off-policy mask, SAPO and VESPO all branch on the sign of the
  advantage, and with sign-preserving token advantages they branch exactly as for plain GRPO.
- ``A = 0`` (a group where every completion got the same reward) gives zero everywhere.
- Monotone: for ``A > 0`` a segment with a higher reward gets a larger per-token advantage; for
  ``A < 0`` a segment with a lower (more negative) reward gets a larger share of the penalty.

Why this formula. ``strength`` (β) is the one knob; it acts on the rewards in their own units.
RREDCoT rewards are differences of the policy's probability of stating the reference answer
(``r_k = g_k − g_{k−1}``; in [−1, 1] with ``value: rhat``, up to [−2, 2] with ``both``, where g_k
adds two probability estimates; the formula needs no bound), so ``strength`` is "per unit of
probability": with the
default 3, a segment that raised the success probability by 0.2 more than another gets
``e^0.6 ≈ 1.8×`` its per-token credit, 0.5 more gives ``4.5×``. We did not z-score the rewards
within a completion: that would make the weights scale-free but would blow up noise when the
rewards are nearly equal (and is undefined when they are equal), while the exponential of raw
rewards fades smoothly into plain GRPO when the scorer has nothing to say. Weights are per
token (a segment's total credit grows with its length): a per-segment split would hand a
one-token segment with a high reward an enormous per-token advantage. ``floor`` ∈ [0, 1] is the
fraction of the plain advantage every segment token keeps whatever its reward (0 = pure
reweighting, 1 = plain GRPO); it guards against starving segments when the scorer is noisy.

Two variants change only the rewards the weights are computed from (the formula, the total
``A · n`` and the signs stay):

- ``value_difference_rewards``: weights from ``g_k − g_{k−1}`` alone. The scorer's last reward
  also absorbs the terminal correction ``ζ − g_K``, which on a correct completion with a flat
  ``g`` hands most of the weight to the last segment whatever it says; without it the weights
  say only where the probability moved.
- ``shuffled_rewards``: a control. The same rewards in a random order (seeded, the same for the
  same seed and completion), so the weights keep their spread and lose their placement: if
  credit helps, it must beat this.

Form ``segment-rewards`` (each segment's advantage from its own reward; signs may differ):

    r̄    = Σ_k n_k · r_k / N                                (token-weighted mean reward)
    a_t  = A + c · (r_k − r̄)   for every token t of segment k
    a_t  = A                    for every token outside all segments

``c`` is the factor the group normalisation divided the outcome by (``A = c · (R − mean)``;
``c = 1 / (std + 1e-4)`` with TRL's ``scale_rewards="group"``), so a segment's reward counts in
the outcome's own units: the rewards are value differences (``g_k − g_{k−1}``: a change in the
probability of success), and a segment that raised the success probability by 0.5 more than
the completion's average gets ``0.5 · c`` more advantage per token than ``A``. This is the
advantage of RUDDER and VinePPO (a segment is judged by what it changed, so a right step in a
failed completion can be pushed up and a wrong step in a correct one down), plus the outcome's
group advantage ``A``, which the centred value differences lack (they sum to zero): without it
the form would not reduce to GRPO, and a completion's outcome would reach its tokens only
through the source's terminal correction.

Properties (all tested): all ``r_k`` equal (or one segment) gives ``a_t = A`` exactly, whatever
``c``; ``Σ_t a_t = A · n``; ``a`` grows with ``r_k`` (a segment with a higher reward gets more
advantage, whatever the sign of ``A``); ``A = 0`` gives zero everywhere (a group where every
completion got the same reward carries no signal in either form, as in GRPO). ``strength`` and
``floor`` are options of ``reweight`` only.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np
import torch

MODES = ("grpo", "rredcot")  # "rredcot": per-token advantages from any credit source
FORMS = ("reweight", "segment-rewards")
DEFAULT_FORM = "reweight"
DEFAULT_STRENGTH = 3.0
DEFAULT_FLOOR = 0.0


def value_difference_rewards(g: Sequence[float]) -> list[float]:
    """Segment rewards ``g_k − g_{k−1}`` (k = 1..K) from ``g_0..g_K``, the terminal correction
    kept out (they sum to ``g_K − g_0``, not to ``ζ − g_0``)."""
    values = np.asarray(g, dtype=np.float64).reshape(-1)
    if values.size < 2:
        raise ValueError(f"g needs g_0..g_K with K >= 1, got {list(g)}")
    return np.diff(values).tolist()


def completion_key(completion_ids: Sequence[int]) -> int:
    """A stable 32-bit key of a completion's token ids (the same ids give the same key in
    every process and run; Python's ``hash`` is salted per process)."""
    return zlib.crc32(np.asarray(list(completion_ids), dtype=np.int64).tobytes())


def shuffled_rewards(rewards: Sequence[float], seed: int, key: int) -> list[float]:
    """``rewards`` permuted by a generator seeded with ``(seed, key)``: deterministic per seed
    and completion (``key = completion_key(ids)``), independent of batch order."""
    values = np.asarray(rewards, dtype=np.float64).reshape(-1)
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, int(key) & 0xFFFFFFFF])
    return values[rng.permutation(values.size)].tolist()


def _check_options(mode: str, strength: float, floor: float, form: str = DEFAULT_FORM) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    if not (math.isfinite(strength) and strength >= 0):
        raise ValueError(f"strength must be a finite number >= 0, got {strength!r}")
    if not (0.0 <= floor <= 1.0):
        raise ValueError(f"floor must be in [0, 1], got {floor!r}")


def segment_token_advantages(
    advantage: float,
    segment_rewards: Sequence[float],
    segment_token_spans: Sequence[tuple[int, int]],
    n_tokens: int,
    *,
    mode: str = "rredcot",
    strength: float = DEFAULT_STRENGTH,
    floor: float = DEFAULT_FLOOR,
    form: str = DEFAULT_FORM,
    scale: float = 1.0,
) -> np.ndarray:
    """Per-token advantages (float64 array of length ``n_tokens``) for one completion.

    ``advantage`` is the completion's plain GRPO advantage ``A``; ``segment_rewards[k]`` is the
    reward of the segment covering tokens ``segment_token_spans[k] = (start, end)`` (half-open,
    relative to the completion). Mode ``grpo`` returns ``A`` for every token; mode ``rredcot``
    applies the ``form`` (``reweight`` or ``segment-rewards``, module docstring); ``scale`` is
    the group normalisation's factor ``c`` (``segment-rewards`` only). Raises ``ValueError``
    for inconsistent input (lengths differ, spans outside ``[0, n_tokens]`` or overlapping,
    non-finite values).
    """
    _check_options(mode, strength, floor, form)
    if not (math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    advantage = float(advantage)
    if not math.isfinite(advantage):
        raise ValueError(f"advantage must be finite, got {advantage!r}")
    n_tokens = int(n_tokens)
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    if len(segment_rewards) != len(segment_token_spans):
        raise ValueError(
            f"{len(segment_rewards)} segment rewards but {len(segment_token_spans)} token spans"
        )
    rewards = np.asarray(segment_rewards, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(rewards)):
        raise ValueError(f"segment rewards must be finite, got {list(segment_rewards)}")
    spans = [(int(s), int(e)) for s, e in segment_token_spans]
    previous_end = 0
    for start, end in sorted(spans):
        if not (0 <= start <= end <= n_tokens):
            raise ValueError(
                f"token span ({start}, {end}) is outside the completion [0, {n_tokens}]"
            )
        if start < previous_end:
            raise ValueError(f"token spans overlap: {sorted(spans)}")
        previous_end = max(previous_end, end)

    out = np.full(n_tokens, advantage, dtype=np.float64)
    if mode == "grpo" or advantage == 0.0:
        return out
    lengths = np.array([end - start for start, end in spans], dtype=np.float64)
    n_in_segments = lengths.sum()
    if n_in_segments == 0:
        return out
    if form == "segment-rewards":
        mean = float((lengths * rewards).sum() / n_in_segments)
        for (start, end), reward in zip(spans, rewards, strict=True):
            out[start:end] = advantage + scale * (reward - mean)
        return out
    logits = strength * math.copysign(1.0, advantage) * rewards
    logits = logits - logits[lengths > 0].max()  # stability; empty segments carry no weight
    weights = np.exp(logits)
    multipliers = n_in_segments * weights / float((lengths * weights).sum())
    multipliers = floor + (1.0 - floor) * multipliers
    for (start, end), multiplier in zip(spans, multipliers, strict=True):
        out[start:end] = advantage * multiplier
    return out


def batch_token_advantages(
    advantages: torch.Tensor,
    segment_rewards: Sequence[Sequence[float] | None],
    segment_token_spans: Sequence[Sequence[tuple[int, int]] | None],
    completion_mask: torch.Tensor,
    *,
    mode: str = "rredcot",
    strength: float = DEFAULT_STRENGTH,
    floor: float = DEFAULT_FLOOR,
    form: str = DEFAULT_FORM,
    scales: Sequence[float] | None = None,
) -> torch.Tensor:
    """A ``(B, T)`` tensor of per-token advantages for a right-padded batch of completions.

    ``advantages`` has shape ``(B,)`` (one plain GRPO advantage per completion) and
    ``completion_mask`` shape ``(B, T)``, 1 on the completion's tokens, which must come first in
    the row (right padding), 0 on padding. Row ``i`` is ``segment_token_advantages`` of
    completion ``i`` with ``n_tokens = completion_mask[i].sum()``, padding positions are 0. A
    row whose rewards or spans are ``None`` (no segmentation available) gets the plain
    advantage on every real token; a row without real tokens (e.g. a truncated completion that
    TRL masked out) is all zeros and its spans are not looked at. ``form`` and ``scales`` (one
    group factor ``c`` per completion; ``segment-rewards`` needs them) as in
    ``segment_token_advantages``. The result has the dtype and device of ``advantages``.
    """
    _check_options(mode, strength, floor, form)
    if form == "segment-rewards" and mode != "grpo" and scales is None:
        raise ValueError("form 'segment-rewards' needs the group scale of every completion")
    if advantages.dim() != 1 or completion_mask.dim() != 2:
        raise ValueError(
            f"expected advantages (B,) and completion_mask (B, T), got {tuple(advantages.shape)} "
            f"and {tuple(completion_mask.shape)}"
        )
    batch, width = completion_mask.shape
    if (
        advantages.shape[0] != batch
        or len(segment_rewards) != batch
        or len(segment_token_spans) != batch
        or (scales is not None and len(scales) != batch)
    ):
        raise ValueError(
            f"batch sizes differ: advantages {advantages.shape[0]}, completion_mask {batch}, "
            f"segment_rewards {len(segment_rewards)}, segment_token_spans {len(segment_token_spans)}"
        )
    mask = completion_mask.detach().to("cpu").bool()
    lengths = mask.sum(dim=1).tolist()
    plain = advantages.detach().to("cpu", torch.float64).tolist()
    out = np.zeros((batch, width), dtype=np.float64)
    for i in range(batch):
        n = int(lengths[i])
        if n == 0:
            continue
        if not bool(mask[i, :n].all()):
            raise ValueError(f"completion_mask row {i} is not right-padded (1s first, then 0s)")
        rewards, spans = segment_rewards[i], segment_token_spans[i]
        if rewards is None or spans is None:
            out[i, :n] = plain[i]
            continue
        try:
            out[i, :n] = segment_token_advantages(
                plain[i], rewards, spans, n, mode=mode, strength=strength, floor=floor,
                form=form, scale=float(scales[i]) if scales is not None else 1.0,
            )
        except ValueError as exc:
            raise ValueError(f"row {i}: {exc}") from None
    return torch.from_numpy(out).to(device=advantages.device, dtype=advantages.dtype)


def group_scales(
    advantages: Sequence[float], rewards: Sequence[float], group_size: int, offset: int = 0
) -> list[float]:
    """The factor ``c_i`` by which each completion's outcome was normalised: ``A_i = c_i ·
    (R_i − mean of its group)``, so ``c_i = A_i / (R_i − mean)`` whatever the scaling was
    (per group, per batch, none). ``advantages`` are the completions' GRPO advantages,
    ``rewards`` the totals of every completion of the step (all processes, NaN for an
    unscorable one, left out of its group's mean), in groups of ``group_size`` consecutive
    rows; ``advantages[i]`` belongs to ``rewards[offset + i]``. A completion whose reward equals
    its group's mean (``A = 0``) gets 0."""
    totals = np.asarray(rewards, dtype=np.float64).reshape(-1)
    if group_size < 1 or totals.size % group_size:
        raise ValueError(f"{totals.size} rewards do not form groups of {group_size}")
    groups = totals.reshape(-1, group_size)
    counts = (~np.isnan(groups)).sum(axis=1)
    sums = np.nansum(groups, axis=1)
    means = np.repeat(np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), group_size)
    out = []
    for i, a in enumerate(advantages):
        j = offset + i
        gap = totals[j] - means[j]
        out.append(float(a) / gap if np.isfinite(gap) and abs(gap) > 1e-12 and a else 0.0)
    return out
