"""The online scoring API: a batch equals its completions one by one, equals the analysis path,
and bad input is one error naming the row."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import cotcredit
from cotcredit.lm import Scorer
from cotcredit.methods import TraceContext
from cotcredit.methods.rredcot import RredcotOptions, estimate, redistribute_rewards
from cotcredit.segmentation import SegmentOptions, segment_encoded
from cotcredit.training.online import CompletionError, OnlineRredcot, unwrap

PROMPTS = ["What is 3 + 4?", "Apples cost 5, oranges 7. Total?", "A pear costs 4. Two pears?"]
RESPONSES = [
    "Let me think step by step.\nFirst, 3 + 4 = 7.\nWait, check again.\nSo it is 7.\n"
    "The final answer is $\\boxed{7}$.",
    "Apples cost 5 dollars.\nHmm, but oranges cost 7.\nNow add them: 5 + 7 = 12.\n"
    "The final answer is $\\boxed{12}$.",
    "The price of a pear is 3. Actually no, it is 4.\nNext, multiply by 2 to get 8.\n"
    "Finally we are done.\nThe final answer is $\\boxed{9}$.",
]
ANSWERS = ["7", "12", "8"]
SOLUTIONS = ["3 + 4 = 7.", None, "4 + 4 = 8."]


def batch(scorer: Scorer, n: int = 6):
    tok = scorer.tokenizer
    p, c, a, s = [], [], [], []
    for i in range(n):
        j = i % 3
        p.append(scorer.encode_prompt(PROMPTS[j]))
        ids = tok.encode(RESPONSES[j], add_special_tokens=False)
        c.append(ids[: len(ids) - (i // 3)] + [tok.eos_token_id])  # rows of different lengths
        a.append(ANSWERS[j])
        s.append(SOLUTIONS[j])
    return p, c, a, s


@pytest.mark.parametrize("value", ["rhat", "both"])
def test_a_batch_equals_its_completions_one_by_one_and_the_analysis_path(scorer, value):
    # The given solutions only: siblings make a completion's v̂ depend on its group by design.
    online = OnlineRredcot(scorer.model, scorer.tokenizer, RredcotOptions(value=value,
                                                                          sum_to="advantage",
                                                                          references="solutions"),
                           segments=3)
    p, c, a, s = batch(scorer)
    together = online(p, c, a, s)
    for i in range(len(p)):
        alone = online.score_one(p[i], c[i], a[i], s[i])
        got = together[i]
        assert got.spans == alone.spans
        assert np.allclose(got.rewards, alone.rewards, atol=1e-5, rtol=0)
        assert np.allclose(got.g, alone.g, atol=1e-5, rtol=0)
        # Direct computation through the analysis functions, one trace at a time.
        enc = got.encoded
        direct = Scorer(scorer.model, scorer.tokenizer)
        fwd = direct.forward(enc.ids, stats_from=enc.prompt_len)
        seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=3))
        assert [(x.token_start, x.token_end) for x in seg.segments] == got.spans
        est = estimate(TraceContext(direct, enc, fwd, seg), online.options)
        expected, _ = redistribute_rewards(est.g, got.outcome, sum_to="advantage")
        assert np.allclose(got.rewards, expected, atol=1e-5, rtol=0)
        assert math.fsum(got.rewards) == pytest.approx(got.outcome - got.g[0], abs=1e-9)
        assert got.spans[0][0] == 0 and all(x < y for x, y in got.spans)


def test_lines_segments_a_completion_per_line(scorer):
    """segments="lines": one span per reasoning line, the spans `segment -k lines` makes."""
    online = OnlineRredcot(scorer.model, scorer.tokenizer, segments="lines")
    p, c, a, s = batch(scorer, 3)
    for got in online(p, c, a, s):
        enc = got.encoded
        assert len(got.spans) == len(enc.reasoning_text.splitlines())
        seg = segment_encoded(enc, None, SegmentOptions(segments="lines"))
        assert [(x.token_start, x.token_end) for x in seg.segments] == got.spans
        assert math.fsum(got.rewards) == pytest.approx(got.outcome - got.g[0], abs=1e-9)


def test_micro_batches_and_tiny_probe_budgets_give_the_same_numbers(scorer):
    p, c, a, s = batch(scorer)
    ref = OnlineRredcot(scorer.model, scorer.tokenizer, segments=3)(p, c, a, s)
    small = OnlineRredcot(scorer.model, scorer.tokenizer, segments=3, max_batch_tokens=90)
    small.scorer.query_budget = 20  # many packed passes per row (its own scorer)
    got = small(p, c, a, s)
    for x, y in zip(ref, got):
        assert x.spans == y.spans and np.allclose(x.rewards, y.rewards, atol=1e-5, rtol=0)


def test_outcome_passed_in_is_the_redistributed_return(scorer):
    p, c, a, s = batch(scorer, 3)
    online = OnlineRredcot(scorer.model, scorer.tokenizer, segments=3)
    graded = online(p, c, a, s)
    assert [g.outcome for g in graded] == [1.0, 1.0, 0.0]  # math-verify on \boxed{}
    given = online(p, c, a, s, outcomes=[0.25, -1.0, 2.5])
    for g, z, base in zip(given, [0.25, -1.0, 2.5], graded):
        assert g.outcome == z and g.g == pytest.approx(base.g, abs=1e-12)
        assert math.fsum(g.rewards) == pytest.approx(z - g.g[0], abs=1e-9)
        # Only the last segment absorbs the other outcome.
        assert g.rewards[:-1] == pytest.approx(base.rewards[:-1], abs=1e-12)
    ret = OnlineRredcot(scorer.model, scorer.tokenizer, RredcotOptions(value="rhat"), segments=3)
    assert [math.fsum(r.rewards) for r in ret(p, c, a, s, outcomes=[0.25, -1.0, 2.5])] == (
        pytest.approx([0.25, -1.0, 2.5], abs=1e-9)
    )


def test_bad_input_is_one_error_naming_the_row(scorer):
    tok = scorer.tokenizer
    online = OnlineRredcot(scorer.model, tok, segments=3)
    p, c, a, s = batch(scorer, 3)
    with pytest.raises(CompletionError, match="batch sizes differ: prompt_ids 3, completion_ids 2"):
        online(p, c[:2], a)
    no_reasoning = tok.encode("The final answer is $\\boxed{7}$.", add_special_tokens=False)
    with pytest.raises(CompletionError, match=r"^row 1: .*reasoning") as exc:
        online(p, [c[0], no_reasoning, c[2]], a)
    assert exc.value.row == 1 and "\n" not in str(exc.value)
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, cotcredit.errors.UserError)
    with pytest.raises(CompletionError, match=r"^row 2: completion token id 99999"):
        online(p, [c[0], c[1], [99999]], a)
    with pytest.raises(CompletionError, match=r"^row 0: no reference answer"):
        online(p, c, [None, "12", "8"])
    skip = OnlineRredcot(scorer.model, tok, segments=3, on_unscorable="skip")
    got = skip(p, [c[0], no_reasoning, c[2]], a)
    assert got[1] is None and got[0] is not None and got[2] is not None
    # Spans outside the completion, given to the token advantages: the row is named.
    mask = torch.ones(2, 5)
    with pytest.raises(ValueError, match=r"row 1: token span \(3, 9\) is outside"):
        cotcredit.token_advantages(torch.tensor([1.0, 1.0]), [[0.1], [0.2]], [[(0, 2)], [(3, 9)]],
                                   mask)


def test_a_model_whose_head_is_not_reproduced_is_refused(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    model.config.logit_scale = 3.0  # we would apply a scale its own forward does not
    online = OnlineRredcot(model, tok, segments=3)
    ids = tok.encode(RESPONSES[0], add_special_tokens=False)
    with pytest.raises(cotcredit.errors.UserError, match="does not reproduce"):
        online([[1, 2, 3]], [ids], ["7"])


def test_wrapped_and_peft_models_are_scored_through_their_wrappers(scorer, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    wrapped = torch.nn.parallel.DistributedDataParallel.__new__(
        torch.nn.parallel.DistributedDataParallel
    )
    torch.nn.Module.__init__(wrapped)
    wrapped.module = scorer.model
    assert unwrap(wrapped) is scorer.model
    with pytest.raises(TypeError, match="not a transformers causal LM"):
        unwrap(torch.nn.Linear(2, 2))

    peft = pytest.importorskip("peft")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8,
                                                     target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a non-zero adapter, so scores differ from the base model's
        for name, w in lora.named_parameters():
            if "lora_B" in name:
                w.normal_(0, 0.5)
    p, c, a, s = batch(scorer, 3)
    adapted = OnlineRredcot(lora, scorer.tokenizer, segments=3)(p, c, a)
    plain = OnlineRredcot(base, scorer.tokenizer, segments=3)
    with lora.disable_adapter():
        without = plain(p, c, a)
    # g are probabilities (tiny for a random model): compare them relatively.
    assert any(not np.allclose(x.g, y.g, rtol=1e-2, atol=0) for x, y in zip(adapted, without))
    merged = lora.merge_and_unload()
    again = OnlineRredcot(merged, scorer.tokenizer, segments=3)(p, c, a)
    for x, y in zip(adapted, again):
        assert np.allclose(x.g, y.g, rtol=1e-4, atol=0)


def test_out_of_memory_halves_the_batch_with_the_same_numbers(scorer):
    p, c, a, s = batch(scorer)
    ref = OnlineRredcot(scorer.model, scorer.tokenizer, segments=3)(p, c, a, s)
    online = OnlineRredcot(scorer.model, scorer.tokenizer, segments=3)
    real = online.scorer.forward_batch
    sizes = []

    def small_memory(seqs, stats_from):
        sizes.append(len(seqs))
        if len(seqs) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(seqs, stats_from)

    online.scorer.forward_batch = small_memory
    got = online(p, c, a, s)
    assert sizes[0] == 6 and max(sizes[1:]) <= 3 and 2 in sizes
    for x, y in zip(ref, got):
        assert x.spans == y.spans and np.allclose(x.rewards, y.rewards, atol=1e-5, rtol=0)


def test_value_both_without_a_solution_warns_once_and_counts(scorer):
    """A completion without a reference solution gets R̂ alone under value 'both': the caller is
    told once and every such completion is counted (a trainer that forgot to pass solutions
    would otherwise train on R̂ credit it believes is R̂ + v̂)."""
    options = RredcotOptions(value="both", sum_to="advantage", references="solutions")
    online = OnlineRredcot(scorer.model, scorer.tokenizer, options, segments=3)
    p, c, a, s = batch(scorer)
    with pytest.warns(UserWarning, match="without a reference solution") as caught:
        online(p, c, a, [None] * len(p))
        online(p, c, a, [None] * len(p))
    assert len([w for w in caught if "reference solution" in str(w.message)]) == 1
    assert online.without_solution == 2 * len(p)
    fresh = OnlineRredcot(scorer.model, scorer.tokenizer, options, segments=3)
    fresh(p, c, a, s)  # SOLUTIONS has one None in three
    assert fresh.without_solution == sum(x is None for x in s)


def test_siblings_count_completions_left_without_any_reference(scorer):
    """Under the default references (siblings), a completion without a solution still gets v̂
    from a right sibling of its group; only those with neither are warned about and counted. A
    completion scored alone (no group) follows its listed solutions, as `solutions` does."""
    options = RredcotOptions(value="both", sum_to="advantage")
    assert options.references == "siblings"
    online = OnlineRredcot(scorer.model, scorer.tokenizer, options, segments=3)
    p, c, a, s = batch(scorer)  # rows i and i + 3 share a prompt
    outcomes = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    with pytest.warns(UserWarning, match="without a reference solution"):
        online(p, c, a, [None] * len(p), outcomes)
    # Row i's only sibling is row i + 3 (mod 6): rows 1, 4 and 5 have no right one.
    alone = [i for i in range(6) if outcomes[(i + 3) % 6] < 0.5]
    assert online.without_solution == len(alone) == 3
    listed = OnlineRredcot(scorer.model, scorer.tokenizer,
                           RredcotOptions(**{**options.__dict__, "references": "solutions"}),
                           segments=3)
    for i in (0, 2):
        one, want = online.score_one(p[i], c[i], a[i], s[i]), listed.score_one(p[i], c[i], a[i],
                                                                                s[i])
        assert np.array_equal(one.g, want.g) and np.array_equal(one.rewards, want.rewards)


def _direct_estimate(scorer, got, options, references):
    """R̂, v̂, g of one scored completion through the analysis functions, one trace at a time."""
    enc = got.encoded
    direct = Scorer(scorer.model, scorer.tokenizer)
    fwd = direct.forward(enc.ids, stats_from=enc.prompt_len)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=3))
    return estimate(TraceContext(direct, enc, fwd, seg), options, references)


def test_several_solutions_per_completion_equal_the_direct_computation(scorer):
    # v̂ alone: on a random model R̂ would swamp the difference the second reference makes; and
    # `matched`, not `suffixes`: v̂ alone keeps the empty suffix (R̂'s probe, shared by every
    # reference), which would swamp it too.
    options = RredcotOptions(value="vhat", sum_to="advantage", references="solutions",
                             solution_part="matched", mixture="mean", empty_part="drop")
    p, c, a, _ = batch(scorer, 3)
    lists = [["3 + 4 = 7.", "4 + 3 = 7.\nSo 7."], "5 + 7 = 12.", ["4 + 4 = 8.", "2 * 4 = 8."]]
    got = OnlineRredcot(scorer.model, scorer.tokenizer, options, segments=3)(p, c, a, lists)
    first = OnlineRredcot(scorer.model, scorer.tokenizer,
                          RredcotOptions(**{**options.__dict__, "references": "solution"}),
                          segments=3)(p, c, a, lists)
    for row, refs, one in zip(got, lists, first, strict=True):
        refs = [refs] if isinstance(refs, str) else refs
        est = _direct_estimate(scorer, row, options, refs)
        assert np.allclose(row.g, est.g, rtol=1e-4, atol=0)
        # `references="solution"` follows the first only.
        alone = _direct_estimate(scorer, one, options, refs[:1])
        assert np.allclose(one.g, alone.g, rtol=1e-4, atol=0)
    assert not np.allclose(got[0].g, first[0].g, rtol=1e-6, atol=0)


def test_siblings_are_the_groups_right_completions(scorer):
    """references="siblings": a completion also follows the other completions of the batch
    given the same prompt ids that reached the answer (a GRPO group), never itself."""
    options = RredcotOptions(value="both", sum_to="advantage", references="siblings",
                             solution_part="matched", mixture="mean", empty_part="drop")
    p, c, a, s = batch(scorer, 6)  # rows i and i + 3 share a prompt
    outcomes = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    online = OnlineRredcot(scorer.model, scorer.tokenizer, options, segments=3)
    got = online(p, c, a, s, outcomes)
    texts = [r.encoded.trace.response for r in got]
    for i, row in enumerate(got):
        j = (i + 3) % 6
        refs = [s[i]] + ([texts[j]] if outcomes[j] >= 0.5 else [])
        est = _direct_estimate(scorer, row, options, refs)
        assert np.allclose(row.g, est.g, rtol=1e-4, atol=0), i
    assert texts[0] != texts[3]  # the sibling is another text, not the row itself
