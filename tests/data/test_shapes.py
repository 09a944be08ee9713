"""The shapes public data comes in, each written here as a small file, read into the right
prompt, response, answer, outcome and segments, and taken through `segment` and `redistribute`
on a tiny model."""

import gzip
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

import cotcredit
from cotcredit.data.trace import TraceError, trace_outcome
from cotcredit.data.traces import STEP_SEPARATOR, read_traces
from cotcredit.errors import UserError
from cotcredit.pipeline.run import InputOptions, with_rendered_prompt
from cotcredit.segmentation import SegmentOptions

PROBLEM = "What is 3 + 4?"
GOOD = "<think>First, 3 + 4.\nSo 3 + 4 = 7.</think>\nThe final answer is $\\boxed{7}$."
BAD = "<think>Let me think. 3 + 4 = 8.\nWait, so it is 8.</think>\nThe answer is $\\boxed{8}$."


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def analyse(path, scorer, **fields):
    """(traces, segments table, rredcot table) of an input read with `fields`."""
    inputs = InputOptions(**fields)
    traces = read_traces(path, inputs.names(), split=inputs.split).traces
    seg = cotcredit.segment(path, model=scorer, inputs=inputs).frame()
    rr = cotcredit.redistribute(path, model=scorer, inputs=inputs).frame()
    assert sorted(seg.trace_id.unique()) == sorted(t.id for t in traces)
    cols = ["trace_id", "segment", "char_start", "char_end", "error_char"]
    assert rr[cols].equals(seg[cols])
    for t in traces:  # rewards sum to the outcome used (the field's, else the graded one)
        assert rr[rr.trace_id == t.id].score.sum() == pytest.approx(trace_outcome(t), abs=1e-6)
        # segments tile the reasoning tokens exactly
        rows = seg[seg.trace_id == t.id]
        assert "".join(rows.text) == scorer.encode(with_rendered_prompt(t, scorer)).reasoning_text
    return traces, seg, rr


def step_rows(seg, tid):
    return seg[seg.trace_id == tid].sort_values("segment")


PB_ROWS = [
    {"id": "pb-0", "generator": "m", "problem": PROBLEM, "answer": "7",
     "steps": ["First, 3 + 4.", "So 3 + 4 = 8.", "Check: 8 - 4 = 4.",
               "The final answer is $\\boxed{8}$."],
     "label": 1, "final_answer_correct": False},
    {"id": "pb-1", "generator": "m", "problem": PROBLEM, "answer": "7",
     "steps": ["First, 3 + 4.", "Now 3 + 4 = 7.", "The final answer is $\\boxed{7}$."],
     "label": -1, "final_answer_correct": True},
]


def test_processbench(tmp_path, scorer):
    p = write_jsonl(tmp_path / "pb.jsonl", PB_ROWS)
    traces, seg, rr = analyse(p, scorer, preset="processbench")
    t0, t1 = traces
    assert t0.prompt == PROBLEM and t0.answer == "7" and (t0.outcome, t1.outcome) == (0.0, 1.0)
    assert t0.response == STEP_SEPARATOR.join(PB_ROWS[0]["steps"])
    # The steps are the segments (the final-answer step is not reasoning).
    rows = step_rows(seg, "pb-0")
    assert list(rows.text) == [s + STEP_SEPARATOR for s in PB_ROWS[0]["steps"][:3]]
    # label 1 -> the first character of step 1, on every row of the trace; -1 -> -1.
    start = len(PB_ROWS[0]["steps"][0] + STEP_SEPARATOR)
    assert t0.error_char == start and t0.error_step == 1
    assert set(rows.error_char) == {start} and rows.char_start.iloc[1] == start
    assert set(step_rows(seg, "pb-1").error_char) == {-1}
    assert seg.error_char.dtype == "int64"


def test_processbench_segment_needs_no_answer(tmp_path, scorer):
    rows = [{k: v for k, v in r.items() if k != "answer"} for r in PB_ROWS]
    p = write_jsonl(tmp_path / "pb.jsonl", rows)
    seg = cotcredit.segment(p, model=scorer, inputs=InputOptions(preset="processbench")).frame()
    assert sorted(seg.trace_id.unique()) == ["pb-0", "pb-1"]
    with pytest.raises(TraceError, match="pb.jsonl:1: missing reference answer"):
        cotcredit.redistribute(p, model=scorer, inputs=InputOptions(preset="processbench"))


