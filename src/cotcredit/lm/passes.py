"""What forward passes give: one pass over a trace (`TracePass`), a token block scored after a
prefix (`Continuation`) and its score. Loads no torch at import: methods build `Continuation`s
before any model is loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads with the first pass: the records are light (`--help` is fast)
    import torch

    from cotcredit.lm.head import OutputHead


@dataclass
class TracePass:
    """One forward pass over a sequence: per-token log-probs, entropies, and its KV cache.

    logprobs[t] = log p(ids[t] | ids[:t]) and entropies[t] = entropy of the predictive
    distribution after ids[:t+1] (the choice of token t+1), for t >= `stats_from` - 1; 0 before.
    """

    ids: list[int]
    logprobs: torch.Tensor
    entropies: torch.Tensor
    cache: object | None = None
    seconds: float = 0.0


@dataclass
class Continuation:
    """A token block scored after the first `prefix_len` tokens of a trace.

    `ids[target_start:]` are scored; `terminators` (token ids) adds log of the probability mass
    of any of them right after the block, e.g. every token starting with "}" after a boxed answer.
    """

    prefix_len: int
    ids: list[int]
    target_start: int = 0
    terminators: tuple[int, ...] | None = None


@dataclass
class ContinuationScore:
    """The score of one `Continuation`."""

    logprob: float  # sum of log-probs of the target tokens (+ terminator mass)
    token_logprobs: list[float] = field(default_factory=list)  # per target token


def token_stats(
    head: OutputHead, hidden: torch.Tensor, ids: torch.Tensor, stats_from: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropies) of a pass over `ids` (`TracePass`'s fields) from its hidden states
    (tokens, hidden), computed from position `stats_from` - 1 on in chunks of positions, so a
    long trace never materialises a (tokens x vocabulary) tensor."""
    import torch

    from cotcredit.lm.head import LOGIT_CHUNK

    n = len(ids)
    logprobs = torch.zeros(n, dtype=torch.float32)
    entropies = torch.zeros(n, dtype=torch.float32)
    for s in range(max(0, stats_from - 1), n, LOGIT_CHUNK):
        e = min(n, s + LOGIT_CHUNK)
        lp = head.log_probs(hidden[s:e])
        entropies[s:e] = -(lp.exp() * lp).sum(-1).cpu()
        nxt = ids[s + 1 : e + 1]
        logprobs[s + 1 : s + 1 + len(nxt)] = lp[: len(nxt)].gather(1, nxt[:, None])[:, 0].cpu()
    return logprobs, entropies


def continuation_scores(
    head: OutputHead, hidden: torch.Tensor, rows: Sequence[Sequence[int]],
    conts: Sequence[Continuation],
) -> list[ContinuationScore]:
    """Scores of continuations from the hidden states at their block positions: `rows[i]` index
    continuation i's block in `hidden` (row 0: the token before it, predicting ids[0])."""
    import torch

    from cotcredit.lm.head import LOGIT_CHUNK

    want: list[int] = []
    for r, c in zip(rows, conts, strict=True):
        stop = len(c.ids) + (1 if c.terminators else 0)
        want += r[c.target_start : stop]
    idx = torch.tensor(want, device=hidden.device, dtype=torch.long)
    picked: list[torch.Tensor] = []
    for s in range(0, len(want), LOGIT_CHUNK):
        picked.append(head.log_probs(hidden[idx[s : s + LOGIT_CHUNK]]))
    lp = torch.cat(picked) if picked else hidden.new_zeros((0, 1), dtype=torch.float32)
    results, at = [], 0
    for c in conts:
        m = len(c.ids) - c.target_start
        tgt = torch.tensor(c.ids[c.target_start :], device=lp.device, dtype=torch.long)
        tok = lp[at : at + m].gather(1, tgt[:, None])[:, 0] if m else lp.new_zeros(0)
        total = float(tok.double().sum())
        at += m
        if c.terminators:
            term = torch.tensor(c.terminators, device=lp.device, dtype=torch.long)
            total += float(torch.logsumexp(lp[at, term], dim=0))
            at += 1
        results.append(ContinuationScore(total, tok.cpu().tolist()))
    return results
