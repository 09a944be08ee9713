"""The sampling interface: determinism, batching invariance, stops, truncation, OOM, backends."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch

from cotcredit.errors import UserError
from cotcredit.lm.generation import (
    Completion,
    SamplingOptions,
    decode_continuation,
    default_keys,
    row_seed,
    stop_token_ids,
)
from cotcredit.lm.sampling import HFGenerator, get_generator

TEXTS = ["Let me think step by step.", "So the answer is 12", "Apples cost",
         "Wait, check again. Hmm"]


@pytest.fixture
def prompts(scorer):
    # Different lengths, so a batch needs left padding.
    return [scorer.encode_prompt(t) for t in TEXTS]


@pytest.fixture
def gen(scorer):
    return HFGenerator(scorer.model, scorer.tokenizer)


def ids(result):
    return [[c.token_ids for c in cs] for cs in result]


def test_options_validate():
    SamplingOptions().validate()
    for bad in (dict(n=0), dict(temperature=-1), dict(top_p=0), dict(top_p=1.5),
                dict(max_new_tokens=0), dict(batch_size=0), dict(backend="tgi")):
        with pytest.raises(UserError):
            SamplingOptions(**bad).validate()


def test_same_seed_identical_other_seed_differs(gen, prompts):
    o = SamplingOptions(n=3, temperature=1.0, max_new_tokens=12, seed=7)
    a = gen.generate(prompts, o)
    b = gen.generate(prompts, o)
    assert ids(a) == ids(b)
    assert [[c.text for c in cs] for cs in a] == [[c.text for c in cs] for cs in b]
    assert all(len(cs) == 3 for cs in a)
    # The samples of one prompt are not copies of each other.
    assert any(len({tuple(c.token_ids) for c in cs}) > 1 for cs in a)
    other = gen.generate(prompts, SamplingOptions(n=3, temperature=1.0, max_new_tokens=12, seed=8))
    assert ids(other) != ids(a)


def test_rows_do_not_depend_on_batching_or_order(gen, prompts):
    """Left-padded batches with a shared prefill give what one prompt at a time gives."""
    o = SamplingOptions(n=3, temperature=1.0, top_p=0.9, max_new_tokens=10, seed=1)
    whole = gen.generate(prompts, o)
    one_by_one = [gen.generate([p], o, keys=[k])[0]
                  for p, k in zip(prompts, default_keys(prompts), strict=True)]
    assert ids(whole) == ids(one_by_one)
    single_rows = gen.generate(prompts, SamplingOptions(**{**o.__dict__, "batch_size": 1}))
    assert ids(single_rows) == ids(whole)
    reversed_ = gen.generate(prompts[::-1], o, keys=default_keys(prompts)[::-1])[::-1]
    assert ids(reversed_) == ids(whole)


def test_greedy_batch_equals_one_by_one(gen, prompts):
    o = SamplingOptions(n=2, temperature=0, max_new_tokens=8)
    batch = gen.generate(prompts, o)
    single = [gen.generate([p], o)[0] for p in prompts]
    assert ids(batch) == ids(single)
    assert all(cs[0].token_ids == cs[1].token_ids for cs in batch)  # greedy: n copies


def test_greedy_matches_argmax_of_full_forward(gen, scorer, prompts):
    """The cached, padded path picks what argmax over an uncached forward pass picks."""
    out = gen.generate(prompts, SamplingOptions(temperature=0, max_new_tokens=5))
    for p, cs in zip(prompts, out, strict=True):
        seq = list(p)
        for _ in range(5):
            with torch.no_grad():
                logits = scorer.model(input_ids=torch.tensor([seq])).logits[0, -1]
            seq.append(int(logits.argmax()))
        assert cs[0].token_ids == seq[len(p):]


def test_model_generation_config_is_ignored(gen, scorer, prompts):
    o = SamplingOptions(temperature=0, max_new_tokens=6)
    before = gen.generate(prompts, o)
    saved = scorer.model.generation_config.repetition_penalty
    scorer.model.generation_config.repetition_penalty = 50.0
    try:
        after = gen.generate(prompts, o)
    finally:
        scorer.model.generation_config.repetition_penalty = saved
    assert ids(before) == ids(after)


def test_truncation_accounting(gen, prompts):
    out = gen.generate(prompts, SamplingOptions(n=2, max_new_tokens=3, seed=0))
    for cs in out:
        for c in cs:
            if c.truncated:
                assert c.finish_reason == "length" and len(c.token_ids) == 3
            else:
                assert c.finish_reason == "stop" and len(c.token_ids) < 3


def test_stop_token_ends_a_completion(scorer, prompts):
    g = HFGenerator(scorer.model, scorer.tokenizer)
    greedy = g.generate(prompts[:1], SamplingOptions(temperature=0, max_new_tokens=6))[0][0]
    g.stop_ids = [*g.stop_ids, greedy.token_ids[2]]  # make the third greedy token a stop token
    stopped = g.generate(prompts[:1], SamplingOptions(temperature=0, max_new_tokens=6))[0][0]
    first = greedy.token_ids.index(greedy.token_ids[2])
    assert stopped.finish_reason == "stop" and not stopped.truncated
    assert stopped.token_ids == greedy.token_ids[:first]


def test_stop_tokens_include_chat_end(scorer):
    stops = stop_token_ids(scorer.tokenizer, scorer.model)
    assert scorer.tokenizer.convert_tokens_to_ids("<|im_end|>") in stops
    assert scorer.tokenizer.convert_tokens_to_ids("<|endoftext|>") in stops


def test_out_of_memory_halves_the_batch(scorer, prompts, monkeypatch):
    g = HFGenerator(scorer.model, scorer.tokenizer)
    o = SamplingOptions(n=2, max_new_tokens=6, seed=3, batch_size=8)
    expected = g.generate(prompts, o)
    real = HFGenerator._decode_rows

    def fake(self, prompts_, keys, rows, slots, *rest):
        if slots > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, prompts_, keys, rows, slots, *rest)

    monkeypatch.setattr(HFGenerator, "_decode_rows", fake)
    got = g.generate(prompts, o)
    assert ids(got) == ids(expected)
    assert g.stats.oom_retries >= 1 and g.stats.batch_sizes[-1] <= 2

    def always(self, *a):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(HFGenerator, "_decode_rows", always)
    with pytest.raises(UserError, match="out of memory"):
        HFGenerator(scorer.model, scorer.tokenizer).generate(prompts[:1], o)


def test_out_of_memory_mid_decoding_keeps_finished_rows(scorer, prompts, monkeypatch):
    """An out-of-memory error after some rows ended: those are kept, the rows in flight are
    decoded again from their start in fewer slots, and every completion is the same."""
    from cotcredit.lm.slots import SlotCache

    o = SamplingOptions(n=3, max_new_tokens=12, seed=5, batch_size=6)

    def generator():
        g = HFGenerator(scorer.model, scorer.tokenizer)
        g.stop_ids = [*g.stop_ids, *range(3, len(scorer.tokenizer), 4)]  # rows end unevenly
        return g

    expected = generator().generate(prompts, o)
    g = generator()
    steps = {"n": 0, "rows_done_before": 0}
    real_advance = SlotCache.advance
    progress: list[int] = []

    def flaky(self):
        steps["n"] += 1
        if steps["n"] == 6:
            steps["rows_done_before"] = sum(progress)
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        real_advance(self)

    monkeypatch.setattr(SlotCache, "advance", flaky)
    got = g.generate(prompts, o, progress=progress.append)
    assert ids(got) == ids(expected)
    assert g.stats.oom_retries == 1 and g.stats.batch_sizes == [3]
    assert 0 < steps["rows_done_before"] < 4 * 3  # the error came with rows done and in flight
    assert sum(progress) == 4 * 3  # every row reported once


def test_other_errors_are_not_swallowed(scorer, prompts, monkeypatch):
    def broken(self, *a):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(HFGenerator, "_decode_rows", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        HFGenerator(scorer.model, scorer.tokenizer).generate(prompts,
                                                             SamplingOptions(max_new_tokens=2))


def test_auto_batch_size_is_bounded(gen):
    assert 1 <= gen.auto_batch_size(100) <= 32
    assert gen.auto_batch_size(10**9) == 1


def test_decode_continuation(scorer):
    tok = scorer.tokenizer
    prompt = scorer.encode_text("So the answer")
    gen_ids = scorer.encode_text(" is 12")
    assert decode_continuation(tok, prompt, gen_ids) == " is 12"
    assert decode_continuation(tok, prompt, []) == ""


def test_keys_and_seeds():
    assert row_seed(0, "a", 0) == row_seed(0, "a", 0)
    seeds = {row_seed(0, "a", 0), row_seed(1, "a", 0), row_seed(0, "b", 0), row_seed(0, "a", 1)}
    assert len(seeds) == 4
    k = default_keys([[1, 2], [3], [1, 2]])
    assert k[0] != k[2] and k[0].split("#")[0] == k[2].split("#")[0]


def test_get_generator_makes_a_new_one_per_call(scorer):
    """(A method gets the run's one, reused: tests/methods/test_method_contract.py.)"""
    assert get_generator(scorer, "hf") is not get_generator(scorer, "hf")
    with pytest.raises(UserError):
        get_generator(scorer, "nope")


def test_vllm_missing_is_a_user_error(scorer, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(UserError, match="needs the vllm extra"):
        get_generator(scorer, "vllm")


def test_vllm_backend_plumbing(scorer, prompts, monkeypatch):
    """With a stand-in vllm module: prompts go in as token ids with per-prompt seeds, n samples
    come back as Completions with the stop token removed and finish reasons mapped."""
    calls = {}
    stop = scorer.tokenizer.convert_tokens_to_ids("<|im_end|>")

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    class LLM:
        def __init__(self, **kw):
            calls["init"] = kw

        def generate(self, inputs, params, use_tqdm=False):
            calls["inputs"], calls["params"] = inputs, params
            outs = []
            for p in params:
                cs = [types.SimpleNamespace(token_ids=[5, 6, stop], text="x", finish_reason="stop"),
                      types.SimpleNamespace(token_ids=[7, 8, 9], text="y", finish_reason="length")]
                outs.append(types.SimpleNamespace(outputs=cs[: p.n]))
            return outs

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", fake)
    import cotcredit.lm.vllm_sampling as generation

    monkeypatch.setattr(generation, "_VLLM", {})
    g = get_generator(scorer, "vllm")
    o = SamplingOptions(n=2, temperature=0.7, top_p=0.9, max_new_tokens=5, seed=4, backend="vllm")
    out = g.generate(prompts, o, keys=["a", "b", "c", "d"])
    assert calls["init"]["enable_prefix_caching"] is True
    assert [x["prompt_token_ids"] for x in calls["inputs"]] == prompts
    p0 = calls["params"][0]
    assert (p0.n, p0.temperature, p0.top_p, p0.max_tokens) == (2, 0.7, 0.9, 5)
    assert p0.seed == row_seed(4, "a", 0) % (1 << 63) and calls["params"][1].seed != p0.seed
    assert stop in p0.stop_token_ids
    text = decode_continuation(scorer.tokenizer, prompts[0], [5, 6])
    assert out[0][0] == Completion([5, 6], text, "stop")
    assert out[0][1].truncated and out[0][1].token_ids == [7, 8, 9]


def test_vllm_under_a_launcher_warns_that_processes_share_a_gpu(scorer, monkeypatch):
    """Under a launcher each process's one-GPU engine lands on GPU 0: said once per engine, and
    not when the user chose vLLM's own distributed executor."""
    class LLM:
        def __init__(self, **kw):
            self.kw = kw

    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = LLM, dict
    monkeypatch.setitem(sys.modules, "vllm", fake)
    import cotcredit.lm.vllm_sampling as generation

    monkeypatch.setattr(generation, "_VLLM", {})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        get_generator(scorer, "vllm")
    assert not [w for w in seen if "launcher" in str(w.message)]  # one process: nothing said
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(generation, "_VLLM", {})
    with pytest.warns(UserWarning, match="all on GPU 0"):
        get_generator(scorer, "vllm")
    monkeypatch.setattr(generation, "_VLLM", {})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        g = get_generator(scorer, "vllm", {"distributed_executor_backend": "external_launcher"})
    assert not [w for w in seen if "launcher" in str(w.message)]
    assert g.llm.kw["distributed_executor_backend"] == "external_launcher"


def test_vllm_engine_arguments_parse_and_need_the_vllm_backend():
    from cotcredit.errors import UserError
    from cotcredit.lm.generation import parse_engine_args

    args = ["tensor_parallel_size=2", "gpu_memory_utilization=0.8", "enforce_eager=true",
            "quantization=fp8"]
    assert parse_engine_args(args) == {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.8,
                                       "enforce_eager": True, "quantization": "fp8"}
    with pytest.raises(UserError, match="needs --backend vllm"):
        parse_engine_args(["tensor_parallel_size=2"], backend="hf")
    with pytest.raises(UserError, match="expected KEY=VALUE"):
        parse_engine_args(["tensor_parallel_size"])


def test_vllm_backend_without_vllm_is_one_line(scorer):
    import importlib.util

    from cotcredit.errors import UserError
    from cotcredit.lm.sampling import get_generator

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    with pytest.raises(UserError, match="needs the vllm extra"):
        get_generator(scorer, "vllm", {"tensor_parallel_size": 2})
