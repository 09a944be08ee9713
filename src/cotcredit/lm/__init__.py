"""Causal LMs for scoring: loading (`loading`), the float32 output head (`head`), packed probe
passes (`packing`) and the `Scorer` that owns every forward pass (`scorer`).

The names below are importable from `cotcredit.lm` and load their module on first use, so
`from cotcredit.lm import ModelOptions` (the command line's options) brings in no torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "EncodedTrace": "cotcredit.encoding",
    "check_head": "cotcredit.lm.head",
    "head_logits": "cotcredit.lm.head",
    **dict.fromkeys(
        ("DEFAULT_MODEL", "ModelOptions", "cache_dir", "embedded_gguf", "load_model_files",
         "load_scorer", "locate_model", "looks_like_path", "model_fingerprint",
         "model_location", "resolve_device", "resolve_dtype"),
        "cotcredit.lm.loading",
    ),
    **dict.fromkeys(
        ("MASKABLE_ATTENTION", "MIN_QUERY_BUDGET", "AttentionLayout", "Continuation",
         "ContinuationScore"),
        "cotcredit.lm.packing",
    ),
    "Scorer": "cotcredit.lm.scorer",
    "TracePass": "cotcredit.lm.scorer",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # once: later lookups (and monkeypatching) see a plain attribute
        return value
    raise AttributeError(f"module 'cotcredit.lm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
