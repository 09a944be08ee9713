"""`cotcredit generate`: problems in, graded trace lines out, resumable, readable downstream."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from cotcredit.data import grading
from cotcredit.data.problems import read_problems
from cotcredit.data.trace import TraceError
from cotcredit.data.traces import read_traces
from cotcredit.errors import UserError
from cotcredit.pipeline.generate import GenerateOptions, generate_traces

PROBLEMS = [
    {"id": "add", "prompt": "What is 3 + 4? Let me think.", "answer": "7",
     "solution": "3 + 4 = 7. The final answer is $\\boxed{7}$."},
    {"question": "Apples cost 5 dollars and oranges cost 7. What do both cost?", "gt_answer": 12},
    {"id": 3, "problem": "A pear costs 4. What do two pears cost?", "reference_answer": "8",
     "reference_solution": "2 * 4 = 8."},
]
SMALL = GenerateOptions(samples=2, max_new_tokens=10, seed=0)


@pytest.fixture
def problems_file(tmp_path):
    p = tmp_path / "problems.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in PROBLEMS))
    return p


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_read_problems_aliases(problems_file):
    ps, skipped = read_problems(problems_file)
    assert [p.id for p in ps] == ["add", "2", "3"] and not skipped
    assert ps[1].prompt.startswith("Apples") and ps[1].answer == "12" and ps[1].solution is None
    assert ps[2].solution == "2 * 4 = 8."


@pytest.mark.parametrize("line, message", [
    ('{"prompt": "p"}', "missing reference answer"),
    ('{"answer": "1"}', "missing prompt"),
    ('{"prompt": "", "answer": "1"}', "field 'prompt' is empty"),
    ("[1, 2]", "expected a JSON object"),
    ('{"prompt": "p", "answer": "1"', "invalid JSON"),
])
def test_bad_problems(tmp_path, line, message):
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "ok", "answer": "1"}\n' + line + "\n")
    with pytest.raises(TraceError, match=f"{p}:2: {message}"):
        read_problems(p)
    ps, skipped = read_problems(p, on_error="skip")
    assert len(ps) == 1 and len(skipped) == 1


def test_duplicate_and_empty(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "a", "prompt": "x", "answer": "1"}\n'
                 '{"id": "a", "prompt": "y", "answer": "2"}\n')
    with pytest.raises(TraceError, match="duplicate id 'a'"):
        read_problems(p)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no problems"):
        read_problems(tmp_path / "e.jsonl")


def test_generate_schema_and_round_trip(scorer, problems_file, tmp_path):
    out = tmp_path / "traces.jsonl"
    s = generate_traces(problems_file, out, model=scorer, options=SMALL)
    got = lines(out)
    assert [x["id"] for x in got] == ["add-s0", "add-s1", "2-s0", "2-s1", "3-s0", "3-s1"]
    x = got[0]
    assert {"id", "prompt", "response", "answer", "solution", "correct", "model", "temperature",
            "top_p", "max_new_tokens", "seed", "finish_reason"} <= set(x)
    assert x["prompt"] == PROBLEMS[0]["prompt"] and x["answer"] == "7"
    assert x["solution"] == PROBLEMS[0]["solution"] and got[2]["answer"] == "12"
    assert x["temperature"] == 1.0 and x["max_new_tokens"] == 10 and x["seed"] == 0
    assert all(isinstance(y["correct"], bool) and y["finish_reason"] in ("stop", "length")
               for y in got)
    assert (s.problems, s.sampled, s.samples, s.resumed) == (3, 3, 6, 0)
    assert s.truncated == sum(y["finish_reason"] == "length" for y in got)
    # Valid input for the analysis commands.
    traces = read_traces(out).traces
    assert [t.id for t in traces] == [y["id"] for y in got]
    assert traces[0].outcome in (0.0, 1.0) and traces[0].solution == PROBLEMS[0]["solution"]
    from cotcredit.methods.rredcot import RredcotOptions
    from cotcredit.pipeline.run import run_analysis
    from cotcredit.segmentation import SegmentOptions

    res = run_analysis(out, scorer, methods={"rredcot": RredcotOptions()},
                       segment_options=SegmentOptions(segments=2))
    assert len(res.scored) == 6 and not res.errors


def test_determinism_and_seed(scorer, problems_file, tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    generate_traces(problems_file, a, model=scorer, options=SMALL)
    generate_traces(problems_file, b, model=scorer, options=SMALL)
    generate_traces(problems_file, c, model=scorer,
                    options=GenerateOptions(samples=2, max_new_tokens=10, seed=1))
    assert a.read_text() == b.read_text()
    assert [x["response"] for x in lines(a)] != [x["response"] for x in lines(c)]


def test_resume(scorer, problems_file, tmp_path):
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    generate_traces(problems_file, whole, model=scorer, options=SMALL)
    generate_traces(problems_file, part, model=scorer, options=SMALL, max_problems=1)
    with open(part, "a") as fh:  # a run killed in the middle of writing a line
        fh.write('{"id": "2-s0", "prompt": "App')
    s = generate_traces(problems_file, part, model=scorer, options=SMALL)
    assert part.read_text() == whole.read_text()
    assert (s.resumed, s.sampled, s.samples, s.problems) == (1, 2, 6, 3)
    # Nothing left to do; a larger --samples adds only the missing samples.
    s = generate_traces(problems_file, part, model=scorer, options=SMALL)
    assert (s.resumed, s.sampled) == (3, 0) and part.read_text() == whole.read_text()
    more = GenerateOptions(samples=3, max_new_tokens=10, seed=0)
    generate_traces(problems_file, part, model=scorer, options=more)
    got = lines(part)
    assert len(got) == 9 and got[:6] == lines(whole)
    fresh = tmp_path / "fresh.jsonl"
    generate_traces(problems_file, fresh, model=scorer, options=more)
    assert sorted(got, key=lambda x: x["id"]) == sorted(lines(fresh), key=lambda x: x["id"])
    # Other options: refused, unless overwrite.
    other = GenerateOptions(samples=2, max_new_tokens=10, seed=5)
    with pytest.raises(UserError, match="other options \\(seed 0 vs 5"):
        generate_traces(problems_file, part, model=scorer, options=other)
    generate_traces(problems_file, part, model=scorer, options=other, overwrite=True)
    assert len(lines(part)) == 6


def test_grading(scorer, problems_file, tmp_path, monkeypatch):
    seen = []

    def fake(text, reference, **kw):
        seen.append(reference)
        return grading.GradeResult(answer="7", correct=reference == "7")

    monkeypatch.setattr(grading, "grade_completion", fake)
    out = tmp_path / "t.jsonl"
    s = generate_traces(problems_file, out, model=scorer, options=SMALL)
    got = lines(out)
    assert [x["correct"] for x in got] == [True, True, False, False, False, False]
    assert got[0]["extracted_answer"] == "7" and sorted(set(seen)) == ["12", "7", "8"]
    assert s.correct == 2 and s.accuracy == pytest.approx(2 / 6)


def cli(*args):
    from cotcredit.cli import main

    try:
        main([str(a) for a in args])
    except SystemExit as e:
        return e.code
    return 0


def test_cli_end_to_end(tiny_model_dir, problems_file, tmp_path, capsys):
    out = tmp_path / "traces.jsonl"
    model = ["--model", tiny_model_dir, "--device", "cpu"]
    assert cli("generate", problems_file, "-o", out, "--samples", "2", "--max-new-tokens", "8",
               "--temperature", "0.9", "--top-p", "0.95", "--seed", "2", *model) == 0
    summary = capsys.readouterr().err
    assert "accuracy" in summary and "truncated" in summary
    got = lines(out)
    assert len(got) == 6 and got[0]["top_p"] == 0.95 and got[0]["seed"] == 2
    assert cli("generate", problems_file, "-o", out, "--samples", "2", "--max-new-tokens", "8",
               "--temperature", "0.9", "--top-p", "0.95", "--seed", "2", "-q", *model) == 0
    assert len(lines(out)) == 6
    rr = tmp_path / "rr.parquet"
    assert cli("redistribute", out, "-o", rr, "-k", "2", "-q", *model) == 0
    assert set(pd.read_parquet(rr)["trace_id"]) == {x["id"] for x in got}
    # Mismatched options on resume: one line, exit 2.
    capsys.readouterr()
    code = cli("generate", problems_file, "-o", out, "--samples", "2", "--max-new-tokens", "9",
               "--temperature", "0.9", "--top-p", "0.95", "--seed", "2", *model)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error:") and "\n" not in err
    assert "max_new_tokens 8 vs 9" in err


def test_cli_bad_input(tiny_model_dir, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "answer": "1"}\n{"prompt": "q"}\n')
    model = ["--model", tiny_model_dir, "--device", "cpu"]
    code = cli("generate", bad, "-o", tmp_path / "t.jsonl", *model)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (f"error: {bad}:2: missing reference answer (tried answer, "
                                 "reference_answer, gt_answer)")
    code = cli("generate", bad, "-o", tmp_path / "t.jsonl", "--samples", "0", *model)
    assert code == 2 and "--samples must be at least 1" in capsys.readouterr().err
    code = cli("generate", tmp_path / "missing.jsonl", *model)
    assert code == 2 and "no such file" in capsys.readouterr().err
