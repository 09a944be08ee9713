"""Fixtures: a tiny random Llama and a byte-level BPE tokenizer built locally, no network; and
what test files in any folder below tests/ import from here (`from conftest import ROOT`): the
repository's and the tests' paths, sample traces, `run_cli`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Under pytest-xdist (`make test`) the test processes share the cores: each, and every process
# its tests start, takes its share of torch's threads (oversubscribed, tests/bench and
# tests/methods ran 12% slower in two processes on two cores).
if _workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(_workers))))

# Test files live in folders below this one: paths start here, never at a test file.
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"  # files checked in for tests (tables written by older versions)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "Let me think step by step. First, 3 + 4 = 7. Wait, check again.",
    "So the answer is 12. Therefore the final answer is $\\boxed{12}$.",
    "Alternatively, the table says apples cost 5 dollars. Hmm, but oranges cost 7.",
    "Now add them: 5 + 7 = 12.\nNext, multiply by 2 to get 24.\nFinally we are done.",
    "The price of a pear is 3. Actually no, it is 4.</think>",
]


def not_installed(what: str, package: str) -> str:
    """The reason a test that needs a Debian package skips: what is missing, and how to get it
    (the Makefile's test-tools installs every such package)."""
    return f"{what} not installed (`make test-tools` as root, or apt-get install {package})"


def run_cli(argv, capsys):
    """Run `cotcredit` in-process; returns (exit code, stdout, stderr)."""
    from cotcredit.cli import main

    code = 0
    try:
        main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code or 0
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def write_traces(path: Path, n: int, seed: int = 0) -> Path:
    """`n` traces with several reasoning lines each (ids tr000...)."""
    import random

    rng = random.Random(seed)
    words = ["Wait", "So", "Then", "Hmm", "Next", "Actually", "Now"]
    lines = []
    for i in range(n):
        steps = [
            f"{rng.choice(words)}, {rng.randint(1, 99)} + {rng.randint(1, 99)} is computed here."
            for _ in range(rng.randint(6, 12))
        ]
        lines.append(
            json.dumps(
                {
                    "id": f"tr{i:03d}",
                    "prompt": f"What is {i} + 1? Think step by step.",
                    "response": "\n".join(steps) + f"\nThe final answer is $\\boxed{{{i + 1}}}$.",
                    "answer": str(i + 1),
                    "solution": f"{i} + 1 = {i + 1}.",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def build_tiny_model_dir(folder: Path, seed: int = 0, layers: int = 2) -> Path:
    """Save a tiny random Llama (hidden 64) and a trained byte-level BPE tokenizer to `folder`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(CORPUS * 4, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|im_end|>",
        bos_token="<|im_start|>", unk_token="<|endoftext|>",
    )
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    # Random init is near-uniform; scale up so log-probs and entropies vary between tokens.
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(4)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def scorer(tiny_model_dir):
    from cotcredit.lm import ModelOptions, load_scorer

    return load_scorer(ModelOptions(model=str(tiny_model_dir), device="cpu"))


SAMPLE_TRACES = [
    {
        "id": "t1",
        "prompt": "Apples cost 5 dollars and oranges cost 7 dollars. What do both cost?",
        "response": "Let me think step by step.\nApples cost 5 dollars.\nWait, oranges cost 7.\n"
        "So 5 + 7 = 12.\nTherefore the total is 12.\nThe final answer is $\\boxed{12}$.",
        "answer": "12",
        "solution": "Apples cost 5 and oranges cost 7, so together 5 + 7 = 12.",
        "correct": True,
    },
    {
        "id": "t2",
        "question": "What is 3 + 4?",
        "completion": "<think>First, 3 + 4. Hmm, 3 + 4 = 8? Actually no, 3 + 4 = 7.\nSo it is 7."
        "</think>\nThe answer is $\\boxed{7}$.",
        "gt_answer": "7",
    },
    {
        "id": "t3",
        "problem": "A pear costs 4. What do two pears cost?",
        "output": "Now the price of a pear is 4.\nNext, multiply by 2 to get 8.\n"
        "But wait, check: 4 + 4 = 8.\nFinally we are done.\nAnswer: 8",
        "reference_answer": "8",
        "reward": 1.0,
    },
]


def fake_grade(text, reference, **kw):
    """Junk from a random model is never right; call a completion right by its length."""
    from cotcredit.data import grading

    return grading.GradeResult(answer=str(len(text)), correct=len(text) % 3 != 0)


@pytest.fixture
def graded(monkeypatch, scorer):
    """The fake grader, and a generator that also stops at every token containing "e", so that
    rollouts of the random model end at different lengths (some cut off, some not)."""
    from cotcredit.data import grading
    from cotcredit.lm import sampling

    class StopsAtE(sampling.HFGenerator):
        def __init__(self, model, tok):
            super().__init__(model, tok)
            self.stop_ids += [i for i in range(len(tok)) if "e" in tok.decode([i])]

    monkeypatch.setattr(grading, "grade_completion", fake_grade)
    monkeypatch.setattr(sampling, "HFGenerator", StopsAtE)  # what every run's generator is


@pytest.fixture
def traces_file(tmp_path) -> Path:
    p = tmp_path / "traces.jsonl"
    p.write_text("".join(json.dumps(t) + "\n" for t in SAMPLE_TRACES))
    return p


# A hand-written hops question and its right response (the hops checker's tests).
HOPS_Q = """Friends:
Emma's friend is Jack.
Jack's friend is Noah.
Noah's friend is Emma.
Mia's friend is Jack.

Favourite fruits:
Emma's favourite fruit is the plum.
Noah's favourite fruit is the peach.
Jack's favourite fruit is the kiwi.
Mia's favourite fruit is the orange.

Prices:
The kiwi costs 72 coins.
The peach costs 13 coins.
The plum costs 22 coins.
The orange costs 59 coins.

Question: Start at Mia and go to their friend 2 times. How much does the favourite fruit of \
the person you reach cost?"""
HOPS_RIGHT = ["We start at Mia.", "Mia's friend is Jack.", "Jack's friend is Noah.",
              "Noah's favourite fruit is the peach.", "The peach costs 13 coins.",
              "So Noah's favourite fruit costs 13 coins."]
