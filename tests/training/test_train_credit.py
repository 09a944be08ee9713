"""Credit sources (oracle, Monte Carlo) and the segment-rewards advantage form.

The oracle and Monte Carlo tests use the `unique` bench regime and its shipped 0.8M-parameter
checkpoint: its checker labels hand-made completions, and greedy rollouts make Monte Carlo
values a direct computation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cotcredit.training.advantages import (
    batch_token_advantages,
    group_scales,
    segment_token_advantages,
)
from cotcredit.training.credit import OracleCredit, line_spans, regime_check

SPANS = [(0, 4), (4, 10), (10, 12)]
N = 14  # tokens 12, 13 lie outside every segment (the final answer)


def sr(advantage, rewards, spans=SPANS, n=N, scale=2.0):
    return segment_token_advantages(advantage, rewards, spans, n, form="segment-rewards",
                                    scale=scale)


# ---- segment-rewards ---------------------------------------------------------------------------
@given(advantage=st.floats(-3, 3), reward=st.floats(-2, 2), scale=st.floats(0, 1e4))
def test_segment_rewards_with_equal_rewards_is_grpo(advantage, reward, scale):
    np.testing.assert_allclose(sr(advantage, [reward] * 3, scale=scale), advantage, atol=1e-9)


def test_segment_rewards_with_one_segment_or_zero_scale_is_grpo():
    np.testing.assert_allclose(sr(-0.7, [0.9], [(0, 14)]), -0.7)
    np.testing.assert_allclose(sr(-0.7, [0.9, -0.5, 0.0], scale=0.0), -0.7)


@settings(max_examples=50)
@given(advantage=st.floats(-3, 3).filter(lambda a: abs(a) > 1e-6),
       rewards=st.lists(st.floats(-1, 1), min_size=3, max_size=3), scale=st.floats(0.1, 100))
def test_segment_rewards_keep_the_total_and_order_by_reward(advantage, rewards, scale):
    a = sr(advantage, rewards, scale=scale)
    assert math.isclose(a.sum(), advantage * N, rel_tol=1e-9, abs_tol=1e-6 * scale)
    np.testing.assert_allclose(a[12:], advantage)  # outside every segment: plain
    per_segment = [a[s] for s, _ in SPANS]
    for (r1, a1), (r2, a2) in zip(zip(rewards, per_segment), zip(rewards[1:], per_segment[1:])):
        assert (r1 - r2) * (a1 - a2) >= -1e-9  # a higher reward never gets less advantage


def test_segment_rewards_move_advantage_toward_the_rewarded_segment():
    a = sr(-1.0, [0.9, 0.0, 0.0], scale=2.0)  # a good first step in a failed completion
    mean = (4 * 0.9) / 12
    assert a[0] == pytest.approx(-1.0 + 2.0 * (0.9 - mean)) and a[0] > 0  # pushed up
    assert a[5] == pytest.approx(-1.0 - 2.0 * mean) and a[5] < -1.0  # the rest: more penalty
    # The same rewards in the reweight form keep every sign.
    assert np.all(segment_token_advantages(-1.0, [0.9, 0.0, 0.0], SPANS, N) < 0)


def test_segment_rewards_of_a_zero_advantage_are_zero():
    np.testing.assert_array_equal(sr(0.0, [0.5, -1.0, 0.2]), 0.0)


def test_batch_segment_rewards_need_scales_and_use_them_per_row():
    mask = torch.ones(2, N)
    with pytest.raises(ValueError, match="group scale"):
        batch_token_advantages(torch.tensor([1.0, -1.0]), [[0.0, 1.0, 0.0]] * 2, [SPANS] * 2,
                               mask, form="segment-rewards")
    out = batch_token_advantages(torch.tensor([1.0, -1.0]), [[0.0, 1.0, 0.0]] * 2, [SPANS] * 2,
                                 mask, form="segment-rewards", scales=[2.0, 0.5])
    np.testing.assert_allclose(out[0].numpy(), sr(1.0, [0.0, 1.0, 0.0], scale=2.0))
    np.testing.assert_allclose(out[1].numpy(), sr(-1.0, [0.0, 1.0, 0.0], scale=0.5))


def _trl_advantages(rewards: torch.Tensor, group: int, scale: str) -> torch.Tensor:
    """TRL 1.16's advantage computation (sum_then_normalize), written out."""
    grouped = rewards.view(-1, group)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(group)
    finite = torch.where(torch.isnan(grouped), torch.nanmean(grouped, 1, keepdim=True), grouped)
    counts = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
    var = ((finite - finite.mean(1, keepdim=True)) ** 2).sum(1) / (counts.squeeze(1) - 1)
    std = var.sqrt().repeat_interleave(group)
    if scale == "batch":
        std = rewards[~torch.isnan(rewards)].std().expand_as(rewards)
    adv = rewards - mean
    return torch.nan_to_num(adv if scale == "none" else adv / (std + 1e-4), nan=0.0)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_scales_recover_the_normalisation(scale):
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.5, float("nan"), 0.0, 1.0])
    adv = _trl_advantages(rewards, 4, scale)
    for offset, local in ((0, adv), (4, adv[4:8])):
        scales = group_scales(local.tolist(), rewards.tolist(), 4, offset)
        for i, (a, c) in enumerate(zip(local.tolist(), scales)):
            r = rewards[offset + i].item()
            group = rewards[(offset + i) // 4 * 4:(offset + i) // 4 * 4 + 4]
            gap = r - torch.nanmean(group).item()
            if a == 0 or math.isnan(r):
                assert c == 0.0
            else:
                assert c * gap == pytest.approx(a, rel=1e-6)
                if scale == "none":
                    assert c == pytest.approx(1.0)


def test_group_scales_refuse_partial_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        group_scales([1.0], [1.0, 0.0, 1.0], 4)


# ---- oracle ------------------------------------------------------------------------------------
def test_line_spans_tile_the_tokens_by_line():
    text = "1 + 2 = 3\n3 + 4 = 7\nThe answer is 7."
    starts = [0, 2, 4, 6, 8, 9, 10, 14, 18, 20, 24, 28, 31]  # token 5 is "\n" (line 0)
    assert line_spans(text, starts) == [(0, 6), (6, 9), (9, 13)]
    assert line_spans("", []) == []
    assert line_spans("one line", [0, 3]) == [(0, 2)]


def test_line_spans_give_a_blank_line_its_own_span():
    # The checkers count a blank line as a step (`bench.lines.split_lines`): its "\n" token
    # must not join the line before it, or a blank first wrong step penalises a right line.
    text = "1 + 2 = 3\n\n3 + 4 = 7"
    starts = [0, 2, 4, 6, 8, 9, 10, 11, 13, 15, 17, 19]  # tokens 5 and 6 are the two "\n"
    assert line_spans(text, starts) == [(0, 6), (6, 7), (7, 12)]


@pytest.fixture(scope="module")
def unique():
    from transformers import AutoTokenizer

    from cotcredit.bench.regimes import checkpoint, get_regime
    from cotcredit.data.problems import Problem

    regime = get_regime("unique")
    problems = [Problem(p.id, p.prompt, p.answer, p.solution,
                        extra={"meta": p.meta, "solutions": list(p.solutions)})
                for p in regime.problems("dev", 3)]
    return AutoTokenizer.from_pretrained(checkpoint("unique")), problems


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def test_oracle_penalises_the_first_wrong_step_and_what_follows(unique):
    tokenizer, problems = unique
    p = problems[0]
    lines = p.solution.split("\n")  # the reference: its steps, then "The answer is N."
    a, op, b, _, c = lines[1].split()
    wrong = str(int(c) + 1)
    rest = "\n".join(f"{wrong} {x.split()[1]} {x.split()[2]} = 0" for x in lines[2:-1])
    text = "\n".join([lines[0], f"{a} {op} {b} = {wrong}", rest, "The answer is 0."])
    oracle = OracleCredit(tokenizer, regime_check("unique", problems))
    example = {"problem_id": p.id, "answer": p.answer}
    ids = _ids(tokenizer, text)
    rewards, spans = oracle([1], ids, example=example)
    n_lines = text.count("\n") + 1
    assert rewards == [0.0] + [-1.0] * (n_lines - 1)  # line 1 right, line 2 on: penalised
    assert spans[0][0] == 0 and spans[-1][1] == len(ids) - 1  # every token but EOS
    assert all(e == s2 for (_, e), (s2, _) in zip(spans, spans[1:]))
    assert tokenizer.decode(ids[spans[1][0]:spans[1][1]]).startswith(f"{a} {op} {b} = {wrong}")
    # A correct completion, and one whose wrong step still reaches the right answer: plain GRPO.
    assert oracle([1], _ids(tokenizer, p.solution), example=example) is None
    lucky = p.solution.replace(lines[0], lines[0] + " 7", 1)
    assert oracle([1], _ids(tokenizer, lucky), example=example) is None
    assert oracle.located == 1 and oracle.calls == 3


def _slip_then_right(p) -> str:
    """A completion of `p` with one wrong step (line 2) and every later line right from it on."""
    lines = p.solution.split("\n")
    a, op, b, _, c = lines[1].split()
    wrong = str(int(c) + 1)
    rest = "\n".join(f"{wrong} {x.split()[1]} {x.split()[2]} = 0" for x in lines[2:-1])
    return "\n".join([lines[0], f"{a} {op} {b} = {wrong}", rest, "The answer is 0."])


def test_oracle_first_span_labels_the_first_wrong_line_only(unique):
    tokenizer, problems = unique
    p = problems[0]
    check = regime_check("unique", problems)
    rest, first = OracleCredit(tokenizer, check), OracleCredit(tokenizer, check, span="first")
    assert rest.span == "rest"  # the default: every line from the first wrong one on
    example = {"problem_id": p.id, "answer": p.answer}
    ids = _ids(tokenizer, _slip_then_right(p))
    (r_rest, s_rest), (r_first, s_first) = rest([1], ids, example=example), first(
        [1], ids, example=example)
    assert s_first == s_rest  # the same lines
    assert r_first == [0.0, -1.0] + [0.0] * (len(s_rest) - 2)  # the later lines are neutral
    assert r_rest == [0.0] + [-1.0] * (len(s_rest) - 1)
    # The first line wrong: −1 on it alone.
    class Label:
        correct, error_char = False, 0

    early = OracleCredit(tokenizer, lambda example, response: Label, span="first")
    rewards, _ = early([1], _ids(tokenizer, "1 + 1 = 3\nThe answer is 3."), example={})
    assert rewards == [-1.0, 0.0]
    assert first([1], _ids(tokenizer, p.solution), example=example) is None  # right: GRPO
    with pytest.raises(ValueError, match="span must be one of"):
        OracleCredit(tokenizer, check, span="all")


def test_oracle_span_from_a_train_config(unique, tmp_path):
    from cotcredit.training.config import load_config
    from cotcredit.training.credit import credit_source

    tokenizer, problems = unique
    for span in ("rest", "first"):
        path = tmp_path / f"{span}.yaml"
        path.write_text("train_file: t.jsonl\noutput_dir: out\nadvantage: oracle\n"
                        f"oracle: {{regime: unique, span: {span}}}\n")
        source = credit_source(load_config(path), None, tokenizer, problems)
        assert isinstance(source, OracleCredit) and source.span == span


@pytest.mark.parametrize("form", ["reweight", "segment-rewards"])
def test_oracle_spans_through_the_advantage_forms(unique, form):
    """A wrong and a right completion of one group: the right one keeps its plain advantage
    whatever the span, the wrong one's total stays A · n (the forms' invariant), `rest` is the
    advantage of today's labels computed directly, and `first` puts the wrong line below
    every other line while the lines after it get what the lines before it get."""
    tokenizer, problems = unique
    p = problems[0]
    check = regime_check("unique", problems)
    example = {"problem_id": p.id, "answer": p.answer}
    wrong, right = _ids(tokenizer, _slip_then_right(p)), _ids(tokenizer, p.solution)
    width = max(len(wrong), len(right))
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in (wrong, right)])
    plain = torch.tensor([-0.7, 0.7], dtype=torch.float64)
    rows = {}
    for span in ("rest", "first"):
        scored = OracleCredit(tokenizer, check, span=span).score_batch(
            [[1], [1]], [wrong, right], [example, example])
        assert scored[1] is None
        rows[span] = batch_token_advantages(
            plain, [s and s[0] for s in scored], [s and s[1] for s in scored], mask, form=form,
            scales=[2.0, 2.0])
        torch.testing.assert_close(rows[span][1, :len(right)],
                                   torch.full((len(right),), 0.7, dtype=torch.float64))
        assert rows[span][0].sum().item() == pytest.approx(-0.7 * len(wrong))
    _, spans = OracleCredit(tokenizer, check)([1], wrong, example=example)
    today = segment_token_advantages(-0.7, [0.0] + [-1.0] * (len(spans) - 1), spans, len(wrong),
                                     form=form, scale=2.0)
    np.testing.assert_array_equal(rows["rest"][0].numpy(), today)
    first = rows["first"][0].numpy()
    per_line = [first[s] for s, _ in spans]
    assert per_line[1] < min(per_line[:1] + per_line[2:])  # the wrong line: the most penalty
    assert per_line[0] == pytest.approx(per_line[2]) == pytest.approx(per_line[-1])


