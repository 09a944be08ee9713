"""Scorer primitives: alignment of tokens and text, chunked stats, packed = naive probes."""

import re

import numpy as np
import pytest
import torch

from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm import Continuation, ModelOptions, Scorer, load_scorer

TRACE = Trace("a", "What is 3+4?",
              "Let me think. 3 + 4 = 7 \U0001f600.\nWait, yes 7.\nSo 7.\n"
              "The final answer is $\\boxed{7}$.", "7")


def test_encode_is_prompt_then_reasoning_tokens(scorer):
    enc = scorer.encode(TRACE)
    assert enc.ids == scorer.encode_prompt(TRACE.prompt) + enc.reasoning_ids
    assert enc.reasoning_text == TRACE.response[: TRACE.reasoning_end]
    # Token starts are increasing char offsets; decoding tokens [a, b) at cuttable places gives
    # exactly the text between their char offsets.
    cuts = [i for i in range(enc.n_reasoning) if enc.cuttable[i]] + [enc.n_reasoning]
    for a, b in zip(cuts, cuts[1:]):
        text = scorer.tokenizer.decode(enc.reasoning_ids[a:b])
        assert text == TRACE.response[enc.token_starts[a] : enc.token_starts[b]]
    assert not all(enc.cuttable)  # the emoji is split over byte tokens


