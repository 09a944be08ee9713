"""Causal LMs: loading a model, the ``Scorer`` that owns every forward pass, encoding a trace
into tokens, answer forcing, and sampling completions.

Its modules:

* ``loading``: ``ModelOptions``, locating ``--model`` (hub id, folder, GGUF, the embedded
  default), device and dtype;
* ``encoding``: a trace -> tokens with character offsets, as the model saw it, and answer
  forcing: the exit string E and the probe blocks scored after a prefix;
* ``head``: the output head applied by hand in float32;
* ``passes``: what a forward pass gives (``TracePass``, ``Continuation`` and its score);
* ``backoff``: the one out-of-memory back-off (halve the batch, retry);
* ``packing``: many probes of one trace's prefixes in one forward pass;
* ``scorer``: the ``Scorer`` (log-probs, entropies, probes, perturbed sequences) and
  ``load_scorer``;
* ``generation``, ``sampling``, ``vllm_sampling``: sampling completions (transformers or vLLM).

Names load their module on first use: ``from cotcredit.lm import ModelOptions`` loads no torch.
"""

from __future__ import annotations

from cotcredit._lazy import lazy_index

_WHERE = {
    **dict.fromkeys((
        "DEFAULT_MODEL", "ModelOptions", "cache_dir", "embedded_gguf", "resolve_device",
        "resolve_dtype", "looks_like_path", "model_location", "locate_model",
        "model_fingerprint", "load_model_files",
    ), "cotcredit.lm.loading"),
    **dict.fromkeys((
        "LOGIT_CHUNK", "decoder_of", "head_logits", "check_head",
    ), "cotcredit.lm.head"),
    **dict.fromkeys((
        "TracePass", "Continuation", "ContinuationScore",
    ), "cotcredit.lm.passes"),
    **dict.fromkeys((
        "BatchSize", "run_batched",
    ), "cotcredit.lm.backoff"),
    **dict.fromkeys((
        "MASKABLE_ATTENTION", "AttentionLayout", "PackedModel",
    ), "cotcredit.lm.packing"),
    **dict.fromkeys((
        "Scorer", "load_scorer",
    ), "cotcredit.lm.scorer"),
    **dict.fromkeys((
        "EncodedTrace", "encoded_trace", "text_offsets", "encode_trace", "token_offsets",
        "template_markers", "rendered_by_template", "special_ids", "completion_text",
        "encode_completion", "Parts", "continuation_offsets", "encode_parts",
        "EXIT_PLAIN", "EXIT_THINK", "ForcingOptions", "resolved", "thinks_in_tags",
        "default_exit_string", "Forcing", "solution_body", "connector_after", "answer_forcing",
    ), "cotcredit.lm.encoding"),
    **dict.fromkeys((
        "BACKENDS", "SamplingOptions", "SamplingSettings", "Completion", "GenerationStats",
        "Generator", "row_seed", "default_keys", "stop_token_ids", "decode_continuation",
        "parse_engine_args",
    ), "cotcredit.lm.generation"),
    **dict.fromkeys((
        "HFGenerator", "get_generator",
    ), "cotcredit.lm.sampling"),
    **dict.fromkeys((
        "VLLMGenerator",
    ), "cotcredit.lm.vllm_sampling"),
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_index(__name__, _WHERE)
