"""Hybrid keyword–entropy segmentation of a trace's reasoning.

1. Candidate cuts at line breaks and before discourse keywords ("Wait", "So", ...), snapped to
   token boundaries (too few: the highest-entropy token boundaries are added).
2. Token entropies from one forward pass over prompt + reasoning.
3. Merge the adjacent pair with the lowest cost until `segments` remain: `pair` (the paper's
   wording) the two segments' summed entropy, `boundary` the entropy at the cut between them.
   High-entropy places survive as boundaries.

Pre-split steps are segmented as given (`step_segmentation`). Segments are character spans of
the response with token offsets into the reasoning, concatenating exactly to it; never located
by searching text.
"""

from __future__ import annotations

import dataclasses
import heapq
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cotcredit.errors import UserError

if TYPE_CHECKING:  # torch loads with the model (keeps `--help` fast)
    import torch

    from cotcredit.lm.encoding import EncodedTrace
from cotcredit.options import check_choices, option

DEFAULT_KEYWORDS: tuple[str, ...] = (
    "Wait",
    "But",
    "Alternatively",
    "Hmm",
    "So",
    "Therefore",
    "Thus",
    "Hence",
    "Let me",
    "Let's",
    "Actually",
    "Now",
    "Next",
    "Then",
    "Finally",
    "First",
    "Second",
    "However",
    "Okay",
    "OK",
    "Hold on",
    "Check",
    "Verify",
    "In summary",
)


@dataclass(frozen=True)
class SegmentOptions:
    """How the reasoning is cut into segments."""

    segments: int | str = option(
        8, short="-k",
        help="Target number of segments per trace; 'lines': one segment per line of the "
        "reasoning (cuts after every line break, nothing merged); or 'steps': the trace's "
        "pre-split steps (automatic for traces read with steps).",
    )
    keywords: tuple[str, ...] = option(
        DEFAULT_KEYWORDS,
        help="Comma-separated discourse keywords that open a segment [default: built-in list].",
    )
    merge: str = option(
        "pair", choices=("pair", "boundary"),
        help="pair: merge the adjacent pair with the lowest summed entropy; boundary: the "
        "lowest entropy at the cut.",
    )
    min_tokens: int = option(1, help="Minimum tokens per segment.")
    max_tokens: int | None = option(None, help="Maximum tokens per segment.")

    def validate(self) -> SegmentOptions:
        """Check the options (a one-line UserError naming the flag); returns self."""
        if isinstance(self.segments, str):
            text = self.segments.strip()
            if text in ("steps", "lines"):
                return dataclasses.replace(self, segments=text).validate_rest()
            if not text.isdigit():
                raise UserError(f"--segments must be a number, 'lines' or 'steps', got "
                                f"'{self.segments}'")
            return dataclasses.replace(self, segments=int(text)).validate()
        if self.segments < 1:
            raise UserError("--segments must be at least 1")
        return self.validate_rest()

    def validate_rest(self) -> SegmentOptions:
        """Check every option but the number of segments."""
        check_choices(self)
        if self.min_tokens < 1:
            raise UserError("--min-tokens must be at least 1")
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise UserError("--max-tokens must be >= --min-tokens")
        return self


@dataclass(frozen=True)
class Segment:
    """One segment: char span in the response, token span in the reasoning tokens."""

    index: int
    char_start: int
    char_end: int
    token_start: int
    token_end: int
    text: str
    boundary_entropy: float = float("nan")
    mean_entropy: float = float("nan")

    @property
    def n_tokens(self) -> int:
        """Tokens of the segment."""
        return self.token_end - self.token_start


@dataclass
class Segmentation:
    """The segments of one trace, in order, covering its reasoning exactly."""

    trace_id: str
    segments: list[Segment] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.segments)

    @property
    def boundaries(self) -> list[int]:
        """Reasoning-token offsets of the states s_0..s_K (s_0 = 0: prompt only)."""
        return [0] + [s.token_end for s in self.segments]


def line_starts(text: str) -> set[int]:
    """Character offsets where a new line of `text` starts (after a run of line breaks that
    more text follows)."""
    return {m.end() for m in re.finditer(r"\n+", text) if m.end() < len(text)}


def candidate_cuts(enc: EncodedTrace, keywords: tuple[str, ...]) -> list[int]:
    """Token indices (1..n-1) where a new segment may start: after line breaks, before keywords."""
    text = enc.reasoning_text
    chars = line_starts(text)
    if keywords:
        alt = "|".join(re.escape(k) for k in sorted(keywords, key=len, reverse=True))
        # A keyword opens a thought at the start of the text, a line, or a sentence.
        for m in re.finditer(rf"(?:^|(?<=[\n.!?;:)]\s)|(?<=[\n.!?;:)]))\s*({alt})\b", text):
            chars.add(m.start(1))
    return token_cuts(enc, chars)