def test_prompt_uses_chat_template(scorer):
    assert scorer.render_prompt("hi").startswith(
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    plain = scorer.with_options(ModelOptions(chat_template=False))
    assert plain.render_prompt("hi") == "hi"


def test_forward_stats_equal_full_softmax(scorer):
    enc = scorer.encode(TRACE)
    fwd = scorer.forward(enc.ids, keep_cache=False)
    with torch.no_grad():
        logits = scorer.model(torch.tensor([enc.ids])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    ent = -(lp.exp() * lp).sum(-1)
    tok = lp[:-1].gather(1, torch.tensor(enc.ids[1:])[:, None])[:, 0]
    assert torch.allclose(fwd.entropies, ent, atol=1e-4)
    assert torch.allclose(fwd.logprobs[1:], tok, atol=1e-4)


def test_chunked_stats_are_chunk_independent(scorer, monkeypatch):
    enc = scorer.encode(TRACE)
    a = scorer.forward(enc.ids, keep_cache=False)
    monkeypatch.setattr("cotcredit.lm.head.LOGIT_CHUNK", 7)
    b = scorer.forward(enc.ids, keep_cache=False)
    assert torch.allclose(a.entropies, b.entropies, atol=1e-5)
    assert torch.allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_the_kv_cache_goes_under_the_keyword_the_model_takes(scorer, monkeypatch):
    """transformers renamed `past_key_values` to `cache` in 5.24; a model that takes only
    **kwargs would drop the other name silently and keep no cache."""
    import inspect

    import transformers
    from transformers import DynamicCache

    from cotcredit.lm.head import cache_arg, decoder_of

    decoder = decoder_of(scorer.model)
    marker = object()
    name = "cache" if "cache" in inspect.signature(type(decoder).forward).parameters \
        else "past_key_values"
    assert cache_arg(decoder, marker) == {name: marker}

    class Old(torch.nn.Module):  # a decoder with the name of transformers < 5.24
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids=None, past_key_values=None, use_cache=None, **kwargs):
            return self.inner(input_ids=input_ids, **cache_arg(self.inner, past_key_values),
                              use_cache=use_cache, **kwargs)

    old = Old(decoder)
    assert cache_arg(old, marker) == {"past_key_values": marker}
    cache = DynamicCache()
    ids = scorer.encode(TRACE).ids
    old(input_ids=torch.tensor([ids]), **cache_arg(old, cache), use_cache=True)
    assert cache.get_seq_length() == len(ids)  # the pass filled the cache it was handed

    def kwargs_only():
        class Anything(torch.nn.Module):
            def forward(self, **kwargs):
                return kwargs

        return Anything()

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    assert cache_arg(kwargs_only(), marker) == {"past_key_values": marker}
    monkeypatch.setattr(transformers, "__version__", "5.24.0")
    assert cache_arg(kwargs_only(), marker) == {"cache": marker}


def test_the_head_stays_float32_inside_a_bfloat16_autocast(scorer):
    """A trainer's bfloat16 autocast (TRL on a GPU) must neither round the float32 head nor
    fail the head check on a float32 model."""
    from cotcredit.lm.head import OutputHead, decoder_of, head_logits

    model, decoder = scorer.model, decoder_of(scorer.model)
    ids = scorer.encode(TRACE).ids
    head = OutputHead(model)
    with torch.no_grad():
        hidden = decoder(input_ids=torch.tensor([ids])).last_hidden_state[0]
        plain = head_logits(model, hidden)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = head.logits(hidden)
            head.check(decoder, ids)
    assert head.checked is True
    assert inside.dtype == torch.float32 and torch.equal(inside, plain)


def test_the_float32_head_copy_is_kept_until_the_weights_change(tiny_model_dir):
    """A bfloat16 model's head is copied to float32 once and again only after its weights
    change in place (a training step); the copy is the scorer's, nothing is put on the model."""
    from transformers import AutoModelForCausalLM

    from cotcredit.lm.head import OutputHead

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    head = OutputHead(model)
    w, _ = head.weights()
    assert w.dtype == torch.float32 and head.weights()[0] is w
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(2)
    w2, _ = head.weights()
    assert w2 is not w and torch.equal(w2, 2 * w)
    assert not any(k.startswith("_cotcredit") for k in vars(model))


@pytest.mark.parametrize("budget", [1024, 20])
def test_packed_probes_equal_naive(scorer, budget):
    enc = scorer.encode(TRACE)
    fwd = scorer.forward(enc.ids)
    ex, ans = scorer.encode_text("\nThe final answer is $\\boxed{"), scorer.encode_text("7")
    term = scorer.terminator_ids("}")
    bounds = [0, 1, 5, enc.n_reasoning // 2, enc.n_reasoning - 1, enc.n_reasoning]
    conts = [Continuation(enc.prompt_len + b, ex + ans, len(ex), term) for b in bounds]
    conts.append(Continuation(enc.prompt_len + 3, ans, 0, None))
    s = Scorer(scorer.model, scorer.tokenizer, query_budget=budget)
    packed = s.score_continuations(fwd, conts)
    naive = s.score_continuations_naive(enc.ids, conts)
    assert np.allclose([p.logprob for p in packed], [n.logprob for n in naive], atol=1e-4)
    for p, n in zip(packed, naive):
        assert np.allclose(p.token_logprobs, n.token_logprobs, atol=1e-4)
    # The cache is restored: scoring again gives the same numbers.
    again = s.score_continuations(fwd, conts)
    assert [a.logprob for a in again] == pytest.approx([p.logprob for p in packed], abs=1e-6)
    # And batched full-sequence scoring agrees as well.
    seqs = [enc.ids[: c.prefix_len] + c.ids for c in conts[:-1]]
    full = s.score_sequences(seqs, [len(ans)] * len(seqs), terminators=term, batch_size=3)
    assert np.allclose(full, [n.logprob for n in naive[:-1]], atol=1e-4)


def test_terminator_ids_start_with_prefix(scorer):
    ids = scorer.terminator_ids("}")
    assert ids and all(scorer.tokenizer.decode([i]).startswith("}") for i in ids)


def test_context_overflow_is_a_clear_error(scorer):
    long = Trace("long", "Q", "word " * 3000 + "\nAnswer: 1", "1")
    with pytest.raises(UserError,
                       match="exceed the model's context of 2048 tokens; use --truncate"):
        scorer.encode(long)
    cut = scorer.with_options(ModelOptions(truncate=True)).encode(long, reserve=10)
    assert cut.truncated > 0 and len(cut.ids) + 10 <= 2048


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="cannot load"):
        load_scorer(ModelOptions(model="no-such-org/no-such-model", device="cpu"))
    # A path that names nothing is said to be missing (not tried as a hub id).
    with pytest.raises(UserError, match="no such folder or file: .*x.gguf"):
        load_scorer(ModelOptions(model=str(tmp_path / "x.gguf"), device="cpu"))
    (tmp_path / "d.gguf").mkdir()
    with pytest.raises(UserError, match="no such GGUF file"):
        load_scorer(ModelOptions(model=str(tmp_path / "d.gguf"), device="cpu"))
    with pytest.raises(UserError, match="no config.json"):
        load_scorer(ModelOptions(model=str(tmp_path), device="cpu"))


def test_table_metadata_names_the_model_folder_relative_to_home(monkeypatch, tmp_path):
    from cotcredit.lm.scorer import _home_relative

    monkeypatch.setenv("HOME", str(tmp_path))
    assert _home_relative(str(tmp_path / ".cache" / "m")) == "~/.cache/m"
    assert _home_relative(str(tmp_path) + "x/m") == str(tmp_path) + "x/m"  # not under home
    assert _home_relative("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB/SmolLM2-135M"


def test_what_looks_like_a_model_path():
    """Hub ids are `org/name` or a bare name; anything else that names nothing on disk is a
    missing path, said as such before any model code loads."""
    from cotcredit.lm.loading import looks_like_path, model_location

    for hub in ("gpt2", "HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen3-0.6B"):
        assert not looks_like_path(hub) and model_location(hub) == hub
    for path in ("./m", "../m", "/abs/m", "~/m", "runs/x/checkpoint-4", "m.gguf", "C:\\m"):
        assert looks_like_path(path)
        with pytest.raises(UserError, match=f"--model: no such folder or file: {re.escape(path)}$"):
            model_location(path)
