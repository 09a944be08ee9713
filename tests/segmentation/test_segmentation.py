"""Segmentation invariants: coverage, token alignment, exact count, merge rules, determinism."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from cotcredit.data.trace import Trace
from cotcredit.errors import UserError
from cotcredit.lm import Scorer
from cotcredit.segmentation import (
    SegmentOptions,
    build_segmentation,
    candidate_cuts,
    line_starts,
    segment_encoded,
    segmentation_from_rows,
    step_segmentation,
)

RESPONSE = (
    "Let me think step by step.\nApples cost 5 dollars. Wait, oranges cost 7.\n"
    "So 5 + 7 = 12. Hmm, but the question asks for two apples.\nActually, 2 * 5 = 10.\n"
    "Then 10 + 7 = 17.\nTherefore the total is 17.\nThe final answer is $\\boxed{17}$."
)
TRACE = Trace("x", "Two apples and an orange?", RESPONSE, "17")


@pytest.fixture
def encoded(scorer: Scorer):
    enc = scorer.encode(TRACE)
    return enc, scorer.forward(enc.ids, keep_cache=False).entropies


def check_invariants(enc, seg):
    assert "".join(s.text for s in seg.segments) == enc.reasoning_text
    assert seg.segments[0].token_start == 0 and seg.segments[-1].token_end == enc.n_reasoning
    for a, b in zip(seg.segments, seg.segments[1:]):
        assert a.token_end == b.token_start and a.char_end == b.char_start
    for s in seg.segments:
        assert s.n_tokens >= 1
        assert s.char_start == enc.token_starts[s.token_start]
        assert s.char_end == enc.token_starts[s.token_end]
        assert s.text == TRACE.response[s.char_start : s.char_end]
    assert [s.index for s in seg.segments] == list(range(len(seg)))


def test_candidates_at_lines_and_keywords(encoded):
    enc, _ = encoded
    cuts = candidate_cuts(enc, SegmentOptions().keywords)
    starts = {enc.reasoning_text[enc.token_starts[t]:].lstrip()[:5] for t in cuts}
    for word in ("Apple", "Wait,", "So 5 ", "Hmm, ", "Actua", "Then ", "There"):
        assert word in starts


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 12, 30])
@pytest.mark.parametrize("merge", ["pair", "boundary"])
def test_exact_count_and_coverage(encoded, k, merge):
    enc, ent = encoded
    seg = segment_encoded(enc, ent, SegmentOptions(segments=k, merge=merge))
    assert len(seg) == k  # fewer candidates than k are topped up with high-entropy cuts
    check_invariants(enc, seg)


def test_deterministic(encoded):
    enc, ent = encoded
    a = segment_encoded(enc, ent, SegmentOptions(segments=4))
    b = segment_encoded(enc, ent, SegmentOptions(segments=4))
    assert a == b


def _fake_entropy(enc, high_at):
    ent = torch.full((enc.prompt_len + enc.n_reasoning,), 0.1)
    for t in high_at:
        ent[enc.prompt_len - 1 + t] = 9.0
    return ent


def test_boundary_merge_keeps_high_entropy_cuts(encoded):
    enc, _ = encoded
    cands = candidate_cuts(enc, SegmentOptions().keywords)
    keep = [cands[1], cands[4]]
    seg = segment_encoded(enc, _fake_entropy(enc, keep),
                          SegmentOptions(segments=3, merge="boundary"))
    assert [s.token_start for s in seg.segments[1:]] == keep


def test_pair_merge_merges_lowest_summed_entropy(encoded):
    enc, _ = encoded
    cands = candidate_cuts(enc, SegmentOptions().keywords)
    bounds = [0, *cands, enc.n_reasoning]
    # Make every token of the last candidate segment costly: it stays while the rest merges.
    last = list(range(bounds[-2], bounds[-1]))
    seg = segment_encoded(enc, _fake_entropy(enc, last), SegmentOptions(segments=2, merge="pair"))
    assert seg.segments[1].token_start == bounds[-2]


def test_min_and_max_tokens(encoded):
    enc, ent = encoded
    seg = segment_encoded(enc, ent, SegmentOptions(segments=50, min_tokens=6))
    assert all(s.n_tokens >= 6 for s in seg.segments)
    check_invariants(enc, seg)
    seg = segment_encoded(enc, ent, SegmentOptions(segments=2, max_tokens=15))
    assert all(s.n_tokens <= 15 for s in seg.segments)
    check_invariants(enc, seg)


def test_options_validation():
    with pytest.raises(UserError, match="--segments"):
        SegmentOptions(segments=0).validate()
    with pytest.raises(UserError, match="--merge"):
        SegmentOptions(merge="x").validate()


def test_round_trip_from_rows_and_mismatch(encoded):
    enc, ent = encoded
    seg = segment_encoded(enc, ent, SegmentOptions(segments=4))
    rows = [{"segment": s.index, "char_start": s.char_start, "char_end": s.char_end,
             "token_start": s.token_start, "token_end": s.token_end} for s in seg.segments]
    back = segmentation_from_rows(enc, rows, "s.parquet")
    assert [(s.token_start, s.token_end, s.text) for s in back.segments] == \
           [(s.token_start, s.token_end, s.text) for s in seg.segments]
    rows[1]["char_start"] += 1
    with pytest.raises(UserError, match="does not match this model's tokenization"):
        segmentation_from_rows(enc, rows, "s.parquet")


def test_build_segmentation_from_bounds(encoded):
    enc, _ = encoded
    seg = build_segmentation(enc, [0, 3, enc.n_reasoning])
    assert len(seg) == 2 and seg.boundaries == [0, 3, enc.n_reasoning]


def _naive_merge(bounds, ent, options, target):
    """The merge as first written: rescan every pair before each merge (O(n²))."""
    bounds = list(bounds)
    prefix = torch.cat([torch.zeros(1, dtype=torch.float64), ent.cumsum(0)])

    def seg_sum(i):
        return float(prefix[bounds[i + 1]] - prefix[bounds[i]])

    def cost(i):
        if options.merge == "boundary":
            return float(ent[bounds[i + 1]])
        return seg_sum(i) + seg_sum(i + 1)

    def can_merge(i):
        return options.max_tokens is None or bounds[i + 2] - bounds[i] <= options.max_tokens

    while len(bounds) > 2:
        short = [i for i in range(len(bounds) - 1)
                 if bounds[i + 1] - bounds[i] < options.min_tokens]
        if not short:
            break
        i = short[0]
        choices = [j for j in (i - 1, i) if 0 <= j < len(bounds) - 2]
        del bounds[min(choices, key=lambda j: (cost(j), j)) + 1]
    while len(bounds) - 1 > target:
        pairs = [i for i in range(len(bounds) - 2) if can_merge(i)]
        if not pairs:
            break
        del bounds[min(pairs, key=lambda i: (cost(i), i)) + 1]
    return bounds


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 60).flatmap(lambda n: st.tuples(
        st.just(n),
        st.lists(st.integers(1, n - 1), unique=True, max_size=n - 1),
        st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, 3.0]), min_size=n, max_size=n),
    )),
    st.integers(1, 12), st.sampled_from(["pair", "boundary"]), st.integers(1, 6),
    st.one_of(st.none(), st.integers(6, 30)),
)
def test_heap_merge_equals_the_naive_scan(case, target, merge, min_tokens, max_tokens):
    from cotcredit.segmentation import _merge

    n, cuts, values = case
    bounds = [0, *sorted(cuts), n]
    ent = torch.tensor(values, dtype=torch.float64)  # few distinct values: many ties
    opts = SegmentOptions(segments=target, merge=merge, min_tokens=min_tokens,
                          max_tokens=max_tokens)
    assert _merge(bounds, ent, opts, target) == _naive_merge(bounds, ent, opts, target)


def test_lines_cut_after_every_line_break_and_merge_nothing(encoded):
    enc, ent = encoded
    seg = segment_encoded(enc, ent, SegmentOptions(segments="lines").validate())
    check_invariants(enc, seg)
    # the reasoning's lines, in order, each keeping its line break
    assert [s.text for s in seg.segments] == enc.reasoning_text.splitlines(keepends=True)
    # the same cuts as the hybrid segmentation's line-break candidates, with no keyword cuts
    assert seg.boundaries[1:-1] == candidate_cuts(enc, ())
    assert SegmentOptions(segments=" lines ").validate().segments == "lines"
    with pytest.raises(UserError, match="'lines'"):
        SegmentOptions(segments="line").validate()


def test_steps_snap_like_lines_and_reject_a_cut_inside_a_token(scorer: Scorer):
    # steps at the line starts give the same segments as the per-line segmentation
    starts = sorted({0, *line_starts(RESPONSE)})
    spans = tuple(zip(starts, [*starts[1:], len(RESPONSE)]))
    enc = scorer.encode(Trace("x", TRACE.prompt, RESPONSE, "17", steps=spans))
    lines = segment_encoded(enc, scorer.forward(enc.ids, keep_cache=False).entropies,
                            SegmentOptions(segments="lines").validate())
    assert step_segmentation(enc).boundaries == lines.boundaries
    # a step starting one character into a multi-character first token cannot be cut there
    first_end = scorer.encode(TRACE).token_starts[1]
    assert first_end >= 2
    bad = Trace("x", TRACE.prompt, RESPONSE, "17", steps=((0, 1), (1, len(RESPONSE))))
    with pytest.raises(UserError, match="step 1 starts inside the first token of step 0"):
        step_segmentation(scorer.encode(bad))
