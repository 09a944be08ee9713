"""Truncated rollouts (`mc --horizon N`, `--horizon-lines L`): horizon 0 is R̂, a horizon no
rollout reaches is plain Monte Carlo, and in between each cut rollout is plain Monte Carlo's
rollout cut short and valued by the forced answer after it."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from cotcredit.data.traces import iter_traces
from cotcredit.errors import UserError
from cotcredit.lm.encoding import ForcingOptions, answer_forcing
from cotcredit.lm.generation import SamplingOptions
from cotcredit.lm.passes import Continuation
from cotcredit.lm.sampling import HFGenerator
from cotcredit.methods.mc import McOptions
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.pipeline.run import run_analysis, with_rendered_prompt
from cotcredit.segmentation import SegmentOptions

COMMON = dict(rollouts=4, max_new_tokens=6, seed=0)
SEGMENTS = SegmentOptions(segments=3)
VALUES = ["value_before", "value_after", "score", "n_rollouts"]


def run(scorer, traces_file, tmp_path=None, extra=None, **opts):
    path = {} if tmp_path is None else {"save_rollouts": str(tmp_path / "ro.parquet")}
    methods = {"mc": McOptions(**{**COMMON, **opts, **path}), **(extra or {})}
    s = run_analysis(traces_file, scorer, methods=methods, segment_options=SEGMENTS)
    out = {k: pd.DataFrame(v).sort_values(["trace_id", "segment"]).reset_index(drop=True)
           for k, v in s.rows.items()}
    return out, (pd.read_parquet(path["save_rollouts"]) if path else None)


def test_horizon_zero_is_rhat(scorer, traces_file, graded):
    tables, _ = run(scorer, traces_file, horizon=0, extra={"rredcot": RredcotOptions(
        value="rhat")})
    mc, rr = tables["mc"], tables["rredcot"]
    # V_k = p(Y* | s_k ⊕ E), RREDCoT's R̂ in probability space (its g with --value rhat).
    assert mc["value_after"].to_numpy() == pytest.approx(rr["g_after"].to_numpy(), rel=1e-5)
    assert mc["value_before"].to_numpy() == pytest.approx(rr["g_before"].to_numpy(), rel=1e-5)
    assert (mc["cost_generated_tokens"] == 0).all() and (mc["n_rollouts"] == 4).all()
    # It reads the trace pass and one probe per boundary (identical rollouts scored once), as
    # R̂ does: the same forward tokens.
    assert (mc["cost_forward_tokens"] == rr["cost_forward_tokens"]).all()


@pytest.mark.parametrize("horizon", [6, 100])
def test_a_horizon_no_rollout_reaches_is_plain_monte_carlo(scorer, traces_file, graded,
                                                           horizon):
    plain, _ = run(scorer, traces_file)
    cut, _ = run(scorer, traces_file, horizon=horizon)
    pd.testing.assert_frame_equal(plain["mc"][VALUES + ["n_truncated", "stderr"]],
                                  cut["mc"][VALUES + ["n_truncated", "stderr"]])
    # No rollout was cut, no answer forced: the same cost too.
    for column in ("cost_forward_tokens", "cost_generated_tokens"):
        assert (plain["mc"][column] == cut["mc"][column]).all()


@pytest.mark.parametrize("exit_string", [None, "The answer is "])
def test_cut_rollouts_are_plain_rollouts_cut_short_and_forced(scorer, traces_file, tmp_path,
                                                              graded, exit_string):
    horizon = 3
    forcing = ForcingOptions(exit_string=exit_string)
    tables, saved = run(scorer, traces_file, tmp_path, horizon=horizon, forcing=forcing)
    _, plain = run(scorer, traces_file, tmp_path / "plain")
    both = saved.merge(plain, on=["trace_id", "boundary", "sample"], suffixes=("", "_plain"))
    assert len(both) == len(saved) == len(plain)
    cut = both["value"].notna()
    assert cut.any() and (~cut).any()
    # A rollout that ended within the horizon is plain Monte Carlo's, graded the same.
    ended = both.loc[~cut]
    assert (ended["text"] == ended["text_plain"]).all()
    assert (ended["correct"] == ended["correct_plain"]).all()
    assert (both.loc[cut, "n_tokens"] == horizon).all()

    # Each cut rollout's value, computed directly: the generator's first `horizon` tokens from
    # the state, then lead ⊕ E ⊕ Y* scored with one plain forward of the whole sequence.
    gen = HFGenerator(scorer.model, scorer.tokenizer)
    run_forcing = answer_forcing(scorer, forcing)
    segments = tables["segments"]
    for trace in iter_traces(traces_file):
        trace = with_rendered_prompt(trace, scorer)
        enc = scorer.encode(trace)
        rows = segments[segments["trace_id"] == trace.id].sort_values("segment")
        bounds = [0, *rows["token_end"]]
        mine = both[(both["trace_id"] == trace.id) & cut]
        for b in sorted(set(mine["token"])):
            got = mine[mine["token"] == b].sort_values("sample")
            completions, full = (gen.generate([enc.prefix(b)], SamplingOptions(
                n=COMMON["rollouts"], max_new_tokens=m, seed=0), keys=[f"{trace.id}@{b}"])[0]
                for m in (horizon, COMMON["max_new_tokens"]))
            for _, r in got.iterrows():
                c = completions[int(r["sample"])]
                assert c.text == r["text"] and b in bounds
                # plain Monte Carlo's rollout j, cut short
                assert full[int(r["sample"])].token_ids[:horizon] == c.token_ids
                lead = "" if run_forcing.exit_string[:1].isspace() or c.text.endswith("\n") \
                    else "\n"
                probe = run_forcing.answer_probe(trace.answer, lead=lead)
                a0, _ = probe.span("answer")
                cont = Continuation(enc.prompt_len + b, c.token_ids + probe.ids,
                                    len(c.token_ids) + a0, run_forcing.terminators or None)
                want = scorer.score_continuations_naive(enc.ids, [cont])[0].logprob
                assert r["value"] == pytest.approx(math.exp(want), rel=1e-4, abs=1e-9)
    # V_k is the mean of the rollouts' worth.
    mc = tables["mc"]
    worth = both["value"].where(cut, (both["correct"] & ~both["truncated"]).astype(float))
    mean = worth.groupby([both["trace_id"], both["boundary"]]).mean()
    for r in mc.itertuples():
        assert r.value_after == pytest.approx(mean[(r.trace_id, r.segment + 1)])


def test_stop_lines_cuts_a_completion_after_its_lines(scorer):
    gen = HFGenerator(scorer.model, scorer.tokenizer)
    tok = scorer.tokenizer
    # The random model rarely writes a line break: count tokens holding "t" as line ends.
    gen._line_ids = {i for i in range(len(tok)) if "t" in tok.decode([i])}
    prompts, keys = [[5, 6, 7, 8], [9, 10]], ["a", "b"]
    whole = gen.generate(prompts, SamplingOptions(n=6, max_new_tokens=20, seed=1), keys=keys)
    lines = gen.generate(prompts, SamplingOptions(n=6, max_new_tokens=20, seed=1, stop_lines=2),
                         keys=keys)
    stopped = 0
    for ws, ls in zip(whole, lines, strict=True):
        for w, c in zip(ws, ls, strict=True):
            assert w.token_ids[: len(c.token_ids)] == c.token_ids
            ends = sum(t in gen._line_ids for t in c.token_ids)
            if c.finish_reason == "lines":
                stopped += 1
                assert ends == 2 and c.token_ids[-1] in gen._line_ids
            else:
                assert ends < 2 and c.finish_reason == w.finish_reason
    assert stopped


def test_horizon_lines_in_a_run(scorer, traces_file, tmp_path, graded, monkeypatch):
    from cotcredit.lm import sampling

    class LinesAtT(sampling.HFGenerator):  # few line breaks from a random model: "t" ends one
        def __init__(self, model, tok):
            super().__init__(model, tok)
            self._line_ids = {i for i in range(len(tok)) if "t" in tok.decode([i])}

    monkeypatch.setattr(sampling, "HFGenerator", LinesAtT)
    tables, saved = run(scorer, traces_file, tmp_path, horizon_lines=1, max_new_tokens=12)
    cut = saved["value"].notna()
    assert cut.any()
    # (the generator-level test above checks where they stop)
    assert (saved.loc[cut, "n_tokens"] < 12).any()
    assert tables["mc"]["value_after"].between(0, 1).all()


def test_horizon_options():
    McOptions(horizon=0).validate()
    McOptions(horizon_lines=2).validate()
    for bad in (dict(horizon=-1), dict(horizon_lines=0), dict(horizon=4, rollouts="auto"),
                dict(horizon_lines=1, backend="vllm")):
        with pytest.raises(UserError):
            McOptions(**bad).validate()