def test_oracle_penalises_a_blank_first_wrong_step_not_the_line_before(unique):
    tokenizer, problems = unique
    p = problems[0]
    lines = p.solution.split("\n")
    # Step 2 is a blank line (the first error), and the answer is wrong.
    text = "\n".join([lines[0], "", *lines[1:-1], f"The answer is {int(p.answer) + 1}."])
    oracle = OracleCredit(tokenizer, regime_check("unique", problems))
    label = oracle.check({"problem_id": p.id}, text)
    assert (label.first_error_step, label.error_kind) == (2, "garbled")
    ids = _ids(tokenizer, text)
    rewards, spans = oracle([1], ids, example={"problem_id": p.id, "answer": p.answer})
    assert rewards[0] == 0.0 and set(rewards[1:]) == {-1.0}  # the right first line is spared
    assert tokenizer.decode(ids[spans[0][0]:spans[0][1]]) == lines[0] + "\n"


def test_oracle_with_its_own_checker_and_errors(unique):
    tokenizer, problems = unique

    class Label:
        correct, error_char = False, 0

    oracle = OracleCredit(tokenizer, lambda example, response: Label)
    rewards, _ = oracle([1], _ids(tokenizer, "1 + 1 = 3\nThe answer is 3."), example={})
    assert rewards == [-1.0, -1.0]  # the first line is wrong: every line penalised (= GRPO)
    check = regime_check("unique", problems)
    with pytest.raises(ValueError, match="no training problem"):
        check({"problem_id": "nope"}, "x")
    from cotcredit.data.problems import Problem
    from cotcredit.errors import UserError

    with pytest.raises(UserError, match="no 'meta' field"):
        regime_check("unique", [Problem("a", "Start at 1. Add 2.", "3")])


