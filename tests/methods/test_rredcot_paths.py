"""RREDCoT's v̂ over several known paths: references, alignment by content, each path counted
once, the combination of R̂ and v̂; every variant against a direct computation (one full forward
per probe) and g_K ≤ 1 where it must hold."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from cotcredit.data.trace import FieldNames, Trace
from cotcredit.data.traces import iter_traces
from cotcredit.errors import UserError
from cotcredit.lm.encoding import ForcingOptions, answer_forcing, connector_after
from cotcredit.lm.passes import ContinuationScore
from cotcredit.methods import TraceContext
from cotcredit.methods.rredcot import (
    RredcotOptions,
    RredcotProbes,
    combine,
    combined,
    estimate,
    reference_steps,
    terminal_value,
    trace_references,
)
from cotcredit.methods.rredcot.probes import (
    NO_SIBLINGS_NOTE,
    distinct_references,
    parts_after,
    paths_after,
    steps_written,
)
from cotcredit.pipeline.run import InputOptions, SiblingIndex, run_analysis
from cotcredit.segmentation import SegmentOptions, segment_encoded

ANSWER_LINE = ForcingOptions(exit_string="The answer is ")
A = "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12."
B = "There are 3 apples.\nAt 4 each they cost 12.\nThe answer is 12."
TRACE = Trace(
    "paths", "What do 3 apples cost at 4 each?",
    "Apples cost 4 each.\nThere are 3 apples.\nSo 3 apples cost 12.\nThe answer is 12.", "12",
    solution=A, outcome=1.0, extra={"solutions": [A, B.replace("\n", "  \n\n  ")]},
)
A1, A2 = "Apples cost 4 each.", "So 3 apples cost 12."
B1, B2 = "There are 3 apples.", "At 4 each they cost 12."
# The parts of each reference (A, B) after s_0..s_3 (the trace's lines: A1, B1, A2), by hand.
EXPECTED = {
    "whole": [[[f"{A1}\n{A2}"], [f"{B1}\n{B2}"]]] * 4,
    "remaining": [[[f"{A1}\n{A2}"], [f"{B1}\n{B2}"]], [[f"{A1}\n{A2}"], [f"{B1}\n{B2}"]],
                  [[A2], [B2]], [[""], [""]]],
    "matched": [[[f"{A1}\n{A2}"], [f"{B1}\n{B2}"]], [[A2], [f"{B1}\n{B2}"]], [[A2], [B2]],
                [[""], [B2]]],
    "suffixes": [[[f"{A1}\n{A2}", A2, ""], [f"{B1}\n{B2}", B2, ""]]] * 4,
}


def test_references_are_distinct_by_their_lines():
    refs = distinct_references([A, None, "", A + "\n", B, B.replace("\n", "  \n\n  ")], 8)
    assert refs == [[A1, A2], [B1, B2]]  # the answer line is no step; duplicates once
    assert distinct_references([A, B], 1) == [[A1, A2]]


def test_steps_written_finds_the_last_reference_step_the_state_wrote():
    assert steps_written([A1, A2], []) == 0
    assert steps_written([A1, A2], [" Apples  cost 4 each. "]) == 1
    assert steps_written([A1, A2], [A1, "an inserted line", A2]) == 2
    assert steps_written([A1, A2], [A2]) == 2  # written out of order: what follows it remains
    assert steps_written([A1, A2], ["Apples cost 5 each."]) == 0


@pytest.mark.parametrize("alignment", list(EXPECTED))
def test_parts_after_each_state_by_hand(alignment):
    lines = [[], [A1], [A1, B1], [A1, B1, A2]]
    for k in range(4):
        got = [parts_after(steps, lines[k], k, 3, alignment) for steps in ([A1, A2], [B1, B2])]
        assert got == EXPECTED[alignment][k], (alignment, k)


def test_paths_shared_by_references_are_scored_once_and_empty_ones_dropped():
    texts, owned = paths_after([[A1, A2], [B1, A2]], [A1], 1, 3, "suffixes", keep_empty=False)
    assert texts == [f"{A1}\n{A2}", A2, f"{B1}\n{A2}"] and owned == [[0, 1], [2, 1]]
    texts, owned = paths_after([[A1, A2]], [A1, A2], 2, 2, "matched", keep_empty=True)
    assert texts == [""] and owned == [[0]]
    assert paths_after([[A1, A2]], [A1, A2], 2, 2, "matched", keep_empty=False) == ([], [[]])


# ---- against a direct computation -----------------------------------------------------------
def _context(scorer, trace=TRACE):
    enc = scorer.encode(trace, reserve=128)
    fwd = scorer.forward(enc.ids)
    seg = segment_encoded(enc, fwd.entropies, SegmentOptions(segments="lines"))
    return TraceContext(scorer, enc, fwd, seg)


def _logprob(model, seq, spans) -> float:
    """Σ log p(seq[t] | seq[:t]) over the half-open token spans, from one plain forward."""
    with torch.no_grad():
        lp = torch.log_softmax(model(input_ids=torch.tensor([seq])).logits[0].double(), -1)
    return math.fsum(float(lp[t - 1, seq[t]]) for a, b in spans for t in range(a, b))


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _direct(scorer, ctx, options: RredcotOptions, parts) -> tuple[list, list, list]:
    """R̂_k, v̂_k and g_k by the formulas, every probe scored by its own full forward pass."""
    forcing = answer_forcing(scorer, options.forcing)
    model, ids, trace = scorer.model, ctx.encoded.ids, ctx.trace
    keep = options.empty_part == "keep" or options.value == "vhat"
    r_hat, v_hat, g = [], [], []
    for k, b in enumerate(ctx.segmentation.boundaries):
        prefix = ids[: ctx.prefix_len(b)]
        probe = forcing.answer_probe(trace.answer)
        r = _logprob(model, prefix + probe.ids,
                     [(len(prefix) + probe.span("answer")[0], len(prefix) + len(probe.ids))])
        c = connector_after(scorer.tokenizer.decode(prefix[-4:]), options.connector)

        def path(text, c=c, prefix=prefix):
            p = forcing.solution_probe(c, text, trace.answer)
            n = len(prefix)
            (u0, u1), (y0, _) = p.span("solution"), p.span("answer")
            log_u = _logprob(model, prefix + p.ids, [(n + u0, n + u1)])
            if options.length_norm:
                log_u /= max(u1 - u0, 1)
            return log_u + _logprob(model, prefix + p.ids, [(n + y0, n + len(p.ids))])

        own = [[t for t in ref if t or keep] for ref in parts[k]]
        logs = {t: path(t) for ref in own for t in ref}
        per_ref = [_log(math.fsum(math.exp(logs[t]) for t in ref)) for ref in own]
        if options.mixture == "sum":
            v = _log(math.fsum(math.exp(x) for x in logs.values()))
        elif options.mixture == "mean":
            v = _log(math.fsum(math.exp(x) for x in per_ref) / len(per_ref))
        else:
            v = max(per_ref)
        a = math.exp(r) if options.value != "vhat" else 0.0
        bv = options.vhat_weight * math.exp(v)
        gp = {"sum": a + bv, "noisy-or": 1 - (1 - a) * (1 - bv),
              "mean": (a + bv) / (1 + options.vhat_weight)}[options.combination]
        if options.value == "vhat":
            gp = bv
        elif options.combination == "mean" and v == -math.inf:
            gp = a  # nothing left: the mean of the estimates there are
        r_hat.append(r)
        v_hat.append(v)
        g.append(gp if options.space == "prob" else _log(gp))
    return r_hat, v_hat, g


EXTRAS = ({}, {"combination": "noisy-or", "space": "log"},
          {"combination": "mean", "vhat_weight": 0.5, "length_norm": True})
VARIANTS = [
    {"solution_part": part, "references": "solutions", "mixture": mix, "empty_part": empty}
    for part in EXPECTED for mix in ("sum", "mean", "max") for empty in ("drop", "keep")
]


@pytest.mark.parametrize("i", range(len(VARIANTS)),
                         ids=lambda i: "-".join(VARIANTS[i].values()))
def test_every_variant_equals_its_direct_computation(scorer, i):
    variant = VARIANTS[i]
    ctx = _context(scorer)
    assert [s.text for s in ctx.segmentation.segments] == [A1 + "\n", B1 + "\n", A2 + "\n"]
    parts = EXPECTED[variant["solution_part"]]
    for extra in (EXTRAS[i % 3],):  # each combination and space over the variants
        options = RredcotOptions(value="both", forcing=ANSWER_LINE, **variant, **extra)
        est = estimate(ctx, options)
        r, v, g = _direct(scorer, ctx, options, parts)
        assert est.r_hat == pytest.approx(r, abs=1e-4)
        for got, want in zip(est.v_hat, v, strict=True):
            assert got == want if want == -math.inf else got == pytest.approx(want, abs=1e-4)
        if options.space == "log":
            assert est.g == pytest.approx(g, abs=1e-4)
        else:
            assert est.g == pytest.approx(g, rel=1e-4, abs=1e-12)


def test_one_reference_and_value_vhat_against_the_direct_computation(scorer):
    ctx = _context(scorer)
    for refs, parts in (("solution", [[p[0]] for p in EXPECTED["matched"]]),
                        ("solutions", EXPECTED["matched"])):
        options = RredcotOptions(value="vhat", references=refs, solution_part="matched",
                                 empty_part="drop", forcing=ANSWER_LINE)
        est = estimate(ctx, options)
        _, v, g = _direct(scorer, ctx, options, parts)
        assert est.v_hat == pytest.approx(v, abs=1e-4)
        assert math.isfinite(est.v_hat[-1])  # v̂ alone keeps the empty path: it is the answer


def test_packed_equals_naive_for_many_paths(scorer):
    ctx = _context(scorer)
    options = RredcotOptions(references="solutions", solution_part="suffixes", mixture="mean",
                             forcing=ANSWER_LINE)
    packed = estimate(ctx, options)
    naive = estimate(ctx, RredcotOptions(**{**options.__dict__, "probe_mode": "naive"}))
    assert packed.v_hat == pytest.approx(naive.v_hat, abs=1e-4)
    assert packed.g == pytest.approx(naive.g, rel=1e-4)


def test_without_references_v_hat_is_absent():
    probes = RredcotProbes([], 3)
    est = combine(probes, [ContinuationScore(-1.0)] * 3, RredcotOptions())
    assert est.v_hat == [None] * 3 and est.g == pytest.approx([math.exp(-1.0)] * 3)


# ---- each path counted once: g_K ≤ 1 ----------------------------------------------------------
def _certain(n_states: int, paths: list[list[list[int]]], n_paths: int):
    """Scores of a model certain of the reference: every probe token has probability 1."""
    r = [ContinuationScore(0.0, [0.0]) for _ in range(n_states)]
    v = [ContinuationScore(0.0, [0.0, 0.0, 0.0]) for _ in range(n_paths)]
    return RredcotProbes([None] * (n_states + n_paths), n_states, [(1, 2)] * n_paths, paths), r + v


@pytest.mark.parametrize("combination", ["sum", "noisy-or", "mean"])
def test_a_model_certain_of_the_reference_ends_at_one(combination):
    # Two states; at the last one the only part left is empty: kept it is R̂'s path again.
    kept, scores = _certain(2, [[[0]], [[1]]], 2)
    dropped, scores_d = _certain(2, [[[0]], [[]]], 1)
    opts = RredcotOptions(combination=combination)
    g_keep = combine(kept, scores, opts).g
    g_drop = combine(dropped, scores_d, opts).g
    assert g_drop[-1] == pytest.approx(1.0)
    # Correct trace: the terminal correction 1 − g_K is never negative once counted once.
    assert terminal_value(1.0, g_drop) - g_drop[-1] >= -1e-12
    if combination == "sum":
        assert g_keep[-1] == pytest.approx(2.0)  # today's double count: g_K = 2·p(Y*)
    else:
        assert g_keep[-1] == pytest.approx(1.0)


@pytest.mark.parametrize("part", list(EXPECTED))
@pytest.mark.parametrize("mixture", ["sum", "mean", "max"])
def test_g_is_a_probability_on_a_real_model(scorer, part, mixture):
    """Distinct paths are disjoint continuations: with the empty part dropped, R̂ + Σ v̂ ≤ 1."""
    ctx = _context(scorer)
    for combination in ("sum", "noisy-or", "mean"):
        est = estimate(ctx, RredcotOptions(references="solutions", solution_part=part,
                                           mixture=mixture, empty_part="drop",
                                           combination=combination, forcing=ANSWER_LINE))
        assert all(0 <= g <= 1 for g in est.g)


def test_combined_formulas():
    o = RredcotOptions
    a, b = math.log(0.6), math.log(0.5)
    assert combined(a, b, o(combination="sum")) == pytest.approx(1.1)
    assert combined(a, b, o(combination="noisy-or")) == pytest.approx(1 - 0.4 * 0.5)
    assert combined(a, b, o(combination="mean", vhat_weight=0.5)) == pytest.approx(0.85 / 1.5)
    assert combined(a, b, o(combination="noisy-or", space="log")) == pytest.approx(math.log(0.8))
    assert combined(a, -math.inf, o(combination="noisy-or")) == pytest.approx(0.6)
    assert combined(a, None, o()) == pytest.approx(0.6)
    assert combined(0.0, 0.0, o(combination="noisy-or")) == pytest.approx(1.0)
    with pytest.raises(UserError, match="noisy-or"):
        o(combination="noisy-or", vhat_weight=2.0).validate()
    with pytest.raises(UserError, match="max-references"):
        o(max_references=0).validate()


# ---- references from the traces file ----------------------------------------------------------
def _records():
    base = {"prompt": "What do 3 apples cost at 4 each?", "answer": "12", "solution": A}
    return [
        {**base, "id": "p1-a", "problem_id": "p1", "correct": True,
         "response": "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12."},
        {**base, "id": "p1-b", "problem_id": "p1", "correct": False,
         "response": "Apples cost 4 each.\nSo 3 apples cost 13.\nThe answer is 13."},
        {**base, "id": "p1-c", "problem_id": "p1", "correct": True,
         "response": "There are 3 apples.\nAt 4 each they cost 12.\nThe answer is 12."},
        {**base, "id": "p2-a", "problem_id": "p2", "correct": True,
         "response": "Three apples.\nFour each: 12.\nThe answer is 12."},
    ]


def test_siblings_are_the_other_right_answers_to_the_same_problem(scorer, tmp_path):
    records = _records()
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    # mean: every reference weighs (a sum is dominated by the likeliest on a random model)
    opts = {"solution_part": "matched", "empty_part": "drop", "mixture": "mean",
            "forcing": ANSWER_LINE}
    seg = SegmentOptions(segments="lines")
    got = pd.DataFrame(run_analysis(path, scorer, segment_options=seg, methods={
        "rredcot": RredcotOptions(references="siblings", **opts)}).rows["rredcot"])
    # The same numbers as listing them by hand in `solutions` (never the trace itself).
    siblings = {"p1-a": [records[2]["response"]], "p1-b": [records[0]["response"],
                records[2]["response"]], "p1-c": [records[0]["response"]], "p2-a": []}
    listed = tmp_path / "listed.jsonl"
    listed.write_text("".join(json.dumps({**r, "solutions": siblings[r["id"]]}) + "\n"
                              for r in records))
    want = pd.DataFrame(run_analysis(listed, scorer, segment_options=seg, methods={
        "rredcot": RredcotOptions(references="solutions", **opts)}).rows["rredcot"])
    cols = ["trace_id", "segment", "score", "v_hat", "g_after"]
    pd.testing.assert_frame_equal(got[cols], want[cols])
    alone = pd.DataFrame(run_analysis(path, scorer, segment_options=seg, methods={
        "rredcot": RredcotOptions(references="solution", **opts)}).rows["rredcot"])
    assert not got.loc[got.trace_id == "p1-b", "v_hat"].equals(
        alone.loc[alone.trace_id == "p1-b", "v_hat"])


def test_siblings_without_a_file_follow_the_listed_solutions(scorer, tmp_path):
    """In-memory traces have no siblings: they follow their `solution` and `solutions` alone,
    the run says so once, and nothing raises. A file read with other field names finds its
    siblings with those names (here: none besides the trace itself)."""
    seg = SegmentOptions(segments="lines")
    opts = {"solution_part": "matched", "empty_part": "drop", "forcing": ANSWER_LINE}

    def rows(traces, references):
        s = run_analysis(traces, scorer, segment_options=seg, methods={
            "rredcot": RredcotOptions(references=references, **opts)})
        return pd.DataFrame(s.rows["rredcot"]), s.notes

    got, notes = rows([TRACE, WRONG], "siblings")
    want, want_notes = rows([TRACE, WRONG], "solutions")
    cols = ["trace_id", "segment", "score", "v_hat", "g_after"]
    pd.testing.assert_frame_equal(got[cols], want[cols])
    assert notes.count(NO_SIBLINGS_NOTE) == 1 and NO_SIBLINGS_NOTE not in want_notes
    # A file read with other field names: its siblings are read with the same names.
    path = tmp_path / "renamed.jsonl"
    path.write_text(json.dumps({"key": TRACE.id, "question": TRACE.prompt, "text": TRACE.response,
                                "answer": TRACE.answer, "solution": TRACE.solution,
                                "solutions": TRACE.extra["solutions"], "correct": True}) + "\n")
    fields = FieldNames().override(id="key", prompt="question", response="text")
    s = run_analysis(path, scorer, segment_options=seg, inputs=InputOptions(fields=fields),
                     methods={"rredcot": RredcotOptions(references="siblings", **opts)})
    read = pd.DataFrame(s.rows["rredcot"])
    assert read.v_hat.tolist() == want[want.trace_id == TRACE.id].v_hat.tolist()
    assert NO_SIBLINGS_NOTE not in s.notes


def test_listed_solutions_come_before_siblings_and_the_cap_cuts_siblings(scorer, tmp_path):
    records = _records()
    listed = "Twelve is 3 times 4.\nThe answer is 12."
    records[0]["solutions"] = [listed]
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    trace = next(t for t in iter_traces(path, FieldNames()) if t.id == "p1-a")
    siblings = SiblingIndex(path, InputOptions()).of(trace)  # what the input stage hands over
    sibling = records[2]["response"]
    assert siblings == [sibling]
    order = [A, listed, sibling]
    for cap in (1, 2, 3, 8):
        got = trace_references(trace, RredcotOptions(max_references=cap), siblings)
        assert got == [reference_steps(t) for t in order[:cap]], cap
    notes: list[str] = []
    trace_references(trace, RredcotOptions(), siblings, notes)
    assert notes == []  # siblings given: nothing to say
    trace_references(trace, RredcotOptions(), None, notes)
    assert notes == [NO_SIBLINGS_NOTE]  # none given: its listed solutions, said once


def test_solutions_field_must_be_texts(scorer):
    trace = Trace("m", "q?", "One.\nThe answer is 1.", "1", solution="One.",
                  extra={"solutions": [1, 2]})
    with pytest.raises(UserError, match="'solutions' must be a list of texts"):
        run_analysis([trace], scorer,
                     methods={"rredcot": RredcotOptions(references="solutions")})


# ---- redistribution invariants and determinism under the variants -------------------------
WRONG = Trace(
    "paths-wrong", TRACE.prompt,
    "Apples cost 4 each.\nThere are 3 apples.\nSo 3 apples cost 13.\nThe answer is 13.", "12",
    solution=A, outcome=0.0, extra={"solutions": [A, B]},
)
ROUTED = {"references": "solutions", "solution_part": "matched", "empty_part": "drop",
          "mixture": "mean", "combination": "noisy-or", "max_references": 3}
#: The one-reference estimator that was the default before v̂ followed every known path.
ONE_REFERENCE = {"references": "solution", "solution_part": "remaining", "empty_part": "keep"}
INVARIANT_VARIANTS = [
    {},
    ONE_REFERENCE,
    {**ONE_REFERENCE, "empty_part": "drop"},
    ROUTED,
    {"references": "solutions", "solution_part": "suffixes", "empty_part": "drop"},
    {"references": "solutions", "solution_part": "remaining", "mixture": "max",
     "combination": "mean", "space": "log"},
]


def _rows(scorer, traces, **options) -> pd.DataFrame:
    summary = run_analysis(traces, scorer, segment_options=SegmentOptions(segments="lines"),
                           methods={"rredcot": RredcotOptions(forcing=ANSWER_LINE, **options)})
    return pd.DataFrame(summary.rows["rredcot"])


@pytest.mark.parametrize("sum_to", ["return", "advantage"])
@pytest.mark.parametrize("i", range(len(INVARIANT_VARIANTS)))
def test_rewards_sum_to_the_outcome_under_every_variant(scorer, i, sum_to):
    rows = _rows(scorer, [TRACE, WRONG], sum_to=sum_to, **INVARIANT_VARIANTS[i])
    for trace_id, t in rows.groupby("trace_id"):
        t = t.sort_values("segment")
        outcome = 1.0 if trace_id == TRACE.id else 0.0
        if t.space.iloc[0] == "prob":
            assert (t.terminal == outcome).all()
        want = t.terminal.iloc[0] - (t.g_before.iloc[0] if sum_to == "advantage" else 0.0)
        assert t.score.sum() == pytest.approx(want, abs=1e-9)
        # Every segment but the last gets exactly g_k − g_(k−1); the last also the correction.
        inner = (t.g_after - t.g_before).to_numpy(copy=True)
        inner[-1] += t.correction.iloc[-1]
        if sum_to == "return":
            inner[0] += t.g_before.iloc[0]
        assert t.score.to_numpy() == pytest.approx(inner, abs=1e-12)
        assert t.correction.iloc[-1] == pytest.approx(t.terminal.iloc[0] - t.g_after.iloc[-1])


def test_every_variant_is_deterministic(scorer):
    for variant in INVARIANT_VARIANTS:
        a = _rows(scorer, [TRACE, WRONG], **variant)
        b = _rows(scorer, [TRACE, WRONG], **variant)
        cols = ["trace_id", "segment", "score", "r_hat", "v_hat", "g_before", "g_after"]
        pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)


def test_dropping_the_empty_part_changes_only_states_with_nothing_left(scorer):
    keep = _rows(scorer, [TRACE], **ONE_REFERENCE)
    drop = _rows(scorer, [TRACE], **{**ONE_REFERENCE, "empty_part": "drop"})
    # remaining: nothing of the reference is left at s_K only; R̂ is untouched everywhere.
    assert keep.r_hat.tolist() == drop.r_hat.tolist()
    assert keep.v_hat.iloc[:-1].tolist() == drop.v_hat.iloc[:-1].tolist()
    assert keep.v_hat.iloc[-1] == pytest.approx(keep.r_hat.iloc[-1], abs=1e-3)  # R̂ again
    assert drop.v_hat.iloc[-1] == -math.inf
    assert drop.g_after.iloc[-1] == pytest.approx(math.exp(drop.r_hat.iloc[-1]))


# ---- the routes in: command line, train config, verl section -----------------------------------
def test_the_value_options_reach_the_command_line(scorer, tiny_model_dir, tmp_path, capsys):
    from conftest import run_cli

    path = tmp_path / "traces.jsonl"
    record = {"id": TRACE.id, "prompt": TRACE.prompt, "response": TRACE.response,
              "answer": TRACE.answer, "solution": A, "solutions": [A, B], "correct": True}
    path.write_text(json.dumps(record) + "\n")
    out = tmp_path / "rr.parquet"
    code, _, err = run_cli(["redistribute", path, "--model", tiny_model_dir, "-k", "lines",
                            "--exit-string", "The answer is ", "--references", "solutions",
                            "--solution-part", "matched", "--empty-part", "drop", "--mixture",
                            "mean", "--combination", "noisy-or", "--max-references", "3",
                            "-o", out, "-q"], capsys)
    assert code == 0, err
    got = pd.read_parquet(out).sort_values("segment")
    want = _rows(scorer, str(path), **ROUTED)
    assert got.score.tolist() == pytest.approx(want.score.tolist(), abs=1e-6)
    assert got.v_hat.tolist() == pytest.approx(want.v_hat.tolist(), abs=1e-6)
    code, _, err = run_cli(["redistribute", path, "--model", tiny_model_dir, "--mixture",
                            "median", "-o", tmp_path / "x.parquet"], capsys)
    assert code == 2 and "--mixture" in err and err.count("\n") == 1


def test_a_train_config_and_the_verl_section_take_the_value_options(tmp_path):
    from cotcredit.training.config import load_config
    from cotcredit.training.verl import credit_options

    path = tmp_path / "config.yaml"
    path.write_text("train_file: data/train.jsonl\noutput_dir: runs/x\nrredcot:\n  value: both\n"
                    + "".join(f"  {k}: {v}\n" for k, v in ROUTED.items()))
    options = load_config(path).rredcot.options()
    assert {k: getattr(options, k) for k in ROUTED} == ROUTED
    assert options.sum_to == "advantage"
    path.write_text("train_file: data/train.jsonl\noutput_dir: runs/x\n"
                    "rredcot: {combination: noisy-or, vhat_weight: 2}\n")
    with pytest.raises(UserError, match="noisy-or"):
        load_config(path)
    verl = credit_options({"segments": "lines", **ROUTED})
    assert {k: getattr(verl.rredcot, k) for k in ROUTED} == ROUTED
    with pytest.raises(UserError, match="algorithm.rredcot"):
        credit_options({"mixture": "median"})


def test_the_bench_rows_keep_the_estimator_they_name(tmp_path):
    """The bench's `rredcot` row is the method's default; `rredcot-one-reference` the earlier
    one-reference estimator; options a config gives a default row go on top of its own."""
    import dataclasses

    from cotcredit.bench.variants import KNOWN_PATHS, method_runs, read_variants, regime_options

    def built(variants, label):
        run = next(r for r in method_runs(label, variants) if r.label == label)
        return regime_options(run, "The answer is ", {}, 0, 0)

    variants = read_variants(None)
    earlier = built(variants, "rredcot-one-reference")
    assert (earlier.value, earlier.references, earlier.solution_part, earlier.empty_part) == (
        "both", *ONE_REFERENCE.values())
    assert built(variants, "rredcot-rhat").value == "rhat"
    known = built(variants, "rredcot")  # the method's default, named in full
    assert known == dataclasses.replace(RredcotOptions(), forcing=known.forcing)
    config = tmp_path / "variants.yaml"
    config.write_text("rredcot-one-reference: {length_norm: true}\nrredcot: {method: rredcot}\n")
    variants = read_variants(config)
    assert built(variants, "rredcot-one-reference") == dataclasses.replace(earlier,
                                                                           length_norm=True)
    default = built(variants, "rredcot")
    assert default == dataclasses.replace(RredcotOptions(), forcing=default.forcing)
    assert {k: getattr(default, k) for k in KNOWN_PATHS} == KNOWN_PATHS


def test_references_are_resolved_once_per_trace_from_the_input_stage(scorer, tmp_path,
                                                                    monkeypatch):
    """The input stage reads the siblings (the method never opens the input), and a trace's
    references are resolved once: before it is encoded, then carried on its context."""
    import cotcredit.methods.rredcot as rredcot
    import cotcredit.methods.rredcot.probes as probes
    from cotcredit.data import traces as data_traces

    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    calls: list[str] = []
    real = rredcot.known_paths

    def counted(trace, *args, **kwargs):
        calls.append(trace.id)
        return real(trace, *args, **kwargs)

    monkeypatch.setattr(rredcot, "known_paths", counted)
    monkeypatch.setattr(probes, "known_paths", counted)
    opened: list[str] = []
    real_iter = data_traces.iter_traces
    monkeypatch.setattr(data_traces, "iter_traces",
                        lambda *a, **k: opened.append("method") or real_iter(*a, **k))
    rows = run_analysis(path, scorer, segment_options=SegmentOptions(segments="lines"),
                        methods={"rredcot": RredcotOptions(forcing=ANSWER_LINE)}).rows["rredcot"]
    assert sorted(calls) == ["p1-a", "p1-b", "p1-c", "p2-a"]  # once each
    assert opened == []  # no lookup of the reader at run time: the method never opens the input
    assert {r["trace_id"] for r in rows} == set(calls)
