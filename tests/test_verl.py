"""The verl integration against verl's own code: its DataProto, its compute_advantage and
registry, its GRPO estimator as the reference."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

verl = pytest.importorskip(
    "verl", reason="verl is not installed (make install installs it: pip install --no-deps verl)"
)
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos, ray_trainer  # noqa: E402

from cotcredit.integrations import verl as rv  # noqa: E402
from cotcredit.online import OnlineRredcot  # noqa: E402

PROMPTS = ["What is 3 + 4?", "What is 5 + 7?", "A pear costs 4. Two pears?"]
ANSWERS = ["7", "12", "8"]
RESPONSES = [
    ["Let me think step by step.\nFirst, 3 + 4 = 7.\nWait, check again.\nSo it is 7.\n"
     "The final answer is $\\boxed{7}$.",
     "Hmm, 3 + 4 = 8?\nActually no.\nThe final answer is $\\boxed{8}$."],
    ["Now add them: 5 + 7 = 12.\nSo 12.\nThe final answer is $\\boxed{12}$.",
     "Apples cost 5 dollars.\nBut oranges cost 7.\nThe final answer is $\\boxed{12}$."],
    ["The price of a pear is 4.\nNext, multiply by 2 to get 8.\nThe final answer is $\\boxed{8}$.",
     "Finally we are done.\nThe final answer is $\\boxed{9}$."],
]
SCORES = [[1.0, 0.0], [1.0, 1.0], [0.75, -0.5]]  # group 2 is tied: GRPO advantage 0


def rollout_batch(scorer) -> DataProto:
    """A batch as verl's rollout leaves it: left-padded prompts, right-padded responses, the
    reward at the last response token, group ids and ground truth."""
    tok = scorer.tokenizer
    pad = tok.pad_token_id
    rows = [(g, j) for g in range(3) for j in range(2)]
    p_ids = [scorer.encode_prompt(PROMPTS[g]) for g, _ in rows]
    r_ids = [tok.encode(RESPONSES[g][j], add_special_tokens=False) + [tok.eos_token_id]
             for g, j in rows]
    P, R = max(map(len, p_ids)), max(map(len, r_ids)) + 2
    prompts = torch.full((len(rows), P), pad)
    responses = torch.full((len(rows), R), pad)
    attention = torch.zeros((len(rows), P + R), dtype=torch.long)
    scores = torch.zeros((len(rows), R))
    for i, (p, r) in enumerate(zip(p_ids, r_ids)):
        prompts[i, P - len(p):] = torch.tensor(p)
        responses[i, : len(r)] = torch.tensor(r)
        attention[i, P - len(p): P + len(r)] = 1
        g, j = rows[i]
        scores[i, len(r) - 1] = SCORES[g][j]
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts, "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention,
            "response_mask": attention[:, P:].clone(), "token_level_scores": scores,
        },
        non_tensors={
            "uid": np.array([f"u{g}" for g, _ in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": ANSWERS[g]} for g, _ in rows], dtype=object),
        },
    )
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]  # no KL in reward
    return data


def verl_advantages(data: DataProto, estimator: str) -> torch.Tensor:
    out = ray_trainer.compute_advantage(
        data, adv_estimator=estimator, config=AlgoConfig(adv_estimator=estimator)
    )
    return out.batch["advantages"]


@pytest.fixture
def credit(scorer):
    return OnlineRredcot(scorer.model, scorer.tokenizer, segments=3, on_unscorable="skip")


def test_rredcot_keeps_verls_grpo_totals_and_signs(scorer, credit):
    assert core_algos.get_adv_estimator_fn("rredcot") is rv.compute_rredcot_advantage
    grpo = verl_advantages(rollout_batch(scorer), "grpo")
    data = rollout_batch(scorer)
    metrics = rv.attach_segment_credit(data, credit, strength=3.0)
    adv = verl_advantages(data, "rredcot")
    mask = data.batch["response_mask"].bool()
    assert metrics["rredcot/scored_fraction"] == pytest.approx(4 / 6)  # the tied group: A = 0
    assert torch.allclose(adv.sum(1), grpo.sum(1), atol=1e-5)  # each completion's total
    assert torch.all(adv[~mask] == 0)
    assert torch.all(torch.sign(adv[mask]) == torch.sign(grpo[mask]))
    moved = [i for i in range(6) if not torch.allclose(adv[i][mask[i]], grpo[i][mask[i]])]
    assert moved and set(moved) <= {0, 1, 4, 5}
    assert torch.equal(adv[2], grpo[2]) and torch.equal(adv[3], grpo[3])
    # The credit is the online API's on the same completions, ζ = verl's score.
    rewards = data.non_tensor_batch["rredcot_rewards"]
    for i in (0, 4):
        n = int(mask[i].sum())
        direct = credit.score_one(
            data.batch["prompts"][i][data.batch["attention_mask"][i, :data.batch["prompts"].shape[1]].bool()].tolist(),
            data.batch["responses"][i, :n].tolist(), ANSWERS[i // 2],
            outcome=float(data.batch["token_level_scores"][i].sum()),
        )
        assert rewards[i] == pytest.approx(direct.rewards, abs=1e-9)
        assert sum(rewards[i]) == pytest.approx(direct.outcome - direct.g[0], abs=1e-9)


def test_strength_zero_is_verls_grpo_exactly(scorer, credit):
    grpo = verl_advantages(rollout_batch(scorer), "grpo")
    data = rollout_batch(scorer)
    rv.attach_segment_credit(data, credit, strength=0.0)
    assert torch.equal(verl_advantages(data, "rredcot"), grpo)


def test_the_trainer_hook_runs_before_verls_compute_advantage(scorer, credit):
    """What `fit` does: its call of ray_trainer.compute_advantage goes through the hook."""
    trainer = rv.RredcotRayPPOTrainer.__new__(rv.RredcotRayPPOTrainer)  # no Ray workers
    trainer.config = OmegaConf.create({"algorithm": {"rredcot": {"strength": 0.0}}})
    trainer.rredcot_credit = credit
    grpo = verl_advantages(rollout_batch(scorer), "grpo")
    data = rollout_batch(scorer)
    with rv._routed_compute_advantage(ray_trainer, trainer):
        out = ray_trainer.compute_advantage(
            data, adv_estimator="rredcot", norm_adv_by_std_in_grpo=True,
            config=AlgoConfig(adv_estimator="rredcot"),
        )
    assert torch.equal(out.batch["advantages"], grpo)
    assert trainer.rredcot_metrics["rredcot/scored_fraction"] > 0
    assert ray_trainer.compute_advantage.__name__ == "compute_advantage"  # restored


def test_the_estimator_without_credit_says_what_to_do(scorer):
    with pytest.raises(ValueError, match="no segment credit attached.*RredcotRayPPOTrainer"):
        verl_advantages(copy.deepcopy(rollout_batch(scorer)), "rredcot")