# ---- Monte Carlo -------------------------------------------------------------------------------
def test_monte_carlo_values_are_greedy_rollouts_from_each_line(unique):
    """With temperature 0 every rollout is the greedy continuation, so V_k is 1 or 0: whether
    the policy, continuing greedily after line k, reaches the answer. Computed here directly,
    one prefix at a time, from the completion's own line spans."""
    from transformers import AutoModelForCausalLM

    from cotcredit.bench.regimes import checkpoint
    from cotcredit.data.grading import grade_completion
    from cotcredit.lm.generation import SamplingOptions
    from cotcredit.lm.sampling import HFGenerator
    from cotcredit.training.credit import McCredit
    from cotcredit.training.run import prompt_field, prompt_ids

    tokenizer, problems = unique
    model = AutoModelForCausalLM.from_pretrained(checkpoint("unique")).eval()
    p = problems[1]
    example = {"prompt": p.prompt, "answer": p.answer, "problem_id": p.id}
    prompt = prompt_ids(tokenizer, prompt_field(p.prompt, True, None, tokenizer))
    lines = p.solution.split("\n")
    a, op, b, _, c = lines[0].split()
    wrong = "\n".join([f"{a} {op} {b} = {int(c) + 1}", *lines[1:-1], "The answer is 0."])
    completions = [_ids(tokenizer, p.solution), _ids(tokenizer, wrong), _ids(tokenizer, p.solution)]
    mc = McCredit(model, tokenizer, segments="lines", rollouts=3, temperature=0.0,
                  max_new_tokens=64)
    results = mc.score_batch([prompt] * 3, completions, [example] * 3, [1.0, 0.0, 1.0])
    assert results[0] == results[2]

    greedy = SamplingOptions(n=1, temperature=0.0, max_new_tokens=64)
    generator = HFGenerator(model, tokenizer)
    for ids, zeta, (rewards, spans) in zip(completions, (1.0, 0.0), results):
        text = tokenizer.decode(ids[:-1])
        reasoning_lines = text.split("\n")[:-1]  # the answer line is no segment
        assert len(spans) == len(reasoning_lines) == len(rewards)
        values = []
        for k in range(len(spans)):
            prefix_ids = prompt + ids[: spans[k][0]]
            prefix_text = tokenizer.decode(ids[: spans[k][0]])
            out = generator.generate([prefix_ids], greedy)[0][0]
            values.append(float(grade_completion(out.text, p.answer, prefix=prefix_text).correct))
        expected = [v1 - v0 for v0, v1 in zip(values, [*values[1:], zeta])]
        assert rewards == pytest.approx(expected)
        assert sum(rewards) == pytest.approx(zeta - values[0])
    # Distinct states only: the prompt once, the shared correct prefixes once.
    n_right, n_wrong = len(results[0][1]), len(results[1][1])
    assert mc.states == 1 + (n_right - 1) + (n_wrong - 1)
    assert mc.rollouts_sampled == 3 * mc.states


