"""Two GRPO steps on CPU with a tiny random Llama, in both advantage modes; checkpoint and resume.

The model and tokenizer come from conftest's `tiny_model_dir` (hidden 64, 2 layers, 4 heads,
2 KV heads, byte-level BPE with a ChatML template, eos = pad = <|im_end|>). Random weights never
emit EOS by themselves, so generation gets a +3 logit bias on EOS (`sequence_bias`) to produce
completions of different lengths, i.e. right padding inside the batch.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import pytest
import torch
import trl  # a hard dependency: a broken install must fail here, not skip
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from cotcredit.training.advantages import batch_token_advantages  # noqa: E402
from cotcredit.training.trainer import RredcotGRPOTrainer  # noqa: E402

hf_logging.set_verbosity_error()
hf_logging.disable_progress_bar()

PROBLEMS = [
    ("What is 3 + 4?", "7"),
    ("What is 5 + 7?", "12"),
    ("The price of a pear is 3. Actually no, it is 4. What is it?", "4"),
    ("Apples cost 5 dollars. What do apples cost?", "5"),
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A tiny model gains nothing from threads, and a busy 2-core machine loses a lot to them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def toy_dataset() -> Dataset:
    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in PROBLEMS]
    )


def even_token_reward(completion_ids, answer, **kwargs):
    """A reward that varies between random completions: the share of even token ids."""
    assert len(answer) == len(completion_ids)  # dataset columns arrive per completion
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


class Halves:
    """Dummy scorer: two segments, the halves of the completion, rewards [0.2, 0.8]."""

    def __init__(self):
        self.calls: list[tuple[list[int], list[int]]] = []

    def __call__(self, prompt_ids, completion_ids):
        self.calls.append((prompt_ids, completion_ids))
        n = len(completion_ids)
        return [0.2, 0.8], [(0, n // 2), (n // 2, n)]


class RecordingTrainer(RredcotGRPOTrainer):
    """Keeps what reached the loss, and the plain advantages the RREDCoT step started from."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_inputs: list[dict] = []
        self.rredcot_steps: list[tuple[dict, torch.Tensor]] = []

    def _rredcot_advantages(self, output):
        result = super()._rredcot_advantages(output)
        self.rredcot_steps.append(({k: output[k] for k in output}, result))
        return result

    def _compute_loss(self, model, inputs):
        self.loss_inputs.append(inputs)
        return super()._compute_loss(model, inputs)


