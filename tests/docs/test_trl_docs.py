"""The runnable examples of docs/training/trl.md (TRL 1.16's GRPOTrainer with per-token
advantages) and docs/training/plain-loop.md run as written on the tiny model (the names they
assume are given here)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
from conftest import ROOT

TRAINING = ROOT / "docs" / "training"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def block_using(name: str, path: Path) -> str:
    found = [b for b in python_blocks(path) if name in b]
    assert len(found) == 1, f"{path.name}: expected one python block using {name}"
    return found[0]


@pytest.fixture
def policy(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return (AutoModelForCausalLM.from_pretrained(tiny_model_dir),
            AutoTokenizer.from_pretrained(tiny_model_dir))


def test_the_tested_trl_is_the_pinned_one():
    import tomllib

    import trl

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "trl==1.16.*" in project["optional-dependencies"]["train"]
    assert trl.__version__.startswith("1.16.")
    assert "TRL 1.16.0" in (TRAINING / "trl.md").read_text(encoding="utf-8")


def test_the_trl_example_trains_with_token_advantages(policy, tmp_path, monkeypatch):
    import trl
    from datasets import Dataset

    from cotcredit.training.trainer import RredcotGRPOTrainer

    model, tokenizer = policy
    block = block_using("RredcotGRPOTrainer(", TRAINING / "trl.md")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        args = trl.GRPOConfig(
            output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False,
            num_generations=2, max_completion_length=12, per_device_train_batch_size=2,
            max_steps=1, report_to="none", disable_tqdm=True, save_strategy="no",
        )
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": "What is 3 + 4?"}], "answer": "7"}] * 2
    )
    shapes = []  # the advantages TRL's loss received
    original = RredcotGRPOTrainer._compute_loss

    def spy(self, model, inputs):
        shapes.append(tuple(inputs["advantages"].shape))
        return original(self, model, inputs)

    monkeypatch.setattr(RredcotGRPOTrainer, "_compute_loss", spy)

    def my_reward(completions, **kwargs):
        return [float(len(str(c)) % 3) for c in completions]

    namespace = {"model": model, "tokenizer": tokenizer, "my_reward": my_reward,
                 "grpo_config": args, "dataset": dataset}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        exec(compile(block, "docs/training/trl.md", "exec"), namespace)
    assert namespace["trainer"].state.global_step == 1
    assert shapes and all(len(s) == 2 for s in shapes)  # (B, T): per-token advantages


def test_the_plain_loop_trains(policy):
    model, tokenizer = policy
    block = block_using("optimizer.step()", TRAINING / "plain-loop.md")
    assert len(block.strip().splitlines()) <= 30
    before = [p.detach().clone() for p in model.parameters()]
    namespace = {"model": model, "tokenizer": tokenizer}
    exec(compile(block, "docs/training/plain-loop.md", "exec"), namespace)
    assert namespace["token_adv"].shape == namespace["mask"].shape
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert changed or float(namespace["advantages"].abs().sum()) == 0
