"""Hostile input: property-based fuzzing of the trace reader and the `segment` command.

Every input gives either correct traces or one line `file:line: reason` (a `TraceError`; a
`UserError` `file: reason` for whole-file problems) — never another exception, a hang, a
message over several lines, or text that cannot be printed.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import signal
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cotcredit.data.trace import TraceError
from cotcredit.data.traces import read_traces
from cotcredit.errors import UserError

FAST = settings(
    max_examples=150,
    deadline=None,  # a busy machine must not fail a case; `time_limit` guards against hangs
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@contextlib.contextmanager
def time_limit(seconds: float):
    """Fail (instead of hanging) when the block runs longer than `seconds`."""

    def boom(*_):
        raise TimeoutError(f"took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def printable_one_line(msg: str) -> None:
    assert len(msg.splitlines()) == 1 and msg == msg.strip(), repr(msg)
    msg.encode("utf-8")  # printable: no lone surrogates


def check_read(path: Path, on_error: str = "raise"):
    """Read `path`; assert the contract; return the traces or the error."""
    try:
        with time_limit(20):
            res = read_traces(path, on_error=on_error)
    except TraceError as e:
        printable_one_line(str(e))
        assert str(e).startswith(f"{path}:{e.line}: ") and e.line >= 1
        return e
    except UserError as e:
        printable_one_line(str(e))
        assert str(e).startswith(f"{path}: ")
        return e
    for err in res.skipped:
        printable_one_line(str(err))
        assert str(err).startswith(f"{path}:{err.line}: ")
    ids = [t.id for t in res.traces]
    assert len(ids) == len(set(ids))
    for t in res.traces:
        for text in (t.id, t.prompt, t.response, t.answer, t.solution or "x"):
            assert isinstance(text, str) and "\x00" not in text
            text.encode("utf-8")
        assert t.id.strip() and t.prompt.strip() and t.answer.strip() and t.reasoning.strip()
        assert t.outcome is None or (isinstance(t.outcome, float) and math.isfinite(t.outcome))
    return res.traces


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


# ---- strategies ----------------------------------------------------------------------------

# Characters that break naive text handling: combining marks, right-to-left text and controls,
# zero-width joiners, emoji (astral plane), CJK, line separators, tabs, quotes, backslashes.
EDGE = (
    "e\u0301\u0308\u20dd"  # combining acute, diaeresis, enclosing circle
    "\u05e9\u05dc\u05d5\u05dd\u0627\u0644\u200f\u202e\u202c"  # Hebrew, Arabic, RLM, RLO, PDF
    "\u200d\u200b\ufeff"  # ZWJ, ZWSP, BOM
    "\U0001f600\U0001f468\u200d\U0001f469\U0001f3fd"  # emoji and a ZWJ sequence
    "\u4e2d\u6587\u00e9\u00df"
    "\u2028\u2029\x85\x0b\x0c\t\r"
    "\"'{}[]:,0123456789 +-=.?!"
)
edge_text = st.text(alphabet=EDGE, max_size=40)
any_text = st.text(max_size=40)  # every code point incl. NUL and lone surrogates

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | any_text
    | edge_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

ALIASES = {
    "prompt": ["prompt", "question", "problem"],
    "response": ["response", "completion", "generation", "output"],
    "answer": ["answer", "reference_answer", "gt_answer"],
    "solution": ["solution", "reference_solution"],
    "outcome": ["correct", "reward"],
    "id": ["id"],
}


@st.composite
def valid_trace(draw, with_id=True):
    reasoning = draw(edge_text.filter(lambda s: s.strip()))
    obj = {
        draw(st.sampled_from(ALIASES["prompt"])): draw(edge_text.filter(lambda s: s.strip())),
        draw(st.sampled_from(ALIASES["response"])): reasoning + "\nThe final answer is \\boxed{7}",
        draw(st.sampled_from(ALIASES["answer"])): draw(
            edge_text.filter(lambda s: s.strip()) | st.integers() | st.just(7.5)
        ),
    }
    if draw(st.booleans()):
        obj[draw(st.sampled_from(ALIASES["outcome"]))] = draw(
            st.booleans() | st.floats(-1, 1) | st.sampled_from(["true", "False"])
        )
    if with_id:
        obj["id"] = draw(st.uuids().map(str) | st.integers(0, 10**9))
    return obj


@st.composite
def hostile_trace(draw):
    """A valid trace with some fields replaced by arbitrary JSON values (or removed)."""
    obj = draw(valid_trace())
    for kind in draw(st.sets(st.sampled_from(list(ALIASES)), min_size=1, max_size=3)):
        for key in [k for k in obj if k in ALIASES[kind]]:
            del obj[key]
        if draw(st.integers(0, 4)):
            obj[draw(st.sampled_from(ALIASES[kind]))] = draw(json_values)
    return obj


def dumps(obj) -> str:
    # allow_nan: Python's json writes NaN/Infinity literals, and its reader accepts them.
    return json.dumps(obj, ensure_ascii=False, allow_nan=True)


def to_bytes(line: str) -> bytes:
    return line.encode("utf-8", "surrogatepass")  # raw lone surrogates are invalid UTF-8 bytes


@st.composite
def hostile_file(draw):
    kinds = st.sampled_from(["valid", "hostile", "truncated", "junk", "blank", "nonobject"])
    lines = []
    for kind in draw(st.lists(kinds, min_size=1, max_size=6)):
        if kind == "valid":
            line = dumps(draw(valid_trace()))
        elif kind == "hostile":
            line = dumps(draw(hostile_trace()))
        elif kind == "truncated":
            full = dumps(draw(valid_trace()))
            line = full[: draw(st.integers(0, len(full) - 1))]
        elif kind == "junk":
            line = draw(any_text)
        elif kind == "blank":
            line = draw(st.sampled_from(["", " ", "\t", "\u3000"]))
        else:
            line = dumps(draw(json_values.filter(lambda v: not isinstance(v, dict))))
        lines.append(to_bytes(line))
    ending = draw(st.sampled_from([b"\n", b"\r\n"]))
    bom = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return bom + ending.join(lines) + draw(st.sampled_from([ending, b""]))


# ---- the reader ----------------------------------------------------------------------------


@FAST
@given(data=st.binary(max_size=3000))
def test_random_bytes(workdir, data):
    p = workdir / "bytes.jsonl"
    p.write_bytes(data)
    check_read(p)
    check_read(p, on_error="skip")


@FAST
@given(data=hostile_file())
def test_hostile_files(workdir, data):
    p = workdir / "hostile.jsonl"
    p.write_bytes(data)
    check_read(p)
    check_read(p, on_error="skip")


@FAST
@given(obj=hostile_trace())
def test_wrong_types_name_the_field(workdir, obj):
    p = workdir / "types.jsonl"
    p.write_bytes(to_bytes(dumps(obj)) + b"\n")
    got = check_read(p)
    if isinstance(got, TraceError):
        reason = got.reason
        assert (
            reason.startswith(("field '", "missing "))
            # "response has no reasoning ...", or "response (generation 2) has ..." for lists
            or (reason.startswith("response") and "has no reasoning" in reason)
            or "not valid UTF-8" in reason
        ), reason


@FAST
@given(obj=valid_trace(), crlf=st.booleans())
def test_valid_unicode_traces_round_trip(workdir, obj, crlf):
    p = workdir / "valid.jsonl"
    p.write_bytes(dumps(obj).encode() + (b"\r\n" if crlf else b"\n"))
    traces = check_read(p)
    assert isinstance(traces, list) and len(traces) == 1, traces
    t = traces[0]
    key = next(k for k in ALIASES["prompt"] if k in obj)
    assert t.prompt == obj[key]
    key = next(k for k in ALIASES["response"] if k in obj)
    assert (
        t.response == obj[key] and t.reasoning == obj[key][: -len("The final answer is \\boxed{7}")]
    )
    assert t.id == str(obj["id"])


@pytest.mark.parametrize(
    "line, reason",
    [
        ('{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "\\ud800"}', "lone surrogate"),
        ('{"prompt": "Q\\udfff", "response": "R\\nAnswer: 1", "answer": "1"}', "lone surrogate"),
        (
            '{"id": "\\ud83d", "prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1"}',
            "field 'id' contains a lone surrogate",
        ),
        ('{"prompt": "Q", "response": "R\\u0000\\nAnswer: 1", "answer": "1"}', "NUL"),
        (
            '{"id": "a\\u0000", "prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1"}',
            "field 'id' contains a NUL",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "correct": NaN}',
            "finite number",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "reward": Infinity}',
            "finite number",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "reward": -Infinity}',
            "finite number",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "reward": 1e999}',
            "finite number",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "reward": 1'
            + "0" * 400
            + "}",
            "finite number",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": 1' + "0" * 5000 + "}",
            "invalid JSON (Exceeds the limit",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": NaN}',
            "field 'answer' must be a string",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": true}',
            "field 'answer' must be a string, got bool",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "id": 1.5}',
            "field 'id' must be",
        ),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "id": false}',
            "field 'id' must be",
        ),
        ('{"prompt": "Q", "response": " \\n\\t ", "answer": "1"}', "field 'response' is empty"),
        (
            '{"prompt": "Q", "response": "  \\n\\n The final answer is 1", "answer": "1"}',
            "no reasoning",
        ),
        (
            '{"prompt": "Q", "response": "\\u2028\\u3000\\nAnswer: 1", "answer": "1"}',
            "no reasoning",
        ),
        ('{"prompt": "Q", "response": "<think> \\n</think>1", "answer": "1"}', "no reasoning"),
        ("[1, 2]", "expected a JSON object, got list"),
        ("12", "expected a JSON object, got int"),
        ('"just a string"', "expected a JSON object, got str"),
        ("null", "expected a JSON object, got NoneType"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a":' * 50_000 + "1" + "}" * 50_000, "nested too deeply"),
        (
            '{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1", "x": '
            + "[" * 10**5
            + "]" * 10**5
            + "}",
            "nested too deeply",
        ),
        ('{"prompt": "Q", "response": "R", "answer": "1"', "invalid JSON (Expecting ',' delimiter"),
        ("\ufeff{}", "invalid JSON"),  # a BOM is only skipped on line 1
    ],
)
def test_edge_cases_give_one_clear_line(tmp_path, line, reason):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1"}\n' + to_bytes(line))
    err = check_read(p)
    assert isinstance(err, TraceError), err
    assert err.line == 2 and reason in err.reason, err.reason


def test_raw_surrogate_bytes_and_utf16_are_not_utf8(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"prompt": "Q\xed\xa0\x80", "response": "R\\nAnswer: 1", "answer": "1"}\n')
    assert "not valid UTF-8" in check_read(p).reason
    p.write_bytes('{"prompt": "Q", "response": "R\\nAnswer: 1", "answer": "1"}\n'.encode("utf-16"))
    assert "not valid UTF-8" in check_read(p).reason


def test_messages_with_line_breaks_in_ids_stay_one_line(tmp_path):
    line = json.dumps(
        {"id": "a\nb\u2028c", "prompt": "Q", "response": "R\nAnswer: 1", "answer": "1"}
    )
    p = tmp_path / "t.jsonl"
    p.write_text(line + "\n" + line + "\n")
    err = check_read(p)
    assert err.line == 2 and "duplicate id 'a\\nb\\u2028c'" in str(err)


def test_huge_lines_and_long_responses_are_fast(tmp_path):
    p = tmp_path / "t.jsonl"
    steps = "".join(f"Step {i}: add {i} and carry on.\n" for i in range(3500))  # ~100k chars
    long = {
        "id": "long",
        "prompt": "Q",
        "response": steps + "The final answer is \\boxed{1}",
        "answer": "1",
    }
    big = {"id": "big", "prompt": "Q", "response": "x" * 1_000_000 + "\nAnswer: 1", "answer": "1"}
    p.write_text(json.dumps(long) + "\r\n" + json.dumps(big) + "\r\n" + "{" * 1_000_000 + "\r\n")
    with time_limit(10):
        res = read_traces(p, on_error="skip")
    assert [t.id for t in res.traces] == ["long", "big"]
    assert len(res.traces[0].response) > 100_000 and res.traces[0].reasoning == steps
    assert len(res.traces[1].reasoning) == 1_000_001
    assert len(res.skipped) == 1 and res.skipped[0].line == 3
    printable_one_line(str(res.skipped[0]))


def test_whole_file_problems(tmp_path):
    for name, data in [("empty.jsonl", b""), ("blank.jsonl", b"\n \r\n\t\n")]:
        p = tmp_path / name
        p.write_bytes(data)
        assert "no traces" in str(check_read(p))
    assert "no such file" in str(check_read(tmp_path / "missing.jsonl"))
    assert "is a directory" in str(check_read(tmp_path))
    locked = tmp_path / "locked.jsonl"
    locked.write_text("{}\n")
    locked.chmod(0)
    try:
        got = check_read(locked)
        assert isinstance(got, (UserError, TraceError))  # root may still read it
    finally:
        locked.chmod(0o644)


# ---- the command line ----------------------------------------------------------------------


def run_main(argv) -> tuple[int, str]:
    """`cotcredit` in-process with stdout/stderr captured; any other exception propagates."""
    from cotcredit.cli import main

    buf = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        try:
            main([str(a) for a in argv])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, buf.getvalue()


def check_cli(argv, out: Path) -> tuple[int, str]:
    with time_limit(120):
        code, text = run_main(argv)
    assert code in (0, 2), text
    assert "Traceback" not in text
    if code == 2:
        last = text.strip().splitlines()[-1]
        assert last.startswith(("error: ", "Error: ")), text
        if last.startswith("error: "):
            assert text.strip().count("\n") == 0, text
    elif out.exists():
        df = pd.read_parquet(out)
        for _, g in df.groupby("trace_id"):
            assert list(g.segment) == list(range(len(g)))
        # error_char is left out: null means unknown
        numbers = df.select_dtypes("number").drop(columns=["error_char"], errors="ignore")
        assert numbers.apply(lambda c: c.map(math.isfinite)).all().all()
    return code, text


CLI = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@CLI
@given(
    data=hostile_file(),
    k=st.sampled_from(["-1", "0", "1", "3", "12"]),
    extra=st.lists(
        st.sampled_from(
            [
                ["--merge", "boundary"],
                ["--merge", "nope"],
                ["--min-tokens", "0"],
                ["--max-tokens", "2"],
                ["--on-error", "skip"],
                ["--on-error", "maybe"],
                ["--shard", "1/2"],
                ["--shard", "2/2"],
                ["--shard", "x"],
                ["--max-traces", "1"],
                ["--max-traces", "-1"],
                ["--keywords", ""],
                ["--truncate"],
            ]
        ),
        max_size=3,
    ),
)
def test_segment_cli_never_tracebacks(tiny_model_dir, workdir, data, k, extra):
    p = workdir / "cli.jsonl"
    p.write_bytes(data)
    out = workdir / "cli.parquet"
    shutil.rmtree(out, ignore_errors=True)  # an output is a table folder
    argv = ["segment", p, "--model", tiny_model_dir, "-o", out, "-k", k, "-q"]
    check_cli([*argv, *[a for pair in extra for a in pair]], out)


@CLI
@given(objs=st.lists(valid_trace(with_id=False), min_size=1, max_size=3), crlf=st.booleans())
def test_segment_cli_on_valid_unicode_traces(tiny_model_dir, workdir, objs, crlf):
    p = workdir / "valid-cli.jsonl"
    p.write_bytes(("\r\n" if crlf else "\n").join(dumps(o) for o in objs).encode())
    out = workdir / "valid-cli.parquet"
    shutil.rmtree(out, ignore_errors=True)  # an output is a table folder
    code, text = check_cli(["segment", p, "--model", tiny_model_dir, "-o", out, "-k", "3"], out)
    assert code == 0, text
    df = pd.read_parquet(out)
    assert df.trace_id.nunique() == len(objs)
    # Segments tile each reasoning exactly, unicode included.
    for i, o in enumerate(objs, start=1):
        key = next(k for k in ALIASES["response"] if k in o)
        g = df[df.trace_id == str(i)].sort_values("segment")
        assert "".join(g.text) == o[key][: -len("The final answer is \\boxed{7}")]


def test_segment_cli_long_response_needs_truncate(tiny_model_dir, tmp_path):
    steps = "".join(f"Step {i}: add {i} and carry on.\n" for i in range(3500))
    p = tmp_path / "long.jsonl"
    p.write_text(json.dumps({"prompt": "Q", "response": steps + "Answer: 1", "answer": "1"}) + "\n")
    out = tmp_path / "o.parquet"
    code, text = check_cli(["segment", p, "--model", tiny_model_dir, "-o", out, "-q"], out)
    assert code == 2 and "exceed the model's context" in text and "--truncate" in text
    code, text = check_cli(
        ["segment", p, "--model", tiny_model_dir, "-o", out, "-q", "--truncate"], out
    )
    assert code == 0, text
    df = pd.read_parquet(out)
    assert df.token_end.max() < 2048 and "".join(df.text) == steps[: df.char_end.max()]


def test_output_path_problems_are_one_line(tiny_model_dir, traces_file, tmp_path):
    for out in (traces_file / "o.parquet", tmp_path, traces_file):
        code, text = check_cli(["segment", traces_file, "--model", tiny_model_dir, "-o", out], out)
        assert code == 2, text


@pytest.mark.parametrize(
    "argv",
    [
        ["segment"],  # missing argument
        ["segment", "{traces}", "-k", "abc"],
        ["segment", "{traces}", "--max-traces", "x"],
        ["segment", "{traces}", "--bogus-flag"],
        ["merge", "-o", "{out}"],
        ["no-such-command"],
    ],
)
def test_usage_errors_exit_2_without_traceback(traces_file, tmp_path, argv):
    out = tmp_path / "o.parquet"
    argv = [a.format(traces=traces_file, out=out) for a in argv]
    code, text = check_cli(argv, out)
    assert code == 2 and ("Error: " in text or text.startswith("error: ")), text
