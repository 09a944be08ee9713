"""Trace reading: aliases, reasoning split, and one clear line per bad input."""

import json

import pytest

from cotcredit.data.trace import FieldNames, TraceError, reasoning_end
from cotcredit.data.traces import read_traces
from cotcredit.errors import UserError


def write(tmp_path, lines, name="t.jsonl"):
    p = tmp_path / name
    p.write_bytes(b"".join((ln if isinstance(ln, bytes) else ln.encode()) + b"\n" for ln in lines))
    return p


def good(**kw):
    base = {"prompt": "Q?", "response": "Let me think.\nSo 2.\nThe final answer is $\\boxed{2}$.",
            "answer": "2"}
    base.update(kw)
    return json.dumps(base)


def test_aliases_and_ids(traces_file):
    res = read_traces(traces_file)
    assert [t.id for t in res.traces] == ["t1", "t2", "t3"]
    t1, t2, t3 = res.traces
    assert t1.outcome == 1.0 and t1.solution.startswith("Apples")
    assert t2.prompt == "What is 3 + 4?" and t2.answer == "7" and t2.outcome is None
    assert t3.outcome == 1.0 and t3.answer == "8"


def test_reasoning_split():
    assert reasoning_end("<think>a b</think>\nThe answer is 3") == len("<think>a b")
    r = "Step 1.\nStep 2.\n\nThe final answer is $\\boxed{3}$."
    assert r[: reasoning_end(r)] == "Step 1.\nStep 2.\n\n"
    r2 = "Step 1.\nSo 3 + 4 = 7. The final answer is \\boxed{7}."
    assert r2[: reasoning_end(r2)] == "Step 1.\nSo 3 + 4 = 7. "
    assert reasoning_end("just thinking, no answer") == len("just thinking, no answer")


def test_default_id_is_line_number(tmp_path):
    p = write(tmp_path, ["", good(), "   ", good()])
    assert [t.id for t in read_traces(p).traces] == ["2", "4"]


def test_field_override(tmp_path):
    p = write(tmp_path, [json.dumps({"q": "Q?", "r": "think\nAnswer: 1", "gold": "1"})])
    names = FieldNames().override(prompt="q", response="r", answer="gold")
    assert read_traces(p, names).traces[0].answer == "1"


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "t.jsonl:1: invalid JSON"),
        (json.dumps({"prompt": "Q", "response": "R"}),
         "t.jsonl:1: missing reference answer (tried answer, reference_answer, gt_answer)"),
        (good(answer=""), "t.jsonl:1: field 'answer' is empty"),
        (good(prompt=["a"]), "t.jsonl:1: field 'prompt' must be a string, got list"),
        (good(response="\\boxed{2}"), "t.jsonl:1: response has no reasoning"),
        ("[1, 2]", "t.jsonl:1: expected a JSON object, got list"),
        (good(correct="maybe"), "t.jsonl:1: field 'correct' must be a boolean or a finite number"),
        (b"\xff\xfe{}", "t.jsonl:1: not valid UTF-8"),
        ("[" * 100000 + "]" * 100000, "t.jsonl:1: invalid JSON"),
    ],
)
def test_bad_lines_name_file_line_field(tmp_path, line, message):
    p = write(tmp_path, [line])
    with pytest.raises(TraceError) as exc:
        read_traces(p)
    assert message.split(": ", 1)[1] in str(exc.value)
    assert str(exc.value).startswith(str(p) + ":1: ")
    assert "\n" not in str(exc.value)


def test_skip_collects_and_continues(tmp_path):
    p = write(tmp_path, [good(id="a"), "{bad", good(id="b"), json.dumps({"prompt": "x"}),
                         good(id="a")])
    res = read_traces(p, on_error="skip")
    assert [t.id for t in res.traces] == ["a", "b"]
    assert [e.line for e in res.skipped] == [2, 4, 5]
    assert "duplicate id 'a'" in str(res.skipped[2])


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        read_traces(tmp_path / "nope.jsonl")
    with pytest.raises(UserError, match="empty"):
        read_traces(write(tmp_path, [""]))


def test_crlf_and_unicode(tmp_path):
    resp = ("Wait, \u05e9\u05dc\u05d5\u05dd e\u0301 \U0001f600\r\nSo 2.\r\n"
            "The final answer is \\boxed{2}")
    p = tmp_path / "t.jsonl"
    p.write_bytes((good(response=resp) + "\r\n").encode())
    t = read_traces(p).traces[0]
    assert t.response == resp and t.reasoning.startswith("Wait")


def test_seen_ids_find_duplicates_across_merges():
    from cotcredit.data.traces import SeenIds

    seen = SeenIds()
    seen.MERGE = 5  # merge into the sorted arrays every 5 ids
    for i in range(23):
        assert seen.line_of(f"id{i}") is None
        seen.add(f"id{i}", i + 1)
    assert [seen.line_of(f"id{i}") for i in range(23)] == list(range(1, 24))
    assert seen.line_of("id23") is None and len(seen.keys) == 20
