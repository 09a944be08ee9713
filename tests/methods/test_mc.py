"""Monte Carlo baseline: value accounting, truncation policies, boundaries, rollouts, CLI."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from cotcredit.data import grading
from cotcredit.errors import UserError
from cotcredit.lm.generation import Completion, GenerationStats
from cotcredit.methods import mc
from cotcredit.methods.mc import McOptions, Rollout, boundary_value, interpolate, scored_boundaries
from cotcredit.pipeline.run import run_analysis
from cotcredit.segmentation import SegmentOptions

SMALL = dict(rollouts=3, max_new_tokens=6, seed=0)


def run_mc(scorer, traces_file, segments=3, **opts):
    s = run_analysis(traces_file, scorer, methods={"mc": McOptions(**{**SMALL, **opts})},
                     segment_options=SegmentOptions(segments=segments))
    return pd.DataFrame(s.rows["mc"])


def by_trace(df):
    return {t: g.sort_values("segment") for t, g in df.groupby("trace_id")}


# ---- the estimator, without a model ------------------------------------------------------------
def r(correct, truncated):
    return Rollout(0, 0, 0, "", 1, None, correct, truncated)


def test_boundary_value_policies():
    rs = [r(True, False), r(True, True), r(False, False), r(False, True)]
    v = boundary_value(rs, "wrong")
    assert (v.value, v.n_correct, v.n_truncated, v.n_rollouts) == (0.25, 1, 2, 4)
    assert v.stderr == pytest.approx(math.sqrt(0.25 * 0.75 / 4))
    d = boundary_value(rs, "drop")
    assert d.value == 0.5 and d.stderr == pytest.approx(math.sqrt(0.25 / 2))
    none = boundary_value([r(True, True)], "drop")
    assert math.isnan(none.value) and none.n_truncated == 1


def test_scored_boundaries():
    assert scored_boundaries(4, None) == [0, 1, 2, 3, 4]
    assert scored_boundaries(4, 9) == [0, 1, 2, 3, 4]
    assert scored_boundaries(4, 3) == [0, 2, 4]
    assert scored_boundaries(7, 2) == [0, 7]
    assert scored_boundaries(8, 4) == [0, 3, 5, 8]


def test_interpolation_spreads_span_credit_evenly():
    v = interpolate(4, {0: 0.2, 2: 0.6, 4: 0.6})
    assert v == pytest.approx([0.2, 0.4, 0.6, 0.6, 0.6])


def test_options_validate():
    McOptions().validate()
    for bad in (dict(rollouts=0), dict(truncated="ignore"), dict(max_boundaries=1),
                dict(temperature=-1), dict(backend="x")):
        with pytest.raises(UserError):
            McOptions(**bad).validate()


# ---- with the tiny model -----------------------------------------------------------------------
def test_values_and_credit_sums(scorer, traces_file, graded):
    df = run_mc(scorer, traces_file)
    assert (df["method"] == "mc").all() and len(df) == 9
    assert 0 < df["value_after"].mean() < 1  # the fake grader makes V non-trivial
    assert 0 < df["n_truncated"].sum() < 3 * len(df)
    for g in by_trace(df).values():
        assert g["score"].sum() == pytest.approx(g["value_after"].iloc[-1] - g["value_before"].iloc[0])
        assert list(g["value_before"].iloc[1:]) == pytest.approx(list(g["value_after"].iloc[:-1]))
        assert (g["score"] == g["value_after"] - g["value_before"]).all()
        assert (g["value_after"] == g["n_correct"] / g["n_rollouts"]).all()  # policy "wrong"
        v = g["value_after"]
        assert g["stderr"].to_numpy() == pytest.approx((v * (1 - v) / 3).pow(0.5).to_numpy())
        assert (g["n_rollouts"] == 3).all() and not g["interpolated"].any()
        assert (g["trace_rollouts"] == 3 * 4).all()


def test_same_seed_same_values(scorer, traces_file, graded):
    a, b = run_mc(scorer, traces_file), run_mc(scorer, traces_file)
    pd.testing.assert_frame_equal(a, b)
    c = run_mc(scorer, traces_file, seed=1)
    assert not c["value_after"].equals(a["value_after"]) or not c["n_truncated"].equals(a["n_truncated"])


def test_all_truncated(scorer, traces_file, monkeypatch):
    monkeypatch.setattr(grading, "grade_completion",
                        lambda text, ref, **kw: grading.GradeResult("1", True))  # all "correct"
    wrong = run_mc(scorer, traces_file, max_new_tokens=1, rollouts=2)
    assert (wrong["n_truncated"] == 2).all() and (wrong["value_after"] == 0).all()
    assert (wrong["score"] == 0).all() and (wrong["trace_truncated"] == 8).all()
    drop = run_mc(scorer, traces_file, max_new_tokens=1, rollouts=2, truncated="drop")
    assert drop["score"].isna().all() and drop["score_note"].str.contains("cut off").all()


class FakeGenerator:
    """Completions with a fixed pattern: sample j of boundary token b is truncated when
    (b + j) % 3 == 0 and says "yes" when (b + j) % 2 == 0."""

    backend = "hf"

    def __init__(self):
        self.calls = []
        self.stats = GenerationStats()  # (the run reads its generators' counts)

    def generate(self, prompts, options, keys=None, progress=None):
        self.calls.append((len(prompts), options.n, list(keys)))
        out = []
        for key in keys:
            b = int(key.split("@")[1])
            out.append([Completion([1] * 2, "yes" if (b + j) % 2 == 0 else "no",
                                   "length" if (b + j) % 3 == 0 else "stop")
                        for j in range(options.n)])
        return out


def test_truncation_policies_with_known_rollouts(scorer, traces_file, monkeypatch):
    fake = FakeGenerator()
    monkeypatch.setattr("cotcredit.methods.get_generator", lambda scorer, backend, engine_args=None: fake)
    monkeypatch.setattr(grading, "grade_completion",
                        lambda text, ref, **kw: grading.GradeResult(None, text.endswith("yes")))
    for policy in ("wrong", "drop"):
        df = run_mc(scorer, traces_file, rollouts=6, truncated=policy, segments=4)
        for _, row in df.iterrows():
            b = row["token_end"]
            cut = [(b + j) % 3 == 0 for j in range(6)]
            yes = [(b + j) % 2 == 0 for j in range(6)]
            n_correct = sum(y and not c for y, c in zip(yes, cut, strict=True))
            used = 6 - sum(cut) if policy == "drop" else 6
            assert row["n_truncated"] == sum(cut) and row["n_correct"] == n_correct
            assert row["value_after"] == pytest.approx(n_correct / used)
    # All boundaries of a trace in one generator call.
    assert all(n_prompts == 5 and n == 6 for n_prompts, n, _ in fake.calls)


def test_max_boundaries(scorer, traces_file, graded, tmp_path):
    path = tmp_path / "ro.parquet"
    df = run_mc(scorer, traces_file, segments=4, max_boundaries=3, save_rollouts=str(path))
    full = run_mc(scorer, traces_file, segments=4)
    ro = pd.read_parquet(path)
    for t, g in by_trace(df).items():
        assert list(g["interpolated"]) == [True, False, True, False]
        assert g["score"].sum() == pytest.approx(g["value_after"].iloc[-1] - g["value_before"].iloc[0])
        # The span's credit is spread evenly over its two segments.
        assert g["score"].iloc[0] == pytest.approx(g["score"].iloc[1])
        assert g["stderr"].iloc[[0, 2]].isna().all() and (g["n_rollouts"].iloc[[0, 2]] == 0).all()
        assert sorted(set(ro[ro.trace_id == t]["boundary"])) == [0, 2, 4]
        # Scored states get the same rollouts as in a full run (keyed by trace and token).
        f = full[full.trace_id == t].sort_values("segment")
        assert list(g["value_after"].iloc[[1, 3]]) == list(f["value_after"].iloc[[1, 3]])
    assert (df["trace_rollouts"] == 3 * 3).all()


def test_rollouts_parquet(scorer, traces_file, graded, tmp_path):
    path = tmp_path / "ro.parquet"
    df = run_mc(scorer, traces_file, save_rollouts=str(path))
    ro = pd.read_parquet(path)
    assert list(ro.columns) == ["run_id", "trace_id", "boundary", "token", "sample", "text",
                                "n_tokens", "answer", "correct", "truncated"]
    assert len(ro) == 3 * 4 * 3 and set(ro["trace_id"]) == {"t1", "t2", "t3"}
    assert set(ro["sample"]) == {0, 1, 2} and set(ro["boundary"]) == {0, 1, 2, 3}
    for (t, k), g in ro.groupby(["trace_id", "boundary"]):
        row = df[(df.trace_id == t) & (df.segment == k - 1)] if k else None
        if row is not None:
            assert int(row["n_correct"].iloc[0]) == int((g["correct"] & ~g["truncated"]).sum())
            assert int(row["n_truncated"].iloc[0]) == int(g["truncated"].sum())
            assert int(row["token_end"].iloc[0]) == int(g["token"].iloc[0])
    assert (ro["n_tokens"] <= 6).all()
    # A second run of the same traces does not duplicate rollouts.
    run_mc(scorer, traces_file, save_rollouts=str(path))
    assert len(pd.read_parquet(path)) == len(ro)


def test_context_reserve(scorer, traces_file):
    from cotcredit.methods import get_method

    spec = get_method("mc")
    assert spec.reserve(scorer, None, McOptions(max_new_tokens=77)) == 77


# ---- command line ------------------------------------------------------------------------------
def cli(*args):
    from cotcredit.cli import main

    try:
        main([str(a) for a in args])
    except SystemExit as e:
        return e.code
    return 0


def test_cli_end_to_end(tiny_model_dir, traces_file, tmp_path, graded, capsys):
    out, ro = tmp_path / "mc.parquet", tmp_path / "ro.parquet"
    base = [traces_file, "-o", out, "--model", tiny_model_dir, "--device", "cpu", "-k", "3",
            "--rollouts", "2", "--max-new-tokens", "5", "--temperature", "0.8", "--top-p", "0.95",
            "--seed", "3", "--batch-size", "4", "--truncated", "drop", "--save-rollouts", ro, "-q"]
    assert cli("mc-baseline", *base) == 0
    df = pd.read_parquet(out)
    assert len(df) == 9 and (df["method"] == "mc").all()
    assert set(df.columns) >= {"score", "value_before", "value_after", "stderr", "n_rollouts",
                               "n_correct", "n_truncated", "run_id", "text", "token_start"}
    assert len(pd.read_parquet(ro)) == 3 * 4 * 2
    # Rerun resumes (nothing new), --overwrite replaces both files.
    assert cli("mc-baseline", *base) == 0
    assert len(pd.read_parquet(out)) == 9
    assert cli("mc-baseline", *base, "--overwrite", "--max-boundaries", "2") == 0
    assert len(pd.read_parquet(ro)) == 3 * 2 * 2
    # The same segmentation from a file.
    seg = tmp_path / "seg.parquet"
    assert cli("segment", traces_file, "-o", seg, "--model", tiny_model_dir, "--device", "cpu",
               "-k", "3", "-q") == 0
    out2 = tmp_path / "mc2.parquet"
    assert cli("mc-baseline", traces_file, "-o", out2, "--model", tiny_model_dir, "--device", "cpu",
               "--segments-file", seg, "--rollouts", "1", "--max-new-tokens", "3", "-q") == 0
    assert list(pd.read_parquet(out2)["token_end"]) == list(pd.read_parquet(seg)["token_end"])


@pytest.mark.parametrize("args, message", [
    (["--truncated", "ignore"], "--truncated must be one of wrong, drop"),
    (["--rollouts", "0"], "--rollouts must be at least 1"),
    (["--max-boundaries", "1"], "--max-boundaries must be at least 2"),
    (["--backend", "tgi"], "--backend must be one of hf, vllm"),
    (["--top-p", "0"], "--top-p must be in (0, 1]"),
])
def test_cli_bad_options(tiny_model_dir, traces_file, tmp_path, capsys, args, message):
    code = cli("mc-baseline", traces_file, "-o", tmp_path / "x.parquet", "--model", tiny_model_dir,
               "--device", "cpu", *args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error:") and message in err and "\n" not in err


def test_cli_bad_input(tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "response": "r"}\n')
    code = cli("mc-baseline", bad, "-o", tmp_path / "x.parquet", "--model", tiny_model_dir,
               "--device", "cpu")
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"error: {bad}:1: missing reference answer") and "\n" not in err
    code = cli("mc-baseline", tmp_path / "none.jsonl", "--model", tiny_model_dir, "--device", "cpu")
    assert code == 2 and "no such file" in capsys.readouterr().err


def test_batch_size_and_rollout_path_do_not_block_resume(tiny_model_dir, traces_file, tmp_path):
    from cotcredit.cli import main

    out = tmp_path / "mc.parquet"
    base = ["mc-baseline", str(traces_file), "--model", str(tiny_model_dir), "-o", str(out), "-k", "2",
            "--rollouts", "2", "--max-new-tokens", "3", "--max-traces", "1", "-q"]
    main(base + ["--batch-size", "2", "--save-rollouts", str(tmp_path / "a.parquet")])
    first = pd.read_parquet(out)
    code = 0
    try:
        main(base[:-3] + ["-q", "--batch-size", "5", "--save-rollouts", str(tmp_path / "b.parquet")])
    except SystemExit as e:
        code = e.code or 0
    assert code == 0
    df = pd.read_parquet(out)
    assert set(df.trace_id) == {"t1", "t2", "t3"}
    assert df[df.trace_id == "t1"].score.tolist() == first.score.tolist()


# ---- grading a rollout: what it states, never an answer in the prefix --------------------------
class SameTextGenerator:
    """Every rollout from every state is the same text."""

    backend = "hf"

    def __init__(self, text):
        self.text = text
        self.stats = GenerationStats()

    def generate(self, prompts, options, keys=None, progress=None):
        return [[Completion([1] * 2, self.text, "stop") for _ in range(options.n)] for _ in keys]


EARLY_BOX = {"id": "box", "prompt": "What do apples and oranges cost?",
             "response": "First guess: $\\boxed{12}$.\nLet me check step by step.\nApples cost 5 "
                         "dollars.\nWait, oranges cost 7.\nSo 5 + 7 = 12.\nTherefore the total is 12.",
             "answer": "12"}


@pytest.fixture
def early_box_file(tmp_path):
    import json

    p = tmp_path / "box.jsonl"
    p.write_text(json.dumps(EARLY_BOX) + "\n")
    return p


@pytest.mark.parametrize(("rollout", "value"), [
    ("Hmm, let me think about it more", 0.0),  # states no answer: wrong, box or no box before
    ("So the answer is \\boxed{12}.", 1.0),
    ("So the answer is \\boxed{13}.", 0.0),
])
def test_rollouts_are_graded_on_what_they_state(scorer, early_box_file, monkeypatch, rollout, value):
    monkeypatch.setattr("cotcredit.methods.get_generator", lambda scorer, backend, engine_args=None: SameTextGenerator(rollout))
    df = run_mc(scorer, early_box_file, rollouts=2, segments=4)
    assert len(df) >= 3 and df["text"].iloc[0].startswith("First guess")  # the box is in segment 1
    assert (df["value_before"] == value).all() and (df["value_after"] == value).all()
    assert (df["score"] == 0).all()


def test_the_grader_gets_each_state_s_reasoning_as_prefix(scorer, early_box_file, monkeypatch):
    seen = []

    def record(text, reference, *, prefix="", **kw):
        seen.append((prefix, text))
        return grading.GradeResult(None, False)

    monkeypatch.setattr("cotcredit.methods.get_generator", lambda scorer, backend, engine_args=None: SameTextGenerator("x"))
    monkeypatch.setattr(grading, "grade_completion", record)
    df = run_mc(scorer, early_box_file, rollouts=2, segments=4)
    response = EARLY_BOX["response"]
    # State k's prefix is the text of segments 1..k (the response up to the boundary).
    texts = df.sort_values("segment")["text"].tolist()
    expected = ["".join(texts[:k]) for k in range(len(texts) + 1)]
    assert [p for p, _ in seen] == [p for p in expected for _ in range(2)]
    assert all(response.startswith(p) for p, _ in seen) and {t for _, t in seen} == {"x"}


# ---- split halves ------------------------------------------------------------------------------
def half_value(b, parity, n, policy):
    """V at boundary token b from FakeGenerator's samples j ≡ parity (mod 2), computed naively."""
    js = [j for j in range(n) if j % 2 == parity]
    cut = {j: (b + j) % 3 == 0 for j in js}
    correct = sum((b + j) % 2 == 0 and not cut[j] for j in js)
    used = len(js) - sum(cut.values()) if policy == "drop" else len(js)
    return correct / used if used else math.nan