def test_prm800k_nested_fields_and_ratings(tmp_path, scorer):
    def step(text, rating):
        return {"completions": [{"text": text, "rating": rating, "flagged": None}],
                "human_completion": None, "chosen_completion": 0}

    row = {"labeler": "x", "timestamp": "2022", "generation": 3,
           "is_quality_control_question": False,
           "question": {"problem": PROBLEM, "ground_truth_answer": "7",
                        "ground_truth_solution": "3 + 4 = 7, so the answer is $\\boxed{7}$."},
           "label": {"steps": [step("First, 3 + 4.", 1), step("So 3 + 4 = 8.", -1),
                               step("The final answer is $\\boxed{8}$.", 0)],
                     "total_time": 1, "finish_reason": "solution"}}
    p = write_jsonl(tmp_path / "prm.jsonl", [row])
    (t,), seg, _ = analyse(p, scorer, preset="prm800k")
    assert t.prompt == PROBLEM and t.answer == "7" and t.solution.startswith("3 + 4 = 7")
    assert t.outcome is None and trace_outcome(t) == 0.0  # graded: the steps end in 8
    assert t.error_char == len("First, 3 + 4." + STEP_SEPARATOR) and t.error_step == 1
    assert list(step_rows(seg, t.id).text) == ["First, 3 + 4.\n\n", "So 3 + 4 = 8.\n\n"]
    # The same with the flags a user would type without the preset.
    flags = dict(prompt_field="question.problem", answer_field="question.ground_truth_answer",
                 response_field="none", steps_field="label.steps.*.completions.0.text",
                 label_field="label.steps.*.completions.0.rating")
    (u,) = read_traces(p, InputOptions(**flags).names()).traces
    assert (u.prompt, u.response, u.answer, u.error_char) == (t.prompt, t.response, t.answer,
                                                             t.error_char)


OPENR1 = {"problem": PROBLEM, "solution": "3 + 4 = 7", "answer": "7", "uuid": "u1",
          "generations": [GOOD, BAD], "correctness_math_verify": [True, False],
          "messages": [{"role": "user", "content": PROBLEM},
                       {"role": "assistant", "content": GOOD}]}


def test_openr1_one_trace_per_generation(tmp_path, scorer):
    p = write_jsonl(tmp_path / "r1.jsonl", [OPENR1])
    traces, seg, rr = analyse(p, scorer, preset="openr1")
    assert [t.id for t in traces] == ["u1/0", "u1/1"]
    assert [t.response for t in traces] == [GOOD, BAD]
    assert [t.outcome for t in traces] == [1.0, 0.0]
    assert {t.prompt for t in traces} == {PROBLEM} and {t.answer for t in traces} == {"7"}
    # Default aliases read the same shape (ids by line then).
    assert [t.outcome for t in read_traces(p).traces] == [1.0, 0.0]


def test_numina_answer_from_the_solution(tmp_path, scorer):
    sol = "First, 3 + 4.\nSo 3 + 4 = 7.\nThe answer is $\\boxed{7}$."
    row = {"source": "amc", "problem": PROBLEM, "solution": sol,
           "messages": [{"role": "user", "content": PROBLEM},
                        {"role": "assistant", "content": sol}]}
    p = write_jsonl(tmp_path / "numina.jsonl", [row])
    (t,), seg, rr = analyse(p, scorer, preset="numina")
    assert (t.prompt, t.response, t.answer) == (PROBLEM, sol, "7")
    assert any("taken from the last \\boxed{} of field 'solution'" in n for n in t.notes)
    # Without the preset the chat turns give the same trace.
    (u,) = read_traces(p).traces
    assert (u.prompt, u.response, u.answer) == (PROBLEM, sol, "7")


def test_gsm8k_worked_answer_reduced_to_its_number(tmp_path, scorer):
    worked = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
              "Natalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### 72")
    resp = ("Let me think.\nIn May she sold 24.\nSo 48 + 24 = 72.\n"
            "The final answer is $\\boxed{72}$.")
    row = {"question": "Natalia sold 48 clips in April and half as many in May. How many?",
           "answer": worked, "response": resp}
    p = write_jsonl(tmp_path / "gsm8k.jsonl", [row])
    summary = cotcredit.redistribute(p, model=scorer, inputs=InputOptions(preset="gsm8k"))
    assert any("after its last ####" in n for n in summary.notes)
    (t,), seg, rr = analyse(p, scorer, preset="gsm8k")
    assert t.answer == "72" and t.solution == worked and t.prompt == row["question"]
    assert trace_outcome(t) == 1.0
    (u,) = read_traces(p).traces  # no preset: still reduced, never used whole
    assert u.answer == "72" and any("worked solution" in n for n in u.notes)


