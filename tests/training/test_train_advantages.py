"""Per-token advantages from segment rewards: sums, signs, reductions to plain GRPO, padding."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cotcredit.training.advantages import batch_token_advantages, segment_token_advantages

SPANS = [(0, 3), (3, 7), (7, 12)]  # 12 reasoning tokens, then 4 answer tokens
REWARDS = [0.1, 0.6, -0.2]
N = 16


@pytest.mark.parametrize("advantage", [1.3, -0.7, 0.01, -2.5])
@pytest.mark.parametrize("strength", [0.5, 3.0, 20.0])
@pytest.mark.parametrize("floor", [0.0, 0.3])
def test_sum_is_plain_grpo_total(advantage, strength, floor):
    a = segment_token_advantages(advantage, REWARDS, SPANS, N, strength=strength, floor=floor)
    assert a.shape == (N,)
    assert a.sum() == pytest.approx(advantage * N, rel=1e-12)


@pytest.mark.parametrize("advantage", [1.3, -0.7])
def test_signs_never_flip(advantage):
    a = segment_token_advantages(advantage, [5.0, -5.0, 0.0], SPANS, N, strength=50.0)
    assert np.all(np.sign(a) == np.sign(advantage))


def test_tokens_outside_segments_get_plain_advantage():
    a = segment_token_advantages(0.8, REWARDS, SPANS, N)
    assert np.all(a[12:] == 0.8)
    a = segment_token_advantages(0.8, [0.1, 0.9], [(2, 5), (9, 11)], N)
    assert np.all(a[[0, 1, 5, 6, 7, 8, 11, 12, 13, 14, 15]] == 0.8)


@pytest.mark.parametrize("advantage", [1.3, -0.7])
def test_single_segment_is_plain_grpo(advantage):
    a = segment_token_advantages(advantage, [0.42], [(0, 10)], N)
    np.testing.assert_allclose(a, advantage, rtol=1e-12)


@pytest.mark.parametrize("advantage", [1.3, -0.7])
def test_equal_rewards_are_plain_grpo(advantage):
    a = segment_token_advantages(advantage, [0.3, 0.3, 0.3], SPANS, N, strength=10.0)
    np.testing.assert_allclose(a, advantage, rtol=1e-12)


def test_zero_strength_floor_one_and_grpo_mode_are_plain_grpo():
    for kwargs in ({"strength": 0.0}, {"floor": 1.0}, {"mode": "grpo"}):
        a = segment_token_advantages(1.5, REWARDS, SPANS, N, **kwargs)
        np.testing.assert_allclose(a, 1.5, rtol=1e-12)


def test_zero_advantage_is_all_zero():
    a = segment_token_advantages(0.0, REWARDS, SPANS, N, strength=10.0)
    assert np.all(a == 0.0)


def test_monotone_positive_advantage():
    a = segment_token_advantages(1.0, REWARDS, SPANS, N)
    per_segment = [a[s] for s, _ in SPANS]  # constant within a segment
    order = np.argsort(REWARDS)  # low to high reward
    assert np.all(np.diff(np.array(per_segment)[order]) > 0)
    assert a[3] > 1.0 > a[7]  # best segment above plain, worst below


def test_monotone_negative_advantage_penalises_bad_segments_more():
    a = segment_token_advantages(-1.0, REWARDS, SPANS, N)
    penalty = [-a[s] for s, _ in SPANS]
    order = np.argsort(REWARDS)
    assert np.all(np.diff(np.array(penalty)[order]) < 0)  # lower reward, larger penalty


def test_floor_is_a_lower_bound_on_the_share():
    a = segment_token_advantages(2.0, [10.0, -10.0, 0.0], SPANS, N, strength=50.0, floor=0.25)
    assert a[SPANS[1][0]] >= 0.25 * 2.0 - 1e-12


def test_empty_spans_and_no_segments():
    a = segment_token_advantages(1.0, [0.9, 0.1], [(2, 2), (2, 6)], N)
    np.testing.assert_allclose(a, 1.0)  # one non-empty segment
    np.testing.assert_allclose(segment_token_advantages(1.0, [], [], N), 1.0)
    assert segment_token_advantages(1.0, [], [], 0).shape == (0,)


def test_unsorted_spans_are_matched_to_their_rewards():
    a = segment_token_advantages(1.0, [-0.2, 0.6, 0.1], [SPANS[2], SPANS[1], SPANS[0]], N)
    b = segment_token_advantages(1.0, REWARDS, SPANS, N)
    np.testing.assert_allclose(a, b)


def test_extreme_rewards_do_not_overflow():
    a = segment_token_advantages(1.0, [1e6, -1e6, 0.0], SPANS, N, strength=100.0)
    assert np.all(np.isfinite(a))
    assert a.sum() == pytest.approx(N)


@pytest.mark.parametrize(
    ("rewards", "spans", "n", "match"),
    [
        ([0.1], [(0, 3), (3, 5)], 8, "2 token spans"),
        ([0.1, 0.2], [(0, 4), (3, 5)], 8, "overlap"),
        ([0.1], [(5, 9)], 8, "outside"),
        ([0.1], [(4, 2)], 8, "outside"),
        ([float("nan")], [(0, 2)], 8, "finite"),
    ],
)
def test_bad_input_raises(rewards, spans, n, match):
    with pytest.raises(ValueError, match=match):
        segment_token_advantages(1.0, rewards, spans, n)


@pytest.mark.parametrize(
    "kwargs", [{"mode": "rudder"}, {"strength": -1.0}, {"floor": 1.5}, {"strength": float("inf")}]
)
def test_bad_options_raise(kwargs):
    with pytest.raises(ValueError):
        segment_token_advantages(1.0, REWARDS, SPANS, N, **kwargs)


def _mask(lengths, width):
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()


def test_batch_builds_rows_and_keeps_padding_zero():
    advantages = torch.tensor([1.0, -0.5, 0.0, 2.0, 0.7])
    lengths = [16, 10, 12, 0, 6]
    mask = _mask(lengths, 20)
    rewards = [REWARDS, [0.2, 0.8], REWARDS, [0.5], None]
    spans = [SPANS, [(0, 5), (5, 10)], SPANS, [(0, 4)], None]
    out = batch_token_advantages(advantages, rewards, spans, mask)
    assert out.shape == (5, 20) and out.dtype == torch.float32
    assert torch.all(out[mask == 0] == 0)
    torch.testing.assert_close(
        out.sum(dim=1), advantages * torch.tensor(lengths, dtype=torch.float32)
    )
    expected = segment_token_advantages(1.0, REWARDS, SPANS, 16)
    np.testing.assert_allclose(out[0, :16].numpy(), expected, rtol=1e-6)
    assert torch.all(out[2] == 0)  # zero advantage
    assert torch.all(out[3] == 0)  # masked-out completion: spans ignored
    assert torch.all(out[4, :6] == 0.7)  # no segmentation: plain advantage
    assert out[1, 0] < out[1, 9] < 0  # A < 0: first half (lower reward) penalised more


def test_batch_mode_grpo_matches_broadcast():
    advantages = torch.tensor([1.0, -0.5])
    mask = _mask([4, 2], 5)
    out = batch_token_advantages(
        advantages, [[0.1, 0.9]] * 2, [[(0, 1), (1, 2)]] * 2, mask, mode="grpo"
    )
    torch.testing.assert_close(out, advantages[:, None] * mask.float())


def test_batch_rejects_left_padding_and_shape_mismatch():
    mask = torch.tensor([[0, 1, 1]])
    with pytest.raises(ValueError, match="right-padded"):
        batch_token_advantages(torch.tensor([1.0]), [None], [None], mask)
    with pytest.raises(ValueError, match="batch sizes"):
        batch_token_advantages(torch.tensor([1.0, 2.0]), [None], [None], torch.ones(1, 3))


@st.composite
def _completions(draw):
    n = draw(st.integers(0, 40))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=8)))
    spans = list(zip([0, *cuts], [*cuts, n], strict=True))
    spans = draw(st.permutations(spans[: draw(st.integers(0, len(spans)))]))
    # With value both, g_k = p_R + p_v lies in [0, 2]: rewards reach [-2, 2] (and beyond with
    # the correction); nothing here may assume [-1, 1].
    rewards = draw(st.lists(st.floats(-3, 3), min_size=len(spans), max_size=len(spans)))
    advantage = draw(st.floats(-5, 5))
    return advantage, rewards, spans, n


@settings(max_examples=300, deadline=None)
@given(_completions(), st.floats(0, 30), st.floats(0, 1))
def test_properties_hold_for_random_segmentations(case, strength, floor):
    advantage, rewards, spans, n = case
    a = segment_token_advantages(advantage, rewards, spans, n, strength=strength, floor=floor)
    assert a.sum() == pytest.approx(advantage * n, rel=1e-9, abs=1e-9)
    assert np.all(a * advantage >= 0)
    if advantage == 0 or len({r for r, (s, e) in zip(rewards, spans, strict=True) if e > s}) <= 1:
        np.testing.assert_allclose(a, advantage, rtol=1e-9, atol=1e-12)
