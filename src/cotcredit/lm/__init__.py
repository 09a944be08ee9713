"""Causal LMs for scoring: loading (`loading`), the float32 output head (`head`), packed probe
passes (`packing`) and the `Scorer` that owns every forward pass (`scorer`)."""

from cotcredit.encoding import EncodedTrace
from cotcredit.lm.head import check_head, head_logits
from cotcredit.lm.loading import (
    DEFAULT_MODEL,
    ModelOptions,
    cache_dir,
    embedded_gguf,
    load_model_files,
    load_scorer,
    locate_model,
    model_fingerprint,
    resolve_device,
    resolve_dtype,
)
from cotcredit.lm.packing import (
    MASKABLE_ATTENTION,
    MIN_QUERY_BUDGET,
    AttentionLayout,
    Continuation,
    ContinuationScore,
)
from cotcredit.lm.scorer import Scorer, TracePass

__all__ = [
    "DEFAULT_MODEL",
    "MASKABLE_ATTENTION",
    "MIN_QUERY_BUDGET",
    "AttentionLayout",
    "Continuation",
    "ContinuationScore",
    "EncodedTrace",
    "ModelOptions",
    "Scorer",
    "TracePass",
    "cache_dir",
    "check_head",
    "embedded_gguf",
    "head_logits",
    "load_model_files",
    "load_scorer",
    "locate_model",
    "model_fingerprint",
    "resolve_device",
    "resolve_dtype",
]
