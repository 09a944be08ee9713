"""The two variants of the reweighting's input: value differences only, and the shuffled control."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cotcredit.methods.rredcot import redistribute_rewards
from cotcredit.training.advantages import (
    completion_key,
    segment_token_advantages,
    shuffled_rewards,
    value_difference_rewards,
)
from cotcredit.training.config import CreditOptions, RredcotTrainingOptions

SPANS = [(0, 3), (3, 7), (7, 12), (12, 14)]  # 14 reasoning tokens, then 4 answer tokens
N = 18
unit = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(
    g=st.lists(unit, min_size=5, max_size=5),
    zeta=st.sampled_from([0.0, 1.0]),
    advantage=st.floats(-3, 3, allow_nan=False).filter(lambda a: abs(a) > 1e-3),
    strength=st.sampled_from([1.0, 3.0, 10.0]),
    floor=st.sampled_from([0.0, 0.5]),
)
def test_value_differences_keep_total_and_signs_and_drop_the_correction(
    g, zeta, advantage, strength, floor
):
    rewards, correction = redistribute_rewards(g, zeta, sum_to="advantage")
    diffs = value_difference_rewards(g)
    # Direct: g_k - g_{k-1}; the scorer's rewards differ only in the last, by the correction.
    assert diffs == pytest.approx([g[k] - g[k - 1] for k in range(1, len(g))], abs=1e-15)
    assert np.allclose(np.array(rewards) - np.array(diffs), [0, 0, 0, correction], atol=1e-12)
    a = segment_token_advantages(advantage, diffs, SPANS, N, strength=strength, floor=floor)
    assert a.sum() == pytest.approx(advantage * N, rel=1e-9)
    assert np.all(np.sign(a) == np.sign(advantage))


def test_value_differences_ignore_the_terminal_correction():
    """A correct completion with a flat g: the scorer's rewards put everything on the last
    segment (the correction 1 - g_K); value differences leave the weights flat (plain GRPO)."""
    g = [0.2, 0.2, 0.2, 0.2, 0.2]
    rewards, _ = redistribute_rewards(g, 1.0, sum_to="advantage")
    with_correction = segment_token_advantages(1.0, rewards, SPANS, N, strength=3.0)
    without = segment_token_advantages(1.0, value_difference_rewards(g), SPANS, N, strength=3.0)
    assert with_correction[12] > 5 * with_correction[0]  # the last segment takes the weight
    assert without == pytest.approx(np.ones(N))


def test_value_differences_need_two_values():
    with pytest.raises(ValueError, match="g_0..g_K"):
        value_difference_rewards([0.3])


@settings(max_examples=60, deadline=None)
@given(
    rewards=st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=9),
    seed=st.integers(0, 2**31),
    ids=st.lists(st.integers(0, 50_000), min_size=1, max_size=30),
)
def test_shuffled_is_a_seeded_permutation_of_the_rewards(rewards, seed, ids):
    key = completion_key(ids)
    out = shuffled_rewards(rewards, seed, key)
    assert sorted(out) == sorted(rewards)  # the same values: the weights' spread is kept
    assert shuffled_rewards(rewards, seed, key) == out  # deterministic per seed and completion
    assert completion_key(list(ids)) == key == completion_key(np.array(ids))


def test_shuffled_moves_rewards_and_depends_on_seed_and_completion():
    rewards = [0.1 * k for k in range(8)]
    by_seed = {tuple(shuffled_rewards(rewards, seed, 7)) for seed in range(20)}
    by_key = {tuple(shuffled_rewards(rewards, 0, completion_key([k]))) for k in range(20)}
    assert len(by_seed) > 15 and len(by_key) > 15  # 8! orders: collisions are rare
    # Placement is destroyed: over many draws each position sees each reward about equally.
    first = [shuffled_rewards(rewards, s, 1)[0] for s in range(4000)]
    counts = np.bincount(np.round(np.array(first) * 10).astype(int), minlength=8)
    assert counts.min() > 400 and counts.max() < 600


def test_config_defaults_are_todays_reweighting():
    assert RredcotTrainingOptions().terminal_in_weights is True
    credit = CreditOptions()
    assert (credit.form, credit.strength, credit.floor) == ("reweight", 3.0, 0.0)


def test_trainer_shuffles_each_completion_with_its_key(monkeypatch):
    """The trainer permutes each scored completion's rewards with (seed, its token ids) before
    the weights, and the permuted rewards are what batch_token_advantages receives."""
    from cotcredit.training import trainer as trainer_module

    seen = {}

    def capture(advantages, rewards, spans, mask, **kwargs):
        seen["rewards"] = rewards
        return advantages.unsqueeze(1).expand(-1, mask.shape[1]).clone()

    monkeypatch.setattr(trainer_module, "batch_token_advantages", capture)
    t = object.__new__(trainer_module.RredcotGRPOTrainer)
    rows = {3: [0.1, 0.2, 0.3, 0.4], 4: [0.5, -0.5, 0.0]}
    t.segment_rewards_fn = lambda p, c: (rows[len(c)], [(i, i + 1) for i in range(len(rows[len(c)]))])
    t.shuffle_seed, t.strength, t.floor, t.rredcot_seconds_total = 5, 3.0, 0.0, 0.0
    t.form = "reweight"
    t._scoring_examples = None
    t._log_rredcot = lambda *a, **k: None
    t._policy_for_scoring = lambda: __import__("contextlib").nullcontext()
    output = {
        "advantages": torch.tensor([1.0, -1.0]),
        "prompt_ids": torch.tensor([[9, 9], [9, 9]]),
        "prompt_mask": torch.ones(2, 2),
        "completion_ids": torch.tensor([[11, 12, 13, 0], [21, 22, 23, 24]]),
        "completion_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]),
    }
    t._rredcot_advantages(output)
    assert seen["rewards"][0] == shuffled_rewards(rows[3], 5, completion_key([11, 12, 13]))
    assert seen["rewards"][1] == shuffled_rewards(rows[4], 5, completion_key([21, 22, 23, 24]))


def test_scorer_returns_value_differences_when_the_correction_is_kept_out(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cotcredit.training.scoring import PolicySegmentRewards

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    p_ids = tokenizer("What is 3 + 4?", add_special_tokens=False)["input_ids"]
    text = "First, 3 + 4 = 7.\nWait, check again.\nSo it is 7.\nThe final answer is $\\boxed{7}$."
    c_ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    example = {"prompt": "What is 3 + 4?", "answer": "7"}
    out = {}
    for flag in (True, False):
        fn = PolicySegmentRewards(model, tokenizer, segments=3, terminal_in_weights=flag)
        with torch.no_grad():
            out[flag] = fn(p_ids, c_ids, example=example, outcome=1.0)
    g = fn.last.g
    assert out[False][1] == out[True][1]  # the same spans
    assert out[False][0] == pytest.approx(np.diff(g).tolist(), abs=1e-12)
    assert sum(out[True][0]) == pytest.approx(1.0 - g[0], abs=1e-9)
    assert out[True][0][:-1] == pytest.approx(out[False][0][:-1], abs=1e-12)
