"""Model zoo: packed probes equal the model's own forward, one probe at a time, on every family.

Tiny random models of twelve families are built from their transformers configs (milliseconds
each) and share the byte-level tokenizer of conftest. Sliding-window families get a window of 16
tokens, far shorter than the test trace, so a mask that forgot the window, or a cache that dropped
old keys, gives different numbers. The reference is always `model(input_ids).logits` of the full
sequence: the family's own masking and output processing (soft-capping, logits scaling), not
cotcredit's code.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import transformers as tf

from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm import Scorer
from cotcredit.lm.encoding import ForcingOptions, answer_forcing
from cotcredit.methods import TraceContext
from cotcredit.methods.attribution import ValueFunction
from cotcredit.methods.rredcot import RredcotOptions, build_probes, estimate
from cotcredit.segmentation import SegmentOptions, segment_encoded

WINDOW = 16
TRACE = Trace(
    "zoo",
    "Apples cost 5 dollars and oranges cost 7 dollars. What do both cost?",
    "Let me think step by step.\nApples cost 5 dollars.\nWait, oranges cost 7.\nSo 5 + 7 = 12.\n"
    "Now add them: 5 + 7 = 12.\nTherefore the total is 12.\nThe final answer is $\\boxed{12}$.",
    "12",
    solution="Apples cost 5 and oranges cost 7, so together 5 + 7 = 12.",
)


def _common(tok) -> dict:
    return dict(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )


def _configs(tok) -> dict:
    c = _common(tok)
    window = dict(sliding_window=WINDOW)
    hybrid = ["sliding_attention", "full_attention"]
    ids = {k: c[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return {
        "llama": tf.LlamaConfig(**c),
        "qwen2": tf.Qwen2Config(**c, use_sliding_window=True, max_window_layers=1, **window),
        "qwen3": tf.Qwen3Config(**c, head_dim=16),
        "mistral": tf.MistralConfig(**c, **window),
        "gemma2": tf.Gemma2Config(**c, head_dim=16, **window),
        "gemma3": tf.Gemma3TextConfig(**c, head_dim=16, layer_types=hybrid, **window),
        "phi3": tf.Phi3Config(**c, **window),
        "granite": tf.GraniteConfig(**c, logits_scaling=8.0),
        "cohere": tf.CohereConfig(**c, logit_scale=0.0625),
        "olmo2": tf.Olmo2Config(**c),
        "gpt_neox": tf.GPTNeoXConfig(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=1024, **ids,
        ),
        "gpt2": tf.GPT2Config(
            vocab_size=len(tok), n_embd=64, n_layer=2, n_head=4, n_positions=1024, **ids
        ),
    }


FAMILIES = [
    "llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "granite", "cohere",
    "olmo2", "gpt_neox", "gpt2",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return tf.AutoTokenizer.from_pretrained(tiny_model_dir)


def _scorer(family: str, tokenizer, dtype=torch.float32) -> Scorer:
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(_configs(tokenizer)[family], dtype=dtype).eval()
    with torch.no_grad():  # random init is near-uniform: spread the log-probs out
        model.get_input_embeddings().weight.mul_(4)
    return Scorer(model, tokenizer, name=family)


def _own_logprob(model, seq: list[int], start: int, terminators=None) -> float:
    """log p(seq[start:] | seq[:start]) [+ terminator mass] from the model's own full forward."""
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].float(), -1)
    total = sum(float(lp[t - 1, seq[t]]) for t in range(start, len(seq)))
    if terminators:
        total += float(torch.logsumexp(lp[-1, list(terminators)], 0))
    return total


def _context(scorer: Scorer, segments: int = 5) -> TraceContext:
    enc = scorer.encode(TRACE, reserve=64)
    fwd = scorer.forward(enc.ids, stats_from=enc.prompt_len)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments=segments))
    return TraceContext(scorer, enc, fwd, seg)


