"""The output head, applied by hand in float32: only the positions scoring needs go through the
vocabulary, from float32 hidden states and weights whatever the model's dtype, with the family's
output processing (Gemma's soft-capping, Granite's `logits_scaling`, Cohere's `logit_scale`,
`output_multiplier`). Checked once against the model's own `forward`; a family not reproduced
is refused in one line, never scored silently wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from cotcredit.errors import UserError

LOGIT_CHUNK = 512  # positions per lm_head call: 512 x 49k vocab x 4 B = 100 MB


def cache_arg(module, cache) -> dict:
    """The keyword argument that hands `cache` (a transformers KV cache) to `module`'s forward
    or `generate`: ``cache`` since transformers 5.24, ``past_key_values`` before. A model
    whose forward takes only ``**kwargs`` would silently drop the wrong one (no KV cache kept,
    every probe scored against nothing), so the name is read off its signature."""
    return {_cache_keyword(type(module)): cache}


_CACHE_KEYWORDS: dict[type, str] = {}


def _cache_keyword(cls: type) -> str:
    if cls not in _CACHE_KEYWORDS:
        import inspect

        try:
            params = inspect.signature(cls.forward).parameters
        except (TypeError, ValueError, AttributeError):
            params = {}
        if "cache" in params:
            name = "cache"
        elif "past_key_values" in params:
            name = "past_key_values"
        else:  # **kwargs only: the installed transformers' name
            import transformers
            from packaging.version import Version

            new = Version(transformers.__version__) >= Version("5.24.0.dev0")
            name = "cache" if new else "past_key_values"
        _CACHE_KEYWORDS[cls] = name
    return _CACHE_KEYWORDS[cls]


def decoder_of(model):
    """The model's decoder stack (hidden states without the head)."""
    get = getattr(model, "get_decoder", None)
    return get() if get else model.model


Weights = tuple[torch.Tensor, torch.Tensor | None]  # the head's weight and bias


def head_weights(model) -> Weights:
    """The output head's weight and bias in float32 (a copy for other dtypes)."""
    head = model.get_output_embeddings()
    w, b = head.weight, getattr(head, "bias", None)
    if w.dtype == torch.float32:
        return w, b
    return w.detach().float(), b.detach().float() if b is not None else None


def head_logits(model, hidden: torch.Tensor, weights: Weights | None = None) -> torch.Tensor:
    """float32 logits for hidden states (..., hidden), with the family's output processing;
    `weights`: the head's in float32 (default: `head_weights(model)`)."""
    w, b = weights or head_weights(model)
    # float32 also inside a trainer's bfloat16 autocast, which would round the head's matmul.
    with torch.autocast(hidden.device.type, enabled=False):
        logits = torch.nn.functional.linear(hidden.float(), w, b)
    cfg = model.config.get_text_config()
    scaling = getattr(cfg, "logits_scaling", None)  # Granite
    if scaling:
        logits = logits / scaling
    scale = getattr(cfg, "logit_scale", None)  # Cohere
    if scale:
        logits = logits * scale
    multiplier = getattr(cfg, "output_multiplier", None)
    if multiplier:
        logits = logits * multiplier
    cap = getattr(cfg, "final_logit_softcapping", None)  # Gemma
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def log_probs(model, hidden: torch.Tensor, weights: Weights | None = None) -> torch.Tensor:
    """float32 log-softmax of `head_logits`."""
    return torch.log_softmax(head_logits(model, hidden, weights), dim=-1)


class OutputHead:
    """One model's output head in float32: the float32 copy of its
    weights, made again only when they change (training updates them in place), and whether
    `check` has passed."""

    def __init__(self, model):
        self.model = model
        self.checked = False
        self._weights: Weights | None = None
        self._key: tuple | None = None  # (address, version, device) of the copied weight

    def weights(self) -> Weights:
        """The head's weight and bias in float32."""
        w = self.model.get_output_embeddings().weight
        if w.dtype == torch.float32:
            return head_weights(self.model)
        key = (w.data_ptr(), w._version, w.device)
        if self._weights is None or self._key != key:
            self._weights, self._key = head_weights(self.model), key
        return self._weights

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 logits for hidden states (`head_logits`)."""
        return head_logits(self.model, hidden, self.weights())

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """float32 log-softmax of `logits`."""
        return torch.log_softmax(self.logits(hidden), dim=-1)

    def check(self, decoder, ids: Sequence[int]) -> None:
        """`check_head` once: later calls return at once."""
        if not self.checked:
            check_head(self.model, decoder, ids, self.weights())
            self.checked = True


@torch.no_grad()
def check_head(model, decoder, ids: Sequence[int], weights: Weights | None = None) -> None:
    """Compare `head_logits` on `decoder`'s hidden states of `ids` with the model's own forward;
    a mismatch is a UserError naming the model family."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    x = torch.tensor([list(ids)], device=device)
    # Outside any autocast (a trainer's bfloat16 one): the check is about the family's output
    # processing, compared at the weights' own precision.
    with torch.autocast(device.type, enabled=False):
        # The class's forward: accelerate replaces a prepared model's own with an autocast one.
        own = torch.log_softmax(type(model).forward(model, input_ids=x).logits[0].float(), dim=-1)
        ours = log_probs(model, decoder(input_ids=x).last_hidden_state[0], weights)
    # float32: rounding only; bfloat16/float16: the model's own head runs in that dtype.
    tol = 1e-3 if dtype == torch.float32 else 0.25
    top = own.topk(min(50, own.shape[-1]), dim=-1).indices
    diff = float((own.gather(1, top) - ours.gather(1, top)).abs().max())
    if not diff <= tol:
        arch = (getattr(model.config, "architectures", None) or [type(model).__name__])[0]
        raise UserError(
            f"{arch}: cotcredit does not reproduce this model family's output processing "
            f"(log-probs differ from the model's own forward by {diff:.3g}); it is not "
            "supported"
        )
