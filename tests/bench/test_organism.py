"""The organism's task and checker: hand-written right and wrong responses."""

from __future__ import annotations

import json

import pytest

from cotcredit.bench.organism.checker import check_response
from cotcredit.bench.organism.task import (
    MAX_STEPS,
    MAX_VALUE,
    MIN_STEPS,
    Problem,
    parse_prompt,
    reference_solution,
    split_problems,
    write_problems,
)

P = Problem(37, (("+", 25), ("-", 18), ("+", 9), ("-", 40)))
RIGHT = "37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 40 = 13\nThe answer is 13."


def test_reference_solution_format():
    assert P.prompt == (
        "Start at 37. Add 25. Subtract 18. Add 9. Subtract 40. What number do you end at?"
    )
    assert reference_solution(P) == RIGHT
    assert reference_solution(P, upto=1) == "37 + 25 = 62\nThe answer is 13."
    assert parse_prompt(P.prompt) == P
    assert parse_prompt("What is 2 + 2?") is None


def test_right_response():
    c = check_response(P, RIGHT)
    assert (c.error_char, c.first_error_step, c.error_kind, c.answer, c.correct) == (
        -1, 0, "", 13, True
    )
    assert c.steps_right and c.n_lines == 4


def _offset(text: str, line: int) -> int:
    return sum(len(x) + 1 for x in text.split("\n")[:line])


@pytest.mark.parametrize(
    "response, step, kind",
    [
        # first step wrong: arithmetic
        ("37 + 25 = 61\n61 - 18 = 43\n43 + 9 = 52\n52 - 40 = 12\nThe answer is 12.", 1,
         "arithmetic"),
        # first step wrong: the start number misread (a carry from the prompt)
        ("36 + 25 = 61\n61 - 18 = 43\n43 + 9 = 52\n52 - 40 = 12\nThe answer is 12.", 1, "carry"),
        # second step: the previous result carried wrongly
        ("37 + 25 = 62\n26 - 18 = 8\n8 + 9 = 17\n17 - 40 = 0\nThe answer is 0.", 2, "carry"),
        # third step: operation misread (subtract instead of add)
        ("37 + 25 = 62\n62 - 18 = 44\n44 - 9 = 35\n35 - 40 = 0\nThe answer is 0.", 3, "operand"),
        # third step: an operation skipped (the fourth one done instead)
        ("37 + 25 = 62\n62 - 18 = 44\n44 - 40 = 4\nThe answer is 4.", 3, "operand"),
        # last step wrong: arithmetic
        ("37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 40 = 14\nThe answer is 14.", 4,
         "arithmetic"),
        # last step garbled
        ("37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 4 0 = 13\nThe answer is 13.", 4, "garbled"),
        # a blank line is a garbled step
        ("37 + 25 = 62\n\n62 - 18 = 44\n44 + 9 = 53\n53 - 40 = 13\nThe answer is 13.", 2,
         "garbled"),
        # an extra step after four right ones
        ("37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 40 = 13\n13 + 0 = 13\nThe answer is 13.",
         5, "extra"),
    ],
)
def test_first_wrong_step(response, step, kind):
    c = check_response(P, response)
    assert (c.first_error_step, c.error_kind) == (step, kind)
    assert c.error_char == _offset(response, step - 1)
    # the wrong line starts there, and everything before it is right
    assert response[c.error_char :].split("\n")[0] == response.split("\n")[step - 1]
    assert RIGHT.startswith(response[: c.error_char])


def test_wrong_step_then_right_answer_and_mis_stated_answer():
    repaired = "37 + 25 = 61\n61 - 18 = 44\n44 + 9 = 53\n53 - 40 = 13\nThe answer is 13."
    c = check_response(P, repaired)
    assert (c.first_error_step, c.error_kind, c.correct) == (1, "arithmetic", True)
    misstated = RIGHT.replace("answer is 13", "answer is 31")
    c = check_response(P, misstated)
    assert (c.error_char, c.answer, c.correct) == (-1, 31, False)


def test_missing_steps_point_at_the_answer_statement():
    early = "37 + 25 = 62\n62 - 18 = 44\nThe answer is 13."
    c = check_response(P, early)
    assert (c.first_error_step, c.error_kind, c.correct) == (3, "missing", True)
    assert c.error_char == early.index("The answer")


def test_no_answer():
    cut = "37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 40 = 13\n"
    c = check_response(P, cut)
    assert (c.error_char, c.answer, c.correct) == (-1, None, False)
    truncated = "37 + 25 = 62\n62 - 18 = 44\n44 + 9 ="
    c = check_response(P, truncated)
    assert (c.first_error_step, c.error_kind, c.answer, c.correct) == (3, "garbled", None, False)
    short = "37 + 25 = 62\n"
    c = check_response(P, short)
    assert (c.first_error_step, c.error_kind, c.error_char) == (2, "missing", len(short))
    assert check_response(P, "").error_kind == "missing"
    assert check_response(P, "The answer is").answer is None


def test_splits_are_seeded_disjoint_and_in_range(tmp_path):
    a = split_problems({"train": 300, "dev": 50, "test": 50})
    b = split_problems({"train": 300, "dev": 50, "test": 50})
    assert a == b
    prompts = [{p.prompt for p in a[s]} for s in ("train", "dev", "test")]
    assert sum(map(len, prompts)) == 400 == len(set.union(*prompts))
    for p in a["train"]:
        assert MIN_STEPS <= len(p.steps) <= MAX_STEPS
        assert all(0 <= v <= MAX_VALUE for v in p.values)
        assert check_response(p, p.solution).correct and check_response(p, p.solution).steps_right
    write_problems(a["dev"], tmp_path / "dev.jsonl", "dev")
    line = json.loads((tmp_path / "dev.jsonl").read_text().splitlines()[0])
    assert line["id"] == "dev-0" and line["answer"] == str(a["dev"][0].answer)
    assert {len(p.steps) for p in a["train"]} == set(range(MIN_STEPS, MAX_STEPS + 1))
