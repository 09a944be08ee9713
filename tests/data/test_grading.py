"""Tests for cotcredit.grading: answer extraction, equivalence grading, the example problems."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError

import pytest
from conftest import ROOT

from cotcredit.data import grading
from cotcredit.data.grading import GradeResult, extract_answer, grade, grade_completion

PROBLEMS = ROOT / "examples" / "problems.jsonl"

# ---------------------------------------------------------------------------------------------
# extract_answer
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("So the result is $\\boxed{12}$.", "12"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}"),
        ("First \\boxed{3}, wait, no: \\boxed{5}.", "5"),
        ("\\fbox{4}", "4"),
        ("\\boxed {7}", "7"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("\\boxed{6} and then \\boxed{7", "6"),  # a truncated last box is skipped
        ("The final answer is 7.", "7"),
        ("The answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("Answer: 42", "42"),
        ("**Answer:** 12 dollars.", "12 dollars"),
        ("**Final Answer**: **9**", "9"),
        ("The answer is 3.5.", "3.5"),
        ("The answer is 7. Let me double-check that.", "7"),
        ("The answer is \\$5.", "5"),
        ("Final Answer:\n\n$$8$$", "8"),
        ("The answer is 4. Hmm, no. The final answer is 6.", "6"),
        ("Put it in \\boxed{...}. 2 + 2 = 4. The answer is 4.", "4"),  # echoed placeholder
        ("The answer is \\boxed{10}. Later the answer is 11.", "10"),  # boxed outranks statements
    ],
)
def test_extract_answer(text: str, expected: str) -> None:
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text", ["", "2 + 2 = 4", "I am not sure.", "\\boxed{}", "\\boxed{", "the answer is."]
)
def test_extract_answer_none_when_no_answer_stated(text: str) -> None:
    assert extract_answer(text) is None


def test_extract_answer_last_number_fallback_is_opt_in() -> None:
    text = "3 + 4 = 7, and 1,000 - 1 = 999"
    assert extract_answer(text) is None
    assert extract_answer(text, fallback_last_number=True) == "999"
    assert extract_answer("costs 1,250 in total", fallback_last_number=True) == "1250"
    assert extract_answer("x = -5", fallback_last_number=True) == "-5"
    assert extract_answer("no digits", fallback_last_number=True) is None
    # An answer statement still outranks the last number.
    assert extract_answer("The answer is 7. Check: 3 + 4", fallback_last_number=True) == "7"


# ---------------------------------------------------------------------------------------------
# grade / grade_completion
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "reference"),
    [
        ("\\boxed{12}", "12"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{\\frac{1}{2}}", "1/2"),
        ("\\boxed{0.75}", "3/4"),
        ("\\boxed{3.0}", "3"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}"),
        ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{\\sqrt{2}}{2}"),
        ("The final answer is 7.", "7"),
        ("\\boxed{3} first, then \\boxed{5}", "5"),
        ("\\boxed{1,000}", "1000"),
        ("\\boxed{50\\%}", "50\\%"),
        ("\\boxed{x + 1}", "1 + x"),
        ("**Answer:** 12 dollars.", "12"),
        ("\\boxed{5 \\text{ cm}}", "5"),
        ("The answer is \\$5.", "5"),
        ("\\boxed{\\text{Banana}}", "banana"),
        ("The answer is the banana.", "banana"),
    ],
)
def test_equivalent_forms_are_right(completion: str, reference: str) -> None:
    result = grade_completion(completion, reference)
    assert result.correct, result


@pytest.mark.parametrize(
    ("completion", "reference"),
    [
        ("\\boxed{13}", "12"),
        ("The final answer is 6.", "7"),
        ("\\boxed{5} first, then \\boxed{3}", "5"),  # the last box counts
        ("\\boxed{\\frac{1}{3}}", "0.33"),
        ("\\boxed{x + 2}", "x + 1"),
        ("\\boxed{apple}", "paple"),  # words are compared as words, not as symbol products
        ("\\boxed{12 dollars}", "13"),
    ],
)
def test_wrong_answers_are_wrong(completion: str, reference: str) -> None:
    assert not grade_completion(completion, reference).correct


def test_missing_answer_is_wrong() -> None:
    result = grade_completion("First 5 + 7 = 12, so 12.", "12")
    assert result == GradeResult(answer=None, correct=False)
    assert grade(None, "12") is False
    assert grade("", "12") is False
    fallback = grade_completion("First 5 + 7 = 12, so 12.", "12", fallback_last_number=True)
    assert fallback == GradeResult(answer="12", correct=True)


def test_grade_takes_plain_strings_and_a_numeric_reference() -> None:
    assert grade("12", "12")
    assert grade("\\frac{3}{4}", "0.75")
    assert grade("$\\frac{3}{4}$", "3/4")
    assert grade("7", 7)  # type: ignore[arg-type]  # a bare JSON number as reference
    assert not grade("8", "7")


def test_grade_result_is_frozen() -> None:
    result = grade_completion("\\boxed{1}", "1")
    with pytest.raises(FrozenInstanceError):
        result.correct = False  # type: ignore[misc]


GARBAGE = [
    "",
    " ",
    "\x00\x01\x02",
    "\\boxed{",
    "}}}{{{",
    "\\boxed{\\boxed{}}",
    "\\boxed{$$$}",
    "$" * 50,
    "💥" * 1000,
    "答案是 \\boxed{七}",
    "\\boxed{\\frac{1}{0}}",
    "\\boxed{nan}",
    "\\boxed{\\infty}",
    "\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}",
    "The answer is \\frac{",
    "answer is answer is answer is",
    "\\boxed{" + "(" * 200 + "}",
    "\\boxed{10^{10^{10^{10}}}}",  # sympy would hang evaluating this; it must be refused
    "\\boxed{9^{9^{9}}}",
    "\\boxed{(10^{8})!}",
    "x" * 20000,
]


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_never_raises(text: str) -> None:
    for reference in ("1", "\\frac{1}{2}", "banana", "", text):
        result = grade_completion(text, reference)
        assert isinstance(result.correct, bool)
        extract_answer(text, fallback_last_number=True)
        assert isinstance(grade(text, reference), bool)


def test_huge_expressions_are_not_equal_to_small_numbers() -> None:
    assert not grade("10^{10^{10}}", "1")
    assert not grade("1", "10^{10^{10}}")
    assert grade("10^{10^{10}}", "10^{10^{10}}")  # identical strings still match


def _grade_cases() -> list[bool]:
    # Strings not used elsewhere, so the parse cache is cold and math-verify really runs here.
    return [
        grade_completion("\\boxed{\\frac{7}{8}}", "0.875").correct,
        grade_completion(
            "The final answer is $\\frac{\\sqrt{3}}{3}$.", "\\frac{1}{\\sqrt{3}}"
        ).correct,
        grade_completion("\\boxed{0.876}", "\\frac{7}{8}").correct,
        grade_completion("\\boxed{10^{10^{11}}}", "2").correct,
    ]


def test_grading_in_a_non_main_thread() -> None:
    results: list[bool] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.extend(_grade_cases())
        except BaseException as e:  # reported through the assertion below
            errors.append(e)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert not errors
    assert results == [True, True, False, False]


def test_grading_in_a_thread_pool() -> None:
    pairs = [(f"\\boxed{{\\frac{{{n}}}{{{2 * n}}}}}", "0.5") for n in range(1, 41)]
    pairs += [(f"\\boxed{{{n + 1}}}", str(n)) for n in range(40)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda p: grade_completion(*p).correct, pairs))
    assert results == [True] * 40 + [False] * 40


def test_main_thread_timeouts_are_whole_seconds() -> None:
    # signal.alarm takes whole seconds; a float would make math-verify's parse return [] silently.
    assert grading._timeout_arg(0.2) == 1
    assert grading._timeout_arg(5) == 5
    assert grading._timeout_arg(None) is None
    assert grading._timeout_arg(0) is None
    assert grade("\\frac{1}{4}", "0.25", timeout_s=0.2)
    seen: list[int | None] = []
    thread = threading.Thread(target=lambda: seen.append(grading._timeout_arg(5)))
    thread.start()
    thread.join()
    assert seen == [None]


def test_reference_parse_is_cached() -> None:
    grading._parse_math.cache_clear()
    reference = "\\frac{5}{9}"
    completions = [f"\\boxed{{{x}}}" for x in ("\\frac{10}{18}", "0.5556", "\\frac{5}{9}", "1")]
    first = [grade_completion(c, reference).correct for c in completions]
    info = grading._parse_math.cache_info()
    assert info.hits >= len(completions) - 2  # the reference was parsed once
    second = [grade_completion(c, reference).correct for c in completions]
    assert first == second == [True, False, True, False]
    key = (grading._as_math(reference), grading._timeout_arg(5))
    assert grading._parse_math(*key) is grading._parse_math(*key)
    assert grading._parse_math.cache_info().hits > info.hits


def test_a_parse_that_timed_out_is_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """math-verify's own parse meets a timeout once (as signal.alarm would raise it inside its
    extraction): that grade fails, but the next grade of the same strings parses afresh."""
    import math_verify.parser
    from math_verify.errors import TimeoutException

    real = math_verify.parser.extract_target_from_pred
    calls: list[str] = []

    def slow_once(pred, *args, **kwargs):
        calls.append(pred)
        if len(calls) == 1:
            raise TimeoutException("Operation timed out!")
        return real(pred, *args, **kwargs)

    monkeypatch.setattr(math_verify.parser, "extract_target_from_pred", slow_once)
    grading._parse_math.cache_clear()
    assert grade("\\frac{6}{22}", "\\frac{9}{33}") is False  # the reference's parse timed out
    assert grade("\\frac{6}{22}", "\\frac{9}{33}") is True
    assert calls == ["$\\frac{9}{33}$", "$\\frac{9}{33}$", "$\\frac{6}{22}$"]
    # Once parsed, both are remembered.
    assert grade("\\frac{6}{22}", "\\frac{9}{33}") is True
    assert len(calls) == 3


def test_a_parse_that_raised_is_not_remembered_but_nothing_parsed_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import math_verify

    real = math_verify.parse
    calls: list[str] = []

    def flaky(text, *args, raise_on_error=False, **kwargs):
        calls.append(text)
        if len(calls) == 1:
            if raise_on_error:
                raise RuntimeError("transient failure inside math-verify")
            return []  # what math-verify returns for any error unless asked to raise
        return real(text, *args, raise_on_error=raise_on_error, **kwargs)

    monkeypatch.setattr(math_verify, "parse", flaky)
    grading._parse_math.cache_clear()
    assert grade("\\frac{4}{14}", "\\frac{6}{21}") is False
    assert grade("\\frac{4}{14}", "\\frac{6}{21}") is True
    assert calls == ["$\\frac{6}{21}$", "$\\frac{6}{21}$", "$\\frac{4}{14}$"]
    # A genuine "nothing parseable" is a verdict: cached like a success, parsed once.
    assert real("$\\\\$", raise_on_error=True) == []
    assert grade("\\\\", "\\frac{6}{21}") is False
    assert grade("\\\\", "\\frac{6}{21}") is False
    assert calls.count("$\\\\$") == 1


# ---------------------------------------------------------------------------------------------
# A completion that continues a prefix (Monte Carlo rollouts): only what it states counts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "completion", "expected"),
    [
        # An answer statement begun in the prefix and finished by the completion counts.
        ("Adding up, so the answer is", " 12.", "12"),
        ("Adding up, so the answer is ", "12", "12"),
        ("Adding up, so the ans", "wer is 12. Done.", "12"),
        ("Adding up, so the answer is 1", "2.", "12"),
        ("Final Answer:\n", "\n$$12$$", "12"),
        ("The result is \\boxed{1", "2}.", "12"),
        ("The result is \\boxed{12", "}.", "12"),  # the completion closes the box
        ("The result is \\bo", "xed{12}.", "12"),
        # An answer wholly inside the prefix does not grade the completion.
        ("The answer is \\boxed{12}.\n", "Hmm, let me check that again.", None),
        ("The answer is \\boxed{12}", "", None),
        ("The answer is \\boxed{12}", ".", None),
        ("The answer is 12", ".", None),  # the completion only ends the sentence
        ("The answer is 12. ", "Let me double-check.", None),
        # The completion's own answer wins over a prefix box, even a statement over a box.
        ("First guess: \\boxed{12}.\n", "No: 5 + 8 = 13, so the answer is 13.", "13"),
        ("The answer is 12.\n", "Wait, \\boxed{13}", "13"),
    ],
)
def test_continuation_is_graded_on_what_it_states(
    prefix: str, completion: str, expected: str | None
) -> None:
    result = grade_completion(completion, "12", prefix=prefix)
    assert result == GradeResult(answer=expected, correct=expected == "12")
    assert extract_answer(prefix + completion, start=len(prefix)) == expected


@pytest.mark.parametrize(
    ("text", "answer_ends_after"),
    [
        ("Work: 5 + 7 = 12, twice. The final answer is $\\boxed{12}$. Done.", "\\boxed{12}"),
        ("Work: 5 + 7 = 12, twice.\nSo the final answer is 12. Done.", "answer is 12"),
        ("**Answer:** 12 dollars.\n", "12 dollars"),
    ],
)
def test_every_seam_counts_the_answer_iff_the_completion_writes_its_end(
    text: str, answer_ends_after: str
) -> None:
    """Naive check at every seam of a text stating one answer: the completion text[split:] is
    graded on it exactly when it holds the answer's last character (a box's closing brace)."""
    answer = extract_answer(text)
    end = text.index(answer_ends_after) + len(answer_ends_after)
    for split in range(len(text) + 1):
        got = grade_completion(text[split:], "12", prefix=text[:split])
        assert got == GradeResult(answer if split < end else None, split < end), split


def test_the_last_number_fallback_ignores_the_prefix() -> None:
    prefix = "Adding: 5 + 7 = 12.\n"
    assert grade_completion("Hmm.", "12", prefix=prefix, fallback_last_number=True).answer is None
    seam = grade_completion("2 in total", "12", prefix="5 + 7 = 1", fallback_last_number=True)
    assert seam == GradeResult(answer="12", correct=True)


@pytest.mark.parametrize("text", ["", "\\boxed{12}", "The answer is 12.", "so 12", "x"])
def test_an_empty_prefix_grades_as_without_one(text: str) -> None:
    for fallback in (False, True):
        assert grade_completion(text, "12", prefix="", fallback_last_number=fallback) == \
            grade_completion(text, "12", fallback_last_number=fallback)


# ---------------------------------------------------------------------------------------------
# examples/problems.jsonl
# ---------------------------------------------------------------------------------------------


def _problems() -> list[dict[str, str]]:
    lines = PROBLEMS.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_problem_file_shape() -> None:
    problems = _problems()
    assert 30 <= len(problems) <= 60
    ids = [p["id"] for p in problems]
    assert len(set(ids)) == len(ids)
    for p in problems:
        assert set(p) == {"id", "prompt", "answer", "solution"}
        assert all(isinstance(v, str) and v.strip() for v in p.values())
        assert "\\boxed{...}" in p["prompt"]
        assert p["solution"].endswith(f"The final answer is $\\boxed{{{p['answer']}}}$.")


@pytest.mark.parametrize("problem", _problems(), ids=lambda p: p["id"])
def test_problem_solution_grades_correct(problem: dict[str, str]) -> None:
    result = grade_completion(problem["solution"], problem["answer"])
    assert result.correct, (problem["id"], result)
    # and a wrong number does not
    if problem["answer"].isdigit():
        assert not grade(str(int(problem["answer"]) + 1), problem["answer"])


def test_garbage_in_a_thread_finishes() -> None:
    done: list[bool] = []
    thread = threading.Thread(target=lambda: done.extend(grade(t, "1") for t in GARBAGE))
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert done == [False] * len(GARBAGE)
