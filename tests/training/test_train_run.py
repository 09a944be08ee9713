"""`cotcredit train` end to end on a tiny random Llama: outputs, resume, the real RREDCoT scorer.

A random model never answers correctly, so the runs add a reward that varies between random
completions (share of even token ids) to the correctness reward: groups then have non-zero
advantages and mode rredcot scores completions with `PolicySegmentRewards` on the policy.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import trl  # noqa: F401  (a hard dependency: a broken install must fail here, not skip)
from conftest import run_cli

from cotcredit.data.trace import Trace
from cotcredit.lm import ModelOptions, Scorer  # noqa: E402
from cotcredit.lm.encoding import token_offsets
from cotcredit.methods import TraceContext  # noqa: E402
from cotcredit.methods.rredcot import RredcotOptions, estimate, redistribute_rewards  # noqa: E402
from cotcredit.segmentation import segment_encoded  # noqa: E402
from cotcredit.training.config import load_config  # noqa: E402
from cotcredit.training.metrics import plot_reward_curves, read_metrics  # noqa: E402
from cotcredit.training.run import prompt_field, prompt_ids, train  # noqa: E402
from cotcredit.training.scoring import PolicySegmentRewards  # noqa: E402

PROBLEMS = [
    {"id": "a", "prompt": "What is 3 + 4?", "answer": "7", "solution": "3 + 4 = 7."},
    {"id": "b", "prompt": "What is 5 + 7?", "answer": "12", "solution": "5 + 7 = 12."},
    {"id": "c", "prompt": "What is 2 + 2?", "answer": "4"},
    {"id": "d", "prompt": "What is 6 + 3?", "answer": "9", "solution": "6 + 3 = 9."},
]

CONFIG = """\
model: {model}
train_file: train.jsonl
eval_file: eval.jsonl
output_dir: {out}
advantage: {mode}
credit:
  segments: 3
grpo:
  num_generations: 2
  max_completion_length: 12
  per_device_train_batch_size: 2
  gradient_accumulation_steps: 2
  max_steps: 2
  save_steps: 2
  learning_rate: 1.0e-3
  gradient_checkpointing: false
  report_to: none
  extra: {{disable_tqdm: true, dataloader_pin_memory: false}}
eval:
  max_new_tokens: 4
  every: 1