def test_math_answer_from_boxed_solution(tmp_path):
    row = {"problem": PROBLEM, "solution": "We add: $3 + 4 = \\boxed{7}$.", "level": "Level 1",
           "type": "Prealgebra", "response": GOOD}
    p = write_jsonl(tmp_path / "math.jsonl", [row])
    (t,) = read_traces(p, InputOptions(preset="math").names()).traces
    assert (t.answer, t.solution) == ("7", row["solution"])


def test_conversations_render_the_turns_with_the_chat_template(tmp_path, scorer):
    row = {"system": "x", "answer": "7", "conversations": [
        {"from": "system", "value": "You are a careful solver."},
        {"from": "human", "value": PROBLEM},
        {"from": "gpt", "value": GOOD}]}
    p = write_jsonl(tmp_path / "conv.jsonl", [row])
    (t,), seg, rr = analyse(p, scorer)
    assert t.response == GOOD and t.messages == (
        {"role": "system", "content": "You are a careful solver."},
        {"role": "user", "content": PROBLEM})
    enc = scorer.encode(with_rendered_prompt(t, scorer))
    want = scorer.tokenizer.apply_chat_template(list(t.messages), tokenize=False,
                                                add_generation_prompt=True)
    assert enc.prompt_ids == scorer.encode_text(want)  # rendered once, not wrapped twice
    assert want.count("<|im_start|>") == 3


def test_save_to_disk_parquet_and_gzip_inputs(tmp_path, scorer):
    import datasets

    rows = [dict(OPENR1, uuid="a"), dict(OPENR1, uuid="b", correctness_math_verify=[False, False])]
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(saved))
    parquet = tmp_path / "r1.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    gz = tmp_path / "r1.jsonl.gz"
    gz.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    tables = []
    for path in (saved, parquet, gz):
        traces, seg, rr = analyse(path, scorer, preset="openr1")
        assert [t.id for t in traces] == ["a/0", "a/1", "b/0", "b/1"]
        assert [t.outcome for t in traces] == [1.0, 0.0, 0.0, 0.0]
        tables.append(rr.drop(columns=["run_id", "cost_forward_tokens"]))
    for other in tables[1:]:
        pd.testing.assert_frame_equal(tables[0], other)


# ---- bad input: one line naming file, record and field; --on-error skip goes on ---------------


@pytest.mark.parametrize("row, message", [
    ({**OPENR1, "correctness_math_verify": [True]}, "field 'correctness_math_verify' has 1 items "
     "for 2 generations"),
    ({**PB_ROWS[0], "label": 4}, "field 'label' is 4, outside the 4 steps"),
    ({**PB_ROWS[0], "label": "1"}, "field 'label' must be an integer step index"),
    ({**PB_ROWS[0], "error_char": 10**6}, "field 'error_char' is 1000000, outside the response"),
    ({**PB_ROWS[0], "steps": []}, "field 'steps' must be a non-empty list of steps"),
    ({"problem": PROBLEM, "answer": "7", "messages": [{"role": "user", "content": PROBLEM}]},
     "field 'messages' has no assistant turn"),
])
def test_bad_records(tmp_path, capsys, tiny_model_dir, row, message):
    p = write_jsonl(tmp_path / "bad.jsonl", [PB_ROWS[1], row])
    code, _, err = run_cli(["redistribute", p, "--model", tiny_model_dir, "-o",
                            tmp_path / "r.parquet", "-q"], capsys)
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert f"bad.jsonl:2: {message}" in line, err
    code, _, err = run_cli(["segment", p, "--model", tiny_model_dir, "-o", tmp_path / "s.parquet",
                            "--on-error", "skip"], capsys)
    assert code == 0 and "skipped 1 trace(s)" in err
    assert list(pd.read_parquet(tmp_path / "s.parquet").trace_id.unique()) == ["pb-1"]


def test_mixed_shapes_in_one_file(tmp_path):
    rows = [PB_ROWS[0], {"id": "c", "prompt": PROBLEM, "response": GOOD, "answer": "7"},
            PB_ROWS[1]]
    p = write_jsonl(tmp_path / "mixed.jsonl", rows)
    with pytest.raises(TraceError) as e:
        read_traces(p)
    assert str(e.value).startswith(f"{p}:2: mixed shapes: this record has text in 'response', "
                                   "record 1 has steps in 'steps'")
    assert [t.id for t in read_traces(p, on_error="skip").traces] == ["pb-0", "pb-1"]