# ---- the trainer's segment-rewards step ------------------------------------------------------
def test_segment_rewards_reach_the_loss_scaled_by_the_group(tiny_model_dir, tmp_path):
    """Two GRPO steps with a dummy source (halves, rewards [0.2, 0.8]) in form segment-rewards:
    the token advantages are A + c·(r_k − r̄) with c = 1 / (the group's reward std + 1e-4),
    TRL's own normalisation, read back from the rewards of the batch."""
    import warnings

    from test_train_smoke import Halves, RecordingTrainer, even_token_reward, grpo_args, toy_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    class Keep(RecordingTrainer):
        def _rredcot_advantages(self, output):
            self.rewards_seen = getattr(self, "rewards_seen", []) + [self._rewards_per_func.clone()]
            return super()._rredcot_advantages(output)

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        trainer = Keep(
            model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), reward_funcs=even_token_reward,
            args=grpo_args(tmp_path, generation_kwargs={
                "sequence_bias": [[[tokenizer.eos_token_id], 3.0]]}),
            train_dataset=toy_dataset(), processing_class=tokenizer, advantage_mode="rredcot",
            segment_rewards_fn=Halves(), form="segment-rewards",
        )
        trainer.train()
    assert len(trainer.rredcot_steps) == 2
    for (output, token_advantages), rewards in zip(trainer.rredcot_steps, trainer.rewards_seen):
        plain, mask = output["advantages"], output["completion_mask"]
        lengths = mask.sum(dim=1)
        torch.testing.assert_close(token_advantages.sum(dim=1), plain * lengths.to(plain.dtype))
        totals = rewards.sum(dim=1).view(-1, 2)  # num_generations 2
        std = totals.std(dim=1).repeat_interleave(2)
        scales = (1.0 / (std + 1e-4)).tolist()
        n = len(plain)  # one process: the local rows are the first n
        spans = [[(0, int(k) // 2), (int(k) // 2, int(k))] for k in lengths]
        expected = batch_token_advantages(plain, [[0.2, 0.8]] * n, spans, mask,
                                          form="segment-rewards", scales=scales[:n])
        keep = plain != 0  # zero-advantage rows are not scored (their rows stay 0)
        torch.testing.assert_close(token_advantages[keep], expected[keep])
    assert any(bool((a < 0).any() and (a > 0).any())  # signs differ inside a completion
               for _, t in trainer.rredcot_steps for a in t)


# ---- every source and form through `train` -----------------------------------------------------
TRAIN_CONFIG = """\
model: {model}
train_file: train.jsonl
output_dir: out-{name}
seed: 3
advantage: {advantage}
credit: {{form: {form}, segments: lines, shuffled: oracle}}
oracle: {{regime: unique}}
mc: {{rollouts: 2}}
method: {{name: mc, options: {{rollouts: auto, rollout_budget: 2, round_rollouts: 1, first_round: ends,
                              max_new_tokens: 8}}}}
rredcot: {{value: both, exit_string: "The answer is "}}
grpo:
  num_generations: 4
  per_device_train_batch_size: 8
  max_completion_length: 48
  max_steps: 2
  save_steps: 2
  learning_rate: 1.0e-4
  beta: 0.0
  gradient_checkpointing: false
  report_to: none
  extra: {{disable_tqdm: true, dataloader_pin_memory: false}}
"""


@pytest.fixture(scope="module")
def unique_train_file(tmp_path_factory):
    from cotcredit.bench.regimes import get_regime
    from cotcredit.bench.regimes.base import write_problems

    folder = tmp_path_factory.mktemp("unique-train")
    write_problems(get_regime("unique").problems("train", 8), folder / "train.jsonl")
    return folder


@pytest.mark.parametrize("advantage,form", [
    ("grpo", "reweight"),
    *[(a, f) for a in ("oracle", "mc", "rredcot", "shuffled")
      for f in ("reweight", "segment-rewards")],
    ("method", "reweight"),
])
def test_every_source_and_form_trains_two_steps(unique_train_file, advantage, form):
    import yaml

    from cotcredit.bench.regimes import checkpoint
    from cotcredit.training.metrics import read_metrics
    from cotcredit.training.run import train

    torch.set_num_threads(1)
    name = f"{advantage}-{form}"
    path = unique_train_file / f"{name}.yaml"
    path.write_text(TRAIN_CONFIG.format(model=checkpoint("unique"), name=name,
                                        advantage=advantage, form=form))
    result = train(path, overwrite=True)
    rows = read_metrics(result.metrics)
    assert [r["step"] for r in rows] == [1, 2] and result.checkpoint.name == "checkpoint-2"
    written = yaml.safe_load(result.config.read_text())
    assert (written["advantage"], written["credit"]["form"]) == (advantage, form)
    scored = [r.get("rredcot/scored_fraction") for r in rows]
    if advantage == "grpo":
        assert scored == [None, None]
    else:  # the source ran on every step (it scores only completions of mixed groups)
        assert all(s is not None and 0.0 <= s <= 1.0 for s in scored)