"""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A tiny model gains nothing from threads, and a busy 2-core machine loses a lot to them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def even(completion_ids, **kwargs):
    return [sum(t % 2 == 0 for t in ids) / max(len(ids), 1) for ids in completion_ids]


def write_lines(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_config(folder: Path, model_dir: Path, mode: str, **replace) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_lines(folder / "train.jsonl", PROBLEMS)
    write_lines(folder / "eval.jsonl", PROBLEMS[:2])
    text = CONFIG.format(model=model_dir, out=f"out-{mode}", mode=mode)
    for old, new in replace.items():
        text = text.replace(old, new)
    path = folder / "config.yaml"
    path.write_text(text)
    return path


cli = run_cli


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """One 2-step run per mode through `train()`."""
    out = {}
    for mode in ("grpo", "rredcot"):
        config = make_config(tmp_path_factory.mktemp(mode), tiny_model_dir, mode)
        out[mode] = (config, train(config, extra_rewards=[even]))
    return out


@pytest.mark.parametrize("mode", ["grpo", "rredcot"])
def test_two_step_run_writes_every_output(runs, mode):
    config, result = runs[mode]
    out = config.parent / f"out-{mode}"
    assert result.output_dir == out and result.global_step == 2
    assert result.checkpoint == out / "checkpoint-2"
    assert (out / "checkpoint-2" / "model.safetensors").is_file()
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for key in ("reward", "reward_std", "accuracy", "kl", "loss", "step_seconds"):
            assert key in r
        assert r["accuracy"] == 0.0 and r["kl"] is None  # random model; beta 0: no KL
        assert r["step_seconds"] > 0 and 0 <= r["rredcot_seconds"] <= r["step_seconds"]
        assert math.isfinite(r["loss"]) and math.isfinite(r["reward"])
    if mode == "grpo":
        assert all(r["rredcot_seconds"] == 0 for r in rows)
        assert not any(k.startswith("rredcot/") for k in rows[0])
    else:
        assert any(r["rredcot_seconds"] > 0 for r in rows)
        assert rows[0]["rredcot/segments_mean"] == pytest.approx(3.0)
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation == result.eval
    assert evaluation["before"]["problems"] == 2 and evaluation["after"]["step"] == 2
    assert evaluation["settings"]["temperature"] == 0.0
    assert (out / "reward_curve.png").read_bytes()[:4] == b"\x89PNG"
    curve = read_metrics(out / "eval_curve.jsonl")  # eval.every: 1 -> before, then every step
    assert [r["step"] for r in curve] == [0, 1, 2]
    assert curve[0]["accuracy"] == evaluation["before"]["accuracy"]
    assert curve[-1]["accuracy"] == evaluation["after"]["accuracy"]  # the last step, evaluated once
    lines = (out / "eval_completions.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["when"] for x in lines) == ["after"] * 2 + ["before"] * 2
    as_run = (out / "config.yaml").read_text()
    assert f"advantage: {mode}" in as_run and str(out) in as_run
    assert load_config(out / "config.yaml").model_dump() == load_config(config).model_dump()


@pytest.mark.parametrize("mode", ["grpo", "rredcot"])
def test_resume_through_the_cli(runs, mode, capsys, monkeypatch):
    config, _ = runs[mode]
    out = config.parent / f"out-{mode}"
    code, _, err = cli(["train", config], capsys)  # checkpoints there: refused without --resume
    assert code == 2 and "--resume" in err and err.count("\n") == 1
    import cotcredit.training.run as run

    original = run.train
    monkeypatch.setattr(run, "train", lambda *a, **k: original(*a, extra_rewards=[even], **k))
    code, _, err = cli(["train", config, "--resume", "--max-steps", "3"], capsys)
    assert code == 0, err
    assert "trained to step 3" in err
    assert (out / "checkpoint-3").is_dir()
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["after"]["step"] == 3 and evaluation["before"]["problems"] == 2
    assert "max_steps: 3" in (out / "config.yaml").read_text()


def test_seed_override_and_seed_band(tmp_path, tiny_model_dir):
    from cotcredit.training.run import _with_overrides
    from studies.seed_runs import seed_band

    cfg = load_config(make_config(tmp_path, tiny_model_dir, "grpo"))
    assert _with_overrides(cfg, 5, 123).seed == 123
    assert _with_overrides(cfg, 5, None).grpo.max_steps == 5
    steps, mean, low, high = seed_band([{1: 0.0, 2: 1.0, 3: 0.5}, {2: 0.0, 3: 1.0}])
    assert steps == [2, 3]  # steps every run has
    assert list(mean) == [0.5, 0.75] and list(low) == [0.0, 0.5] and list(high) == [1.0, 1.0]


def test_plot_seed_groups(runs, tmp_path):
    from studies.seed_runs import plot_seed_curves

    png = plot_seed_curves(
        {mode: [runs[mode][0].parent / f"out-{mode}"] for mode in runs}, tmp_path / "s.png",
        window=2,
    )
    assert png.read_bytes()[:4] == b"\x89PNG" and png.with_suffix(".pdf").is_file()


def test_plot_two_runs_side_by_side(runs, tmp_path):
    png = plot_reward_curves(
        {mode: runs[mode][0].parent / f"out-{mode}" / "metrics.jsonl" for mode in runs},
        tmp_path / "curves.png",
    )
    assert png.read_bytes()[:4] == b"\x89PNG"


# ---- the real segment_rewards_fn ------------------------------------------------------------
@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    return model, tokenizer


RESPONSE = "Let me think step by step.\nFirst, 3 + 4 = 7.\nWait, check again.\nSo it is 7.\n"


@pytest.mark.parametrize(
    ("ending", "outcome"),
    [("The final answer is $\\boxed{7}$.", 1.0), ("The final answer is $\\boxed{8}$.", 0.0)],
)
def test_segment_rewards_tile_the_reasoning_and_sum_to_outcome_minus_g0(policy, ending, outcome):
    model, tokenizer = policy
    fn = PolicySegmentRewards(model, tokenizer, segments=3, value="both")
    messages = prompt_field(PROBLEMS[0]["prompt"], chat=True, system_prompt=None)
    p_ids = prompt_ids(tokenizer, messages)
    response = RESPONSE + ending
    c_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    example = {**PROBLEMS[0], "prompt": messages, "problem_id": "a"}
    with torch.no_grad():
        rewards, spans = fn(p_ids, c_ids, example=example)
    n_reasoning = len(tokenizer(RESPONSE, add_special_tokens=False)["input_ids"])
    assert len(rewards) == len(spans) == 3
    assert spans[0][0] == 0 and spans[-1][1] == n_reasoning
    assert all(a < b for a, b in spans)
    assert all(spans[k][1] == spans[k + 1][0] for k in range(len(spans) - 1))
    assert fn.last.outcome == outcome
    assert sum(rewards) == pytest.approx(outcome - fn.last.g[0], abs=1e-9)

    # The same numbers as `cotcredit redistribute` on the equivalent trace (same model).
    scorer = Scorer(model, tokenizer, ModelOptions())
    trace = Trace("a", PROBLEMS[0]["prompt"], response, "7", PROBLEMS[0]["solution"])
    enc = scorer.encode(trace)
    assert enc.prompt_ids == p_ids and enc.reasoning_ids == c_ids[:n_reasoning]
    fwd = scorer.forward(enc.ids)
    seg = segment_encoded(enc, fwd.entropies, fn.segment_options)
    assert [(s.token_start, s.token_end) for s in seg.segments] == spans
    est = estimate(TraceContext(scorer, enc, fwd, seg), RredcotOptions(value="both"))
    expected, _ = redistribute_rewards(est.g, outcome, sum_to="advantage")
    assert rewards == pytest.approx(expected, abs=1e-6)


def test_segment_rewards_none_without_reasoning(policy):
    model, tokenizer = policy
    fn = PolicySegmentRewards(model, tokenizer, segments=3)
    p_ids = prompt_ids(tokenizer, prompt_field("What is 3 + 4?", True, None))
    c_ids = tokenizer("The final answer is $\\boxed{7}$.", add_special_tokens=False)["input_ids"]
    assert fn(p_ids, c_ids, example={"answer": "7"}) is None
    assert fn(p_ids, [tokenizer.eos_token_id], example={"answer": "7"}) is None
    with pytest.raises(ValueError, match="dataset row"):
        fn(p_ids, c_ids)


def test_token_offsets_of_non_canonical_tokenizations(policy):
    _, tokenizer = policy
    # "Let" spelled letter by letter, then "é" as its two byte tokens (byte-level BPE).
    ids = tokenizer.convert_tokens_to_ids(["L", "e", "t", "Ġ", "Ã", "©", "!"])
    text, starts, cut = token_offsets(tokenizer, ids)
    assert text == "Let é!"
    assert starts == [0, 1, 2, 3, 4, 4, 5]
    assert cut == [True, True, True, True, True, False, True]
    canonical = tokenizer("Let me think.", add_special_tokens=False)["input_ids"]
    text, starts, cut = token_offsets(tokenizer, canonical)
    assert text == "Let me think." and starts[0] == 0 and all(cut)


# ---- config errors through the CLI ------------------------------------------------------------
@pytest.mark.parametrize(
    ("replace", "message"),
    [
        ({"advantage: grpo": "advantage: rudder"}, "advantage: must be 'grpo', 'rredcot', 'mc'"),
        ({"  segments: 3": "  segmnets: 3"}, "unknown key 'credit.segmnets'"),
        ({"eval:\n": "evaluation:\n"}, "unknown key 'evaluation'"),
        ({"  max_new_tokens: 4": "  max_new_tokens: 0"}, "eval.max_new_tokens: must be >= 1"),
        ({"train_file: train.jsonl": "train_file: nope.jsonl"}, "nope.jsonl: no such file"),
        ({"  num_generations: 2": "  num_generations: 3"}, "grpo: generation_batch_size"),
        ({"model: ": "model: /no/such/folder#"}, "/no/such/folder"),
    ],
)
def test_config_errors_are_one_line_exit_2(tiny_model_dir, tmp_path, capsys, replace, message):
    config = make_config(tmp_path, tiny_model_dir, "grpo", **replace)
    code, _, err = cli(["train", config], capsys)
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err


def test_max_steps_must_be_positive(tiny_model_dir, tmp_path, capsys):
    code, _, err = cli(
        ["train", make_config(tmp_path, tiny_model_dir, "grpo"), "--max-steps", "0"], capsys
    )
    assert code == 2 and "--max-steps must be at least 1" in err


def test_overwrite_starts_over_and_resume_needs_a_checkpoint(tmp_path):
    from cotcredit.errors import UserError
    from cotcredit.training.run import _resume_checkpoint

    with pytest.raises(UserError, match="no checkpoint to resume from"):
        _resume_checkpoint(tmp_path, True, False)
    (tmp_path / "checkpoint-4").mkdir()
    (tmp_path / "checkpoint-4" / "trainer_state.json").write_text("{}")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    assert _resume_checkpoint(tmp_path, True, False) == tmp_path / "checkpoint-4"
    assert _resume_checkpoint(tmp_path, str(tmp_path / "checkpoint-4"), False) == (
        tmp_path / "checkpoint-4"
    )
    with pytest.raises(UserError, match="not a checkpoint folder"):
        _resume_checkpoint(tmp_path, str(tmp_path), False)
    with pytest.raises(UserError, match="--resume to continue it or --overwrite"):
        _resume_checkpoint(tmp_path, False, False)
    assert _resume_checkpoint(tmp_path, False, True) is None
    assert not (tmp_path / "checkpoint-4").exists() and not (tmp_path / "metrics.jsonl").exists()


def test_rredcot_with_strength_zero_reproduces_grpo_exactly(tmp_path, tiny_model_dir):
    """The reweighting is the only difference between the modes: with strength 0 (every weight
    1) a rredcot run is the grpo run at the same seed, number for number."""
    runs = {}
    for mode, extra in (("grpo", ""), ("rredcot", "  strength: 0.0\n")):
        config = make_config(tmp_path / mode, tiny_model_dir, mode,
                             **{"  segments: 3\n": "  segments: 3\n" + extra})
        train(config, extra_rewards=[even])
        runs[mode] = read_metrics(config.parent / f"out-{mode}" / "metrics.jsonl")
    keys = ("reward", "reward_std", "loss", "grad_norm", "entropy", "completions/mean_length")
    for a, b in zip(runs["grpo"], runs["rredcot"], strict=True):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert any(r["rredcot/scored_fraction"] > 0 for r in runs["rredcot"])  # it did score


LORA = "lora:\n  rank: 4\n  alpha: 8\n  target_modules: [q_proj, v_proj]\n"


def test_lora_trains_adapters_in_both_modes_and_strength_zero_still_equals_grpo(
    tmp_path, tiny_model_dir, monkeypatch
):
    """Two steps with LoRA per mode: only adapter weights change, the RREDCoT scorer runs
    through the adapted policy, and rredcot with strength 0 is the grpo run number for number."""
    pytest.importorskip("peft")
    from peft import PeftModel

    from cotcredit.training import scoring

    scored_with = []
    original = scoring.PolicySegmentRewards.score_batch

    def spy(self, *args, **kwargs):
        scored_with.append(type(self.online.scorer.model))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(scoring.PolicySegmentRewards, "score_batch", spy)
    runs = {}
    for mode, extra in (("grpo", ""), ("rredcot", "  strength: 0.0\n"), ("rredcot3", "")):
        config = make_config(tmp_path / mode, tiny_model_dir, mode[:7],
                             **{"  segments: 3\n": "  segments: 3\n" + extra + LORA})
        result = train(config, extra_rewards=[even])
        assert result.global_step == 2
        files = {p.name for p in result.checkpoint.iterdir()}
        assert "adapter_model.safetensors" in files and "model.safetensors" not in files
        runs[mode] = read_metrics(result.metrics)
    assert scored_with and all(issubclass(t, PeftModel) for t in scored_with)
    keys = ("reward", "reward_std", "loss", "grad_norm", "entropy", "completions/mean_length")
    for a, b in zip(runs["grpo"], runs["rredcot"], strict=True):
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert any(r["rredcot/scored_fraction"] > 0 for r in runs["rredcot3"])


def test_segment_rewards_redistribute_the_configured_rewards_total(tmp_path, tiny_model_dir,
                                                                   monkeypatch):
    """ζ is the total of the reward functions TRL summed (correctness + extra), per completion,
    and every completion's segment rewards sum to ζ − g_0."""
    from cotcredit.training.online import OnlineRredcot
    from cotcredit.training.run import correct

    seen = []
    original = OnlineRredcot.__call__

    def spy(self, prompt_ids, completion_ids, answers, solutions=None, outcomes=None,
            prompts=None):
        credits = original(self, prompt_ids, completion_ids, answers, solutions, outcomes, prompts)
        seen.append((completion_ids, answers, outcomes, credits))
        return credits

    from transformers import AutoTokenizer

    monkeypatch.setattr(OnlineRredcot, "__call__", spy)
    config = make_config(tmp_path, tiny_model_dir, "rredcot")
    train(config, extra_rewards=[even])
    assert seen
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    checked = 0
    for completion_ids, answers, outcomes, credits in seen:
        assert outcomes is not None and len(outcomes) == len(completion_ids)
        texts = tok.batch_decode(completion_ids, skip_special_tokens=True)
        expected = [c + e for c, e in zip(correct(texts, answers), even(completion_ids))]
        assert outcomes == pytest.approx(expected, abs=1e-6)
        for z, credit in zip(outcomes, credits):
            if credit is not None:
                assert credit.outcome == z
                assert math.fsum(credit.rewards) == pytest.approx(z - credit.g[0], abs=1e-9)
                checked += 1
    assert checked
