"""The Python examples of docs/use-in-your-trainer.md and of the README's "Use RREDCoT in your
trainer" section run as written, on the tiny model (the names they assume are given here)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "use-in-your-trainer.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def readme_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Use RREDCoT in your trainer")
    end = text.index("\n## ", start + 1)
    return text[start:end]


@pytest.fixture
def policy(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return (AutoModelForCausalLM.from_pretrained(tiny_model_dir),
            AutoTokenizer.from_pretrained(tiny_model_dir))


def blocks_using(name: str, text: str) -> list[str]:
    found = [b for b in python_blocks(text) if name in b]
    assert found, f"no python block uses {name}"
    return found


def test_the_generic_loop_trains(policy):
    model, tokenizer = policy
    (block,) = blocks_using("optimizer.step()", PAGE.read_text(encoding="utf-8"))
    assert len(block.strip().splitlines()) <= 30
    before = [p.detach().clone() for p in model.parameters()]
    namespace = {"model": model, "tokenizer": tokenizer}
    exec(compile(block, str(PAGE), "exec"), namespace)
    assert namespace["token_adv"].shape == namespace["mask"].shape
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert changed or float(namespace["advantages"].abs().sum()) == 0


def test_the_trl_example_trains(policy, tmp_path):
    import trl
    from datasets import Dataset

    model, tokenizer = policy
    (block,) = blocks_using("RredcotGRPOTrainer(", PAGE.read_text(encoding="utf-8"))
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

    def my_reward(completions, **kwargs):
        return [float(len(str(c)) % 3) for c in completions]

    namespace = {"model": model, "tokenizer": tokenizer, "my_reward": my_reward,
                 "grpo_config": args, "dataset": dataset}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert namespace["trainer"].state.global_step == 1


def test_the_verl_example_runs(scorer):
    pytest.importorskip("verl", reason="verl is not installed (make install installs it)")
    from test_verl import rollout_batch
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    (block,) = blocks_using("attach_segment_credit(batch", PAGE.read_text(encoding="utf-8"))
    config = type("Config", (), {"algorithm": AlgoConfig(adv_estimator="rredcot")})()
    namespace = {"model": scorer.model, "tokenizer": scorer.tokenizer,
                 "batch": rollout_batch(scorer), "compute_advantage": compute_advantage,
                 "config": config}
    exec(compile(block, str(PAGE), "exec"), namespace)
    assert "advantages" in namespace["batch"].batch.keys()


def test_the_readme_examples_run(policy):
    model, tokenizer = policy
    blocks = python_blocks(readme_section())
    assert blocks
    for block in blocks:
        namespace = {"model": model, "tokenizer": tokenizer}
        exec(compile(block, "README.md", "exec"), namespace)