@pytest.mark.parametrize("policy", ["wrong", "drop"])
def test_split_halves_are_the_even_and_odd_samples(scorer, traces_file, monkeypatch, policy):
    monkeypatch.setattr("cotcredit.methods.get_generator", lambda scorer, backend, engine_args=None: FakeGenerator())
    monkeypatch.setattr(grading, "grade_completion",
                        lambda text, ref, **kw: grading.GradeResult(None, text.endswith("yes")))
    df = run_mc(scorer, traces_file, rollouts=6, truncated=policy, segments=4)
    for _, row in df.iterrows():
        a, b = row["token_start"], row["token_end"]
        for col, parity in (("score_half_a", 0), ("score_half_b", 1)):
            want = half_value(b, parity, 6, policy) - half_value(a, parity, 6, policy)
            assert row[col] == pytest.approx(want, nan_ok=True), (col, a, b)
    # FakeGenerator's pattern makes the halves differ: the split is by sample, not at random.
    assert not df["score_half_a"].equals(df["score_half_b"])
    if policy == "wrong":  # equal halves of 3: the two half values average to V
        mean = (df["score_half_a"] + df["score_half_b"]) / 2
        assert mean.to_numpy() == pytest.approx(df["score"].to_numpy())


def test_split_halves_recombine_and_sum(scorer, traces_file, graded):
    df = run_mc(scorer, traces_file, rollouts=4, segments=4, max_boundaries=3)
    assert set(mc.SPEC.columns) >= {"score_half_a", "score_half_b"}
    for g in by_trace(df).values():
        mean = (g["score_half_a"] + g["score_half_b"]) / 2
        assert mean.to_numpy() == pytest.approx(g["score"].to_numpy())
        # Interpolated like score: a span's half credit is spread evenly over its segments.
        for col in ("score_half_a", "score_half_b"):
            assert g[col].iloc[0] == pytest.approx(g[col].iloc[1])
            assert g[col].iloc[2] == pytest.approx(g[col].iloc[3])