def snapped_tokens(enc: EncodedTrace, chars: list[int]) -> list[int]:
    """For each character offset in the ascending list `chars`, the reasoning-token index a
    segment starting there begins at: the token holding the character, moved back over tokens
    that continue a split character (the tokenizer cannot cut inside one)."""
    starts = enc.token_starts
    out = []
    tok = 0
    for c in chars:
        while tok + 1 < enc.n_reasoning and starts[tok + 1] <= c:
            tok += 1
        t = tok
        while t > 0 and not enc.cuttable[t]:
            t -= 1
        out.append(t)
    return out


def token_cuts(enc: EncodedTrace, chars: set[int]) -> list[int]:
    """The reasoning-token indices (1..n-1) where segments starting at characters `chars`
    begin (`snapped_tokens`); duplicates and the first token dropped."""
    return sorted({t for t in snapped_tokens(enc, sorted(chars)) if 0 < t < enc.n_reasoning})


def token_entropies(enc: EncodedTrace, entropies: torch.Tensor) -> torch.Tensor:
    """Entropy of the distribution each reasoning token was chosen from (length n_reasoning)."""
    p = enc.prompt_len
    return entropies[p - 1 : p - 1 + enc.n_reasoning].double()


def _split_long(
    bounds: list[int], ent: torch.Tensor, enc: EncodedTrace, max_tokens: int
) -> list[int]:
    out = [bounds[0]]
    for a, b in zip(bounds, bounds[1:]):
        stack = [(a, b)]
        pieces = []
        while stack:
            x, y = stack.pop()
            inner = [t for t in range(x + 1, y) if enc.cuttable[t]]
            if y - x <= max_tokens or not inner:
                pieces.append((x, y))
                continue
            t = max(inner, key=lambda i: (float(ent[i]), -i))
            stack += [(t, y), (x, t)]
        out += sorted(y for _, y in pieces)
    return out


def step_segmentation(enc: EncodedTrace, entropies: torch.Tensor | None = None) -> Segmentation:
    """The trace's pre-split steps as its segments (those starting before the reasoning ends),
    each from the token holding its first character; two steps in one token are a UserError."""
    trace = enc.trace
    if trace.steps is None:
        raise UserError(f"{trace.where}: --segments steps needs pre-split steps (a 'steps' field)")
    n = enc.n_reasoning
    end_char = enc.token_starts[n]
    chars = [c for c, _ in trace.steps[1:] if c < end_char]
    bounds = [0]
    for k, t in enumerate(snapped_tokens(enc, chars), start=1):
        if t <= bounds[-1]:
            raise UserError(f"{trace.where}: step {k} starts inside the first token of step "
                            f"{k - 1}: the tokenizer cannot cut between them")
        bounds.append(t)
    bounds.append(n)
    ent = token_entropies(enc, entropies) if entropies is not None else None
    return build_segmentation(enc, bounds, ent)


def line_segmentation(enc: EncodedTrace, entropies: torch.Tensor | None = None) -> Segmentation:
    """One segment per line of the reasoning (a cut after every run of line breaks, none
    merged): the step segmentation v̂ needs on reasoning written one step per line."""
    bounds = [0, *token_cuts(enc, line_starts(enc.reasoning_text)), enc.n_reasoning]
    ent = token_entropies(enc, entropies) if entropies is not None else None
    return build_segmentation(enc, bounds, ent)


def segment_encoded(
    enc: EncodedTrace, entropies: torch.Tensor, options: SegmentOptions
) -> Segmentation:
    """Segment one encoded trace given the entropies of its forward pass (prompt + reasoning)."""
    if options.segments == "steps":
        return step_segmentation(enc, entropies)
    if options.segments == "lines":
        return line_segmentation(enc, entropies)
    n = enc.n_reasoning
    ent = token_entropies(enc, entropies)
    target = min(options.segments, sum(enc.cuttable))
    bounds = [0, *candidate_cuts(enc, options.keywords), n]
    if options.max_tokens:
        bounds = _split_long(bounds, ent, enc, options.max_tokens)
    if len(bounds) - 1 < target:
        # Too few candidates: add cuts at the highest-entropy token boundaries.
        taken = set(bounds)
        e = ent.tolist()
        extra = sorted(
            (t for t in range(1, n) if enc.cuttable[t] and t not in taken),
            key=lambda t: (-e[t], t),
        )
        bounds = sorted(taken | set(extra[: target - (len(bounds) - 1)]))
    bounds = _merge(bounds, ent, options, target)
    return build_segmentation(enc, bounds, ent)