@pytest.mark.parametrize("family", FAMILIES)
def test_probes_equal_the_models_own_forward(family, tokenizer):
    scorer = _scorer(family, tokenizer)
    ctx = _context(scorer)
    enc, model = ctx.encoded, scorer.model
    assert enc.prompt_len + enc.n_reasoning > 3 * WINDOW  # the window matters

    # The trace pass (full-length cache) gives the model's own entropies.
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([enc.ids])).logits[0].float(), -1)
    own_entropy = -(lp.exp() * lp).sum(-1)
    p = enc.prompt_len
    assert torch.allclose(ctx.forward.entropies[p - 1 :], own_entropy[p - 1 :], atol=1e-4)

    # RREDCoT: R̂_k and v̂_k at every boundary.
    options = RredcotOptions(value="both")
    est = estimate(ctx, options)
    forcing = answer_forcing(scorer, ForcingOptions())
    r_probe = forcing.answer_probe(TRACE.answer)
    term = forcing.terminators
    # v̂'s probe after each state for the trace's own solution, the empty part kept.
    probes = build_probes(ctx, dataclasses.replace(options, references="solution",
                                                   empty_part="keep"))
    v_probes = probes.continuations[probes.n_states:]
    for k, (b, v_probe, (nu, ny)) in enumerate(zip(ctx.segmentation.boundaries, v_probes,
                                                   probes.solution_spans, strict=True)):
        u0 = v_probe.target_start
        u1, y0 = u0 + nu, u0 + ny
        prefix = enc.ids[: p + b]
        a0 = len(prefix) + r_probe.span("answer")[0]
        assert est.r_hat[k] == pytest.approx(
            _own_logprob(model, prefix + r_probe.ids, a0, term), abs=1e-4
        )
        seq = prefix + v_probe.ids
        log_u = _own_logprob(model, seq[: len(prefix) + u1], len(prefix) + u0)
        log_y = _own_logprob(model, seq, len(prefix) + y0, term)
        assert est.v_hat[k] == pytest.approx(log_u + log_y, abs=1e-4)

    # LOO and a Shapley coalition: perturbed traces as continuations of the cache.
    f = ValueFunction(ctx)
    K = f.K
    masks = np.ones((K + 1, K), dtype=bool)
    masks[np.arange(1, K + 1), np.arange(K)] = False
    coalition = np.array([[True, False, True, False, True][:K]])
    values = f(np.concatenate([masks, coalition]))
    for row, value in zip(np.concatenate([masks, coalition]), values, strict=True):
        seq, n_target = f.sequence(row)
        assert value == pytest.approx(
            _own_logprob(model, seq, len(seq) - n_target, term), abs=1e-4
        )


@pytest.mark.parametrize("family", ["gemma3", "granite"])
def test_bfloat16_scores_stay_close_to_float32(family, tokenizer):
    """Logits in float32 from float32 head weights: bfloat16 moves only the model body."""
    ref = estimate(_context(_scorer(family, tokenizer)), RredcotOptions(value="rhat"))
    low = estimate(_context(_scorer(family, tokenizer, torch.bfloat16)),
                   RredcotOptions(value="rhat"))
    assert np.allclose(ref.r_hat, low.r_hat, atol=0.3)


def test_unreproduced_output_processing_is_refused(tokenizer):
    class Doubled(tf.LlamaForCausalLM):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 2  # a family-specific step cotcredit does not know
            return out

    model = Doubled(_configs(tokenizer)["llama"]).eval()
    with pytest.raises(UserError, match="does not reproduce this model family's output"):
        Scorer(model, tokenizer).forward([1, 2, 3])


def test_attention_without_masks_switches_to_sdpa_for_packed_passes(tokenizer):
    scorer = _scorer("llama", tokenizer)
    ctx = _context(scorer)
    reference = estimate(ctx, RredcotOptions(value="rhat")).r_hat
    # As if loaded with flash attention: packed passes must not use it (it takes no 4-D mask).
    scorer.model.config._attn_implementation = "flash_attention_2"
    try:
        again = estimate(ctx, RredcotOptions(value="rhat")).r_hat
        assert scorer.model.config._attn_implementation == "flash_attention_2"
    finally:
        scorer.model.config._attn_implementation = "sdpa"
    assert again == pytest.approx(reference, abs=1e-5)
    assert any("sdpa" in n for n in scorer.notes)


@pytest.mark.parametrize("family", FAMILIES)
def test_rows_joining_and_leaving_slots_change_no_rollout(family, tokenizer, monkeypatch):
    """Rows leave their slot the step they end and the next row takes it; the shared cache
    frame is rebuilt when its columns run out. Every sampled completion equals the one decoded
    alone (one slot), on every family, sliding-window models past their window included."""
    from cotcredit.lm import SamplingOptions, sampling, slots

    scorer = _scorer(family, tokenizer)
    gen = sampling.HFGenerator(scorer.model, tokenizer)
    # A fifth of the vocabulary ends a completion, so rows stop at many different steps.
    gen.stop_ids = sorted(set(gen.stop_ids) | set(range(3, len(tokenizer), 5)))
    prompts = [tokenizer(t)["input_ids"] for t in
               ("Apples cost 5 dollars and oranges 7.", "So 5 + 7 = 12, and then", "Hi")]

    rebuilt: list[bool] = []  # per rebuild: whether the columns had run out
    compact = slots.SlotCache.compact
    monkeypatch.setattr(slots.SlotCache, "compact",
                        lambda self, *a: (rebuilt.append(self.full()), compact(self, *a))[1])

    def run(batch_size: int, spare: int = slots.SPARE_COLUMNS):
        monkeypatch.setattr(slots, "SPARE_COLUMNS", spare)
        rebuilt.clear()
        opts = SamplingOptions(n=10, temperature=1.0, max_new_tokens=40, seed=3,
                               batch_size=batch_size)
        return [[(c.token_ids, c.finish_reason) for c in cs] for cs in gen.generate(prompts, opts)]

    alone = run(1)
    assert run(4) == alone  # rows join slots that others left
    assert run(2, spare=1) == alone and any(rebuilt)  # the frame rebuilt when it ran out
    assert run(30) == alone and rebuilt  # all rows at once; idle slots dropped at the end
    lengths = [len(t) for cs in alone for t, _ in cs]
    # Rows ended at different steps while others went on: slots really changed hands.
    assert len(set(lengths)) >= 4, lengths