def grpo_args(output_dir: Path, **overrides) -> trl.GRPOConfig:
    args = dict(
        output_dir=str(output_dir),
        use_cpu=True,  # also on a GPU machine: tiny model, deterministic
        bf16=False,  # TRL's default bf16=True refuses to start without a bf16 GPU
        gradient_checkpointing=False,  # TRL defaults to True; pointless for a tiny model
        num_generations=2,
        max_completion_length=16,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,  # generation batch of 4 split in 2: (B, T) survives it
        max_steps=2,
        save_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    args.update(overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return trl.GRPOConfig(**args)


def make_trainer(model_dir, output_dir, mode, scorer=None, reward=even_token_reward, **overrides):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    eos_bias = {"sequence_bias": [[[tokenizer.eos_token_id], 3.0]]}  # varied completion lengths
    overrides.setdefault("generation_kwargs", eos_bias)
    return RecordingTrainer(
        model=model,
        reward_funcs=reward,
        args=grpo_args(output_dir, **overrides),
        train_dataset=toy_dataset(),
        processing_class=tokenizer,
        advantage_mode=mode,
        segment_rewards_fn=scorer,
    )


def train(trainer, **kwargs) -> float:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer.train(**kwargs)
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """One 2-step run per mode (shared by the tests below: ~1-3 s each on 2 CPU cores)."""
    out = {}
    for mode in ("grpo", "rredcot"):
        scorer = Halves()
        trainer = make_trainer(tiny_model_dir, tmp_path_factory.mktemp(mode), mode, scorer)
        seconds = train(trainer)
        out[mode] = (trainer, scorer, seconds)
    return out


@pytest.mark.parametrize("mode", ["grpo", "rredcot"])
def test_two_steps_train_and_write_a_checkpoint(runs, mode):
    trainer, scorer, seconds = runs[mode]
    assert trainer.state.global_step == 2
    checkpoint = Path(trainer.args.output_dir) / "checkpoint-2"
    for name in ("model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json"):
        assert (checkpoint / name).is_file(), name
    assert len(trainer.loss_inputs) == 4  # 2 steps x 2 accumulation micro-batches
    logged = trainer.state.log_history[0]
    assert "reward" in logged and "entropy" in logged
    if mode == "grpo":
        assert scorer.calls == [] and trainer.rredcot_steps == []
        assert all(inputs["advantages"].dim() == 1 for inputs in trainer.loss_inputs)
        assert not any(key.startswith("rredcot/") for key in logged)
    else:
        assert len(scorer.calls) > 0
        assert all(inputs["advantages"].dim() == 2 for inputs in trainer.loss_inputs)
        assert logged["rredcot/segments_mean"] == 2.0
        assert 0.0 < logged["rredcot/scored_fraction"] <= 1.0
    assert seconds < 120


def test_rredcot_token_advantages_are_what_reaches_the_loss(runs):
    trainer, scorer, _ = runs["rredcot"]
    assert len(trainer.rredcot_steps) == 2  # one generation batch per optimizer step
    for output, token_advantages in trainer.rredcot_steps:
        plain, mask = output["advantages"], output["completion_mask"]
        assert token_advantages.shape == mask.shape and token_advantages.dtype == plain.dtype
        assert torch.all(token_advantages[mask == 0] == 0)
        lengths = mask.sum(dim=1).to(plain.dtype)
        torch.testing.assert_close(token_advantages.sum(dim=1), plain * lengths)
        assert torch.all(token_advantages * plain[:, None] >= 0)  # no sign flips
        # Two segments with rewards [0.2, 0.8]: for A > 0 the second half gets more per token.
        for row, a, n in zip(
            token_advantages, plain.tolist(), lengths.long().tolist(), strict=True
        ):
            if a > 0 and n >= 2:
                assert row[n - 1] > a > row[0]
            if a < 0 and n >= 2:
                assert row[0] < a < row[n - 1] <= 0
        expected = batch_token_advantages(
            plain, [[0.2, 0.8]] * len(plain), [_halves(int(n)) for n in lengths], mask
        )
        torch.testing.assert_close(token_advantages, expected)
    # The scorer saw the prompt without padding and the completion up to its length.
    start = trainer.processing_class.convert_tokens_to_ids("<|im_start|>")
    assert all(p[0] == start and 1 <= len(c) <= 16 for p, c in scorer.calls)
    lengths = {len(c) for _, c in scorer.calls}
    assert len(lengths) > 1  # EOS bias: completions of different lengths were padded


def _halves(n: int) -> list[tuple[int, int]]:
    return [(0, n // 2), (n // 2, n)]


def test_resume_from_checkpoint(runs, tiny_model_dir):
    trainer, _, _ = runs["rredcot"]
    checkpoint = Path(trainer.args.output_dir) / "checkpoint-2"
    scorer = Halves()
    resumed = make_trainer(tiny_model_dir, trainer.args.output_dir, "rredcot", scorer, max_steps=3)
    train(resumed, resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 3
    assert len(resumed.loss_inputs) == 2  # only the one remaining step ran
    assert len(scorer.calls) > 0  # the generation buffer is empty after resuming
    assert [entry.get("step") for entry in resumed.state.log_history][:2] == [1, 2]


def test_zero_advantage_groups_are_not_scored(tiny_model_dir, tmp_path):
    def constant(completions, **kwargs):
        return [1.0] * len(completions)

    scorer = Halves()
    trainer = make_trainer(
        tiny_model_dir, tmp_path, "rredcot", scorer, reward=constant, max_steps=1
    )
    train(trainer)
    assert scorer.calls == []
    ((output, token_advantages),) = trainer.rredcot_steps
    assert token_advantages.shape == output["completion_mask"].shape
    assert torch.all(token_advantages == 0)
    assert trainer.state.log_history[0]["rredcot/scored_fraction"] == 0.0


def test_unusable_segments_from_the_scorer_fail_loudly(tiny_model_dir, tmp_path):
    def overlapping(prompt_ids, completion_ids):
        return [0.1, 0.2], [(0, 2), (1, 3)]

    trainer = make_trainer(tiny_model_dir, tmp_path, "rredcot", overlapping, max_steps=1)
    with pytest.raises(ValueError, match="segment_rewards_fn returned unusable segments.*overlap"):
        train(trainer)


def test_none_from_the_scorer_keeps_the_plain_advantage(tiny_model_dir, tmp_path):
    trainer = make_trainer(tiny_model_dir, tmp_path, "rredcot", lambda p, c: None, max_steps=1)
    train(trainer)
    ((output, token_advantages),) = trainer.rredcot_steps
    mask = output["completion_mask"]
    torch.testing.assert_close(token_advantages, output["advantages"][:, None] * mask)


def test_rredcot_mode_needs_a_scorer():
    with pytest.raises(ValueError, match="segment_rewards_fn"):
        RredcotGRPOTrainer(model="unused", advantage_mode="rredcot")
    with pytest.raises(ValueError, match="advantage_mode"):
        RredcotGRPOTrainer(model="unused", advantage_mode="rudder")


def test_policy_scoring_under_bfloat16_mixed_precision(tiny_model_dir, tmp_path):
    """TRL on a GPU trains in bfloat16 mixed precision, where accelerate wraps the prepared
    model's forward in an autocast: the policy's RREDCoT scoring must still pass its head check
    (it once stopped at the first scoring) and score the completions."""
    from cotcredit.training.scoring import PolicySegmentRewards

    trainer = make_trainer(tiny_model_dir, tmp_path, "rredcot", lambda p, c: None, bf16=True,
                           max_steps=1)
    assert trainer.accelerator.mixed_precision == "bf16"
    trainer.segment_rewards_fn = PolicySegmentRewards(trainer.model, trainer.processing_class,
                                                      segments=3)
    train(trainer)
    ((output, token_advantages),) = trainer.rredcot_steps
    assert trainer.segment_rewards_fn.scorer.head.checked is True
    assert trainer.state.log_history[0]["rredcot/scored_fraction"] > 0