def test_one_rollout_leaves_the_second_half_empty(scorer, traces_file, graded):
    df = run_mc(scorer, traces_file, rollouts=1)
    assert df["score_half_b"].isna().all()
    assert df["score_half_a"].to_numpy() == pytest.approx(df["score"].to_numpy())
    assert "score_note" not in df  # an empty half is not a missing score


def test_cost_columns_count_what_a_run_of_each_method_alone_pays(scorer, traces_file, graded):
    """Forward-only methods pay the shared trace pass plus their probes; Monte Carlo pays the
    prefill of its rollouts' prompts and its samples, and not the trace pass it never reads."""
    from cotcredit.data.traces import iter_traces
    from cotcredit.methods import RunCache
    from cotcredit.methods.rredcot import RredcotOptions

    run = RunCache()  # holds the run's generator, whose counts are read below
    s = run_analysis(traces_file, scorer, segment_options=SegmentOptions(segments=3),
                     methods={"mc": McOptions(**SMALL), "rredcot": RredcotOptions()}, cache=run)
    (gen,) = run.of_kind("generator")
    first = {k: pd.DataFrame(v).groupby("trace_id").first() for k, v in s.rows.items()}
    traces = {t.id: t for t in iter_traces(traces_file)}
    for tid, seg in first["segments"].iterrows():
        assert seg["cost_forward_tokens"] == len(scorer.encode(traces[tid]).ids)
        assert first["rredcot"].loc[tid, "cost_forward_tokens"] > seg["cost_forward_tokens"]
    assert first["mc"]["cost_forward_tokens"].sum() == gen.stats.prompt_tokens > 0
    assert first["mc"]["cost_generated_tokens"].sum() == gen.stats.tokens > 0