def _merge(bounds: list[int], ent: torch.Tensor, options: SegmentOptions,
           target: int) -> list[int]:
    """Merge adjacent segments: first those shorter than `min_tokens` (into the cheaper
    neighbour), then the cheapest pair until `target` remain. A linked list and heaps with
    stale entries skipped: O(n log n); ties go to the leftmost pair."""
    import torch

    pre = torch.cat([torch.zeros(1, dtype=torch.float64), ent.cumsum(0)]).tolist()
    e = ent.tolist()
    end = bounds[-1]
    nxt = dict(zip(bounds, bounds[1:]))
    prv = {b: a for a, b in nxt.items()}
    count = len(bounds) - 1

    def cost(a: int) -> float:  # merging the segment starting at a with the next one
        m = nxt[a]
        if options.merge == "boundary":
            return e[m]
        return (pre[m] - pre[a]) + (pre[nxt[m]] - pre[m])

    def remove(m: int) -> None:  # merge the two segments that meet at boundary m
        nonlocal count
        a, b = prv.pop(m), nxt.pop(m)
        nxt[a], prv[b] = b, a
        count -= 1

    short = [a for a in bounds[:-1] if nxt[a] - a < options.min_tokens]
    heapq.heapify(short)
    while short and count > 1:
        a = heapq.heappop(short)
        if a not in nxt or nxt[a] - a >= options.min_tokens:
            continue  # merged away, or grown long enough
        choices = []
        if a in prv:
            choices.append((cost(prv[a]), 0))  # into the left neighbour
        if nxt[a] != end:
            choices.append((cost(a), 1))  # into the right neighbour
        if min(choices)[1] == 0:
            left = prv[a]
            remove(a)
            a = left
        else:
            remove(nxt[a])
        if nxt[a] - a < options.min_tokens:
            heapq.heappush(short, a)

    def mergeable(a: int) -> bool:
        m = nxt.get(a)
        if m is None or m == end:
            return False
        return options.max_tokens is None or nxt[m] - a <= options.max_tokens

    pairs = [(cost(a), a, nxt[a], nxt[nxt[a]]) for a in list(nxt) if mergeable(a)]
    heapq.heapify(pairs)
    while count > target and pairs:
        _, a, m, b = heapq.heappop(pairs)
        if nxt.get(a) != m or nxt.get(m) != b:
            continue  # one of its segments has changed since
        remove(m)
        for x in (prv.get(a), a):
            if x is not None and mergeable(x):
                heapq.heappush(pairs, (cost(x), x, nxt[x], nxt[nxt[x]]))
    out, b = [bounds[0]], bounds[0]
    while b != end:
        b = nxt[b]
        out.append(b)
    return out


def build_segmentation(
    enc: EncodedTrace, bounds: list[int], ent: torch.Tensor | None = None
) -> Segmentation:
    """Segments from reasoning-token boundaries [0, ..., n]."""
    segs = []
    text = enc.trace.response
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        cs, ce = enc.token_starts[a], enc.token_starts[b]
        be = me = float("nan")
        if ent is not None:
            be, me = float(ent[a]), float(ent[a:b].mean())
        segs.append(Segment(k, cs, ce, a, b, text[cs:ce], be, me))
    return Segmentation(enc.trace.id, segs)


def segmentation_from_rows(enc: EncodedTrace, rows: list[dict], source: str) -> Segmentation:
    """Rebuild a segmentation stored in a table, checking it fits this trace and tokenizer."""
    rows = sorted(rows, key=lambda r: int(r["segment"]))
    where = f"{source}: trace {enc.trace.id}"
    if [int(r["segment"]) for r in rows] != list(range(len(rows))):
        raise UserError(f"{where}: segment indices are not 0..{len(rows) - 1}")
    bounds = [0]
    for r in rows:
        a, b = int(r["token_start"]), int(r["token_end"])
        if a != bounds[-1] or b <= a:
            raise UserError(f"{where}: segment {r['segment']} does not continue the previous one")
        if (
            b > enc.n_reasoning
            or enc.token_starts[a] != int(r["char_start"])
            or enc.token_starts[b] != int(r["char_end"])
        ):
            raise UserError(
                f"{where}: segment {r['segment']} does not match this model's tokenization "
                "(was the segmentation made with another model or other trace options?)"
            )
        bounds.append(b)
    if bounds[-1] != enc.n_reasoning:
        raise UserError(
            f"{where}: segments cover {bounds[-1]} of {enc.n_reasoning} reasoning tokens"
        )
    base = build_segmentation(enc, bounds)
    segs = [
        Segment(
            s.index,
            s.char_start,
            s.char_end,
            s.token_start,
            s.token_end,
            s.text,
            float(r.get("boundary_entropy", float("nan"))),
            float(r.get("mean_entropy", float("nan"))),
        )
        for s, r in zip(base.segments, rows)
    ]
    return Segmentation(enc.trace.id, segs)