def test_missing_dataset_and_split_exit_2(tmp_path, capsys, tiny_model_dir):
    code, _, err = run_cli(["segment", "no-such-owner/no-such-set", "--model", tiny_model_dir,
                            "-o", tmp_path / "s.parquet"], capsys)
    assert code == 2 and "no-such-owner/no-such-set: no such file, folder or dataset" in err
    assert "Traceback" not in err
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_list(PB_ROWS)}).save_to_disk(
        str(tmp_path / "pb"))
    code, _, err = run_cli(["segment", tmp_path / "pb", "--split", "train", "--format",
                            "processbench", "--model", tiny_model_dir,
                            "-o", tmp_path / "s.parquet"], capsys)
    assert code == 2 and "no split 'train' (it has test)" in err and "Traceback" not in err
    code, _, err = run_cli(["segment", tmp_path / "pb", "--split", "test", "--format",
                            "processbench", "--model", tiny_model_dir, "-o", tmp_path / "s.parquet",
                            "-q"], capsys)
    assert code == 0, err
    assert sorted(pd.read_parquet(tmp_path / "s.parquet").trace_id.unique()) == ["pb-0", "pb-1"]


def test_unknown_format_and_segments_value(tmp_path, capsys, tiny_model_dir):
    p = write_jsonl(tmp_path / "pb.jsonl", PB_ROWS)
    code, _, err = run_cli(["segment", p, "--format", "nope", "--model", tiny_model_dir], capsys)
    assert code == 2 and "--format must be one of processbench, prm800k" in err
    code, _, err = run_cli(["segment", p, "--segments", "many", "--model", tiny_model_dir], capsys)
    assert code == 2 and "--segments must be a number, 'lines' or 'steps', got 'many'" in err
    flat = write_jsonl(tmp_path / "flat.jsonl", [{"prompt": PROBLEM, "response": GOOD}])
    with pytest.raises(UserError, match="--segments steps needs pre-split steps"):
        cotcredit.segment(flat, model=tiny_model_dir,
                          options=SegmentOptions(segments="steps"))


def test_processbench_through_compare(tmp_path, capsys, tiny_model_dir):
    p = write_jsonl(tmp_path / "pb.jsonl", PB_ROWS)
    out = tmp_path / "report"
    code, _, err = run_cli(["compare", p, "--format", "processbench", "--methods", "rredcot,loo",
                            "-o", out, "--model", tiny_model_dir, "--bootstrap", "20"], capsys)
    assert code == 0, err
    for name in ("segments", "rredcot", "loo"):
        df = pd.read_parquet(out / f"{name}.parquet")
        pb0 = df[df.trace_id == "pb-0"].sort_values("segment")
        assert list(pb0.text) == [s + STEP_SEPARATOR for s in PB_ROWS[0]["steps"][:3]], name
        assert set(pb0.error_char) == {len(PB_ROWS[0]["steps"][0] + STEP_SEPARATOR)}
        assert set(df[df.trace_id == "pb-1"].error_char) == {-1}
    assert (out / "report.html").exists()
    # the localization table needs no Monte Carlo: the steps are the segments, the label the error
    loc = pd.read_parquet(out / "localization.parquet")
    assert {"rredcot", "loo"} <= set(loc["method"])
    assert "First-error localization" in (out / "report.md").read_text()


def test_answer_of_several_lines_without_a_marker_is_kept_with_a_note(tmp_path):
    p = write_jsonl(tmp_path / "t.jsonl", [{"question": "Q", "answer": "x = 1\ny = 2",
                                            "response": GOOD}])
    (t,) = read_traces(p).traces
    assert t.answer == "x = 1\ny = 2" and any("used whole" in n for n in t.notes)


def test_a_folder_without_data_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="empty: is a directory with no data files"):
        read_traces(tmp_path / "empty")


def test_default_reading_keeps_the_run_key_fields():
    """Tables keyed before chat turns, generation lists and steps were read keep their run key
    when read the default way; a preset is a different reading (a different key)."""
    from cotcredit.data.trace import FieldNames
    from cotcredit.pipeline.run import fields_spec

    assert fields_spec(FieldNames()) == {
        "prompt": ("prompt", "question", "problem"),
        "response": ("response", "completion", "generation", "output"),
        "answer": ("answer", "reference_answer", "gt_answer"),
        "solution": ("solution", "reference_solution"),
        "outcome": ("correct", "reward"), "id": ("id",)}
    assert fields_spec(InputOptions(preset="processbench").names())["outcome"] == (
        "final_answer_correct",)
