"""Extracting final answers and grading them by mathematical equivalence (math-verify).

A string/number comparison runs before math-verify (fast path) and is the fallback when it fails
or is absent. math-verify's timeout is ``signal.alarm``, which works only in the main thread, so
elsewhere it runs without one; to stay bounded, answers known to stall it (over 1000 characters,
brackets nested deeper than 12, power towers and huge factorials that hang sympy inside C code
where no signal runs) are compared as strings only.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
import warnings
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["GradeResult", "extract_answer", "grade", "grade_completion"]

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# What a model writes when it echoes the instruction "give the answer as \boxed{...}".
_PLACEHOLDERS = frozenset({"", "...", "…", "\\ldots", "\\dots", "\\cdots", "answer"})
# "final answer is", "The answer is", "Answer:", "**Answer:**", "**Final Answer**:" ...
_STATEMENT = re.compile(r"\b(?:final\s+)?answer\b(?:\s*\*\*)?\s*(?:\bis\b\s*:?|:)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.\s")
_NUMBER = re.compile(r"(?<![\d.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


def _boxed_contents(text: str) -> list[tuple[str, int]]:
    """Every complete ``\\boxed{...}``/``\\fbox{...}`` in order: (content, end of the box).
    Nested braces match; escaped ones do not count; an unclosed box is skipped."""
    found = []
    for match in _BOX_OPEN.finditer(text):
        depth, i = 1, match.end()
        while i < len(text):
            char = text[i]
            if char == "\\":
                i += 2
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    found.append((text[match.end() : i], i + 1))
                    break
            i += 1
    return found


def last_boxed(text: str) -> str | None:
    """The content of the last complete, non-placeholder ``\\boxed{...}`` of `text` (stripped),
    or None."""
    for content, _ in reversed(_boxed_contents(text)):
        if content.strip() not in _PLACEHOLDERS:
            return content.strip()
    return None


def _clean_span(s: str) -> tuple[int, int]:
    """Bounds ``[i, j)`` of the answer in ``s`` without spaces, bold, ``$``/``\\(`` delimiters
    and a final period (bounds, so a caller knows where the answer itself ends)."""
    i, j = 0, len(s)

    def strip_space(i: int, j: int) -> tuple[int, int]:
        while i < j and s[i].isspace():
            i += 1
        while j > i and s[j - 1].isspace():
            j -= 1
        return i, j

    previous = None
    while (i, j) != previous:
        previous = (i, j)
        i, j = strip_space(i, j)
        if s.startswith("**", i, j):
            i += 2
        if j - i >= 2 and s.endswith("**", i, j):
            j -= 2
        i, j = strip_space(i, j)
        if s.endswith(".", i, j):
            j -= 1
        i, j = strip_space(i, j)
        a, b = i, j  # "$$7$$", "$5": the outer $ go when no $ remains inside
        while a < b and s[a] == "$":
            a += 1
        while b > a and s[b - 1] == "$":
            b -= 1
        if "$" not in s[a:b].replace("\\$", ""):
            i, j = a, b
        if s.startswith("\\$", i, j):  # currency: "\$5"
            i += 2
        for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
            if j - i >= 4 and s.startswith(left, i, j) and s.endswith(right, i, j):
                i, j = i + len(left), j - len(right)
    return i, j


def _clean(s: str) -> str:
    """Strip what surrounds an answer: spaces, bold, ``$``/``\\(`` delimiters, a final period."""
    i, j = _clean_span(s)
    return s[i:j]


def _is_placeholder(s: str) -> bool:
    return s.strip().lower() in _PLACEHOLDERS


def _line_at(text: str, pos: int) -> tuple[int, int]:
    """Bounds of the rest of the line that starts at ``pos`` (up to the newline or the end)."""
    end = text.find("\n", pos)
    return pos, len(text) if end == -1 else end


def _statement_answer(text: str, start: int = 0) -> str | None:
    """The answer of the last final-answer statement that states one ending after ``start``."""
    for match in reversed(list(_STATEMENT.finditer(text))):
        a, b = _line_at(text, match.end())
        if not text[a:b].strip(" \t*$:"):  # "Answer:\n\n$$7$$" -> the next non-empty line
            a = b
            while a < len(text):
                a, b = _line_at(text, a + 1)
                if text[a:b].strip():
                    break
            else:
                a = b = len(text)
        cut = _SENTENCE_END.search(text, a, b)
        if cut:
            b = cut.start()
        i, j = _clean_span(text[a:b])
        answer = text[a + i : a + j]
        if answer and not _is_placeholder(answer) and a + j > start:
            return answer
    return None


def extract_answer(text: str, fallback_last_number: bool = False, *, start: int = 0) -> str | None:
    """The final answer stated in a completion, or None: the last complete ``\\boxed{}`` or
    ``\\fbox{}`` (placeholders skipped), else the last final-answer statement ("The answer is X",
    "**Answer:** X"), else with `fallback_last_number` the last number. Never raises.

    ``start``: where the completion begins in ``text`` (before it: a prefix it continues). Only
    an answer whose text ends after ``start`` counts: "the answer is" + "12" does, a box wholly
    inside the prefix does not.

    >>> extract_answer("So 3 + 4 = 7. The final answer is $\\\\boxed{7}$.")
    '7'
    >>> extract_answer("So the answer is" + " 8.", start=16)
    '8'
    """
    if not isinstance(text, str) or not text:
        return None
    for content, end in reversed(_boxed_contents(text)):
        if end > start and not _is_placeholder(content):
            return content.strip()
    answer = _statement_answer(text, start)
    if answer is not None:
        return answer
    if fallback_last_number:
        numbers = [m for m in _NUMBER.finditer(text) if m.end() > start]
        if numbers:
            return numbers[-1].group().replace(",", "")
    return None


# ---------------------------------------------------------------------------------------------
# Grading
# ---------------------------------------------------------------------------------------------

_DECIMAL_OR_RATIO = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:/\d+)?")
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_WORDS = re.compile(r"[a-z][a-z '\-]*[a-z]")
_MATH_WORDS = frozenset({"pi", "inf", "infty", "infinity", "sqrt"})
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox)\s*\{([^{}]*)\}")
_NUMBER_THEN_WORDS = re.compile(r"([-+]?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?\s*(?:\\?%)?)\s+(.+)")
_UNIT_WORD = re.compile(r"[A-Za-z]{2,}\.?")
# Limits past which an expression is not handed to sympy (it may hang there).
_MAX_MATH_CHARS = 1000
_MAX_BRACKET_DEPTH = 12  # latex2sympy's ANTLR parser slows down sharply with nested ( and [
_MAX_EXPONENT = 10**6
_MAX_FACTORIAL = 10**4


@dataclass(frozen=True)
class GradeResult:
    """The outcome of grading one completion: the extracted answer (None: none stated)."""

    answer: str | None
    correct: bool


def _plain(s: str) -> str:
    """Normalised string form: no whitespace, ``$``, ``\\!``, ``{,}`` or trailing period."""
    s = re.sub(r"\s+|\$|\\!|\\[,;: ]", "", s).replace("{,}", ",")
    return s.rstrip(".")


def _as_fraction(s: str) -> Fraction | None:
    if _THOUSANDS.fullmatch(s):
        s = s.replace(",", "")
    if not _DECIMAL_OR_RATIO.fullmatch(s):  # no exponents: Fraction("1e999999999") is huge
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


def _plain_equal(predicted: str, reference: str) -> bool:
    """Equal as normalised strings, or exactly as numbers (``3.0`` = ``3``, ``0.5`` = ``1/2``)."""
    a, b = _plain(predicted), _plain(reference)
    if not a or not b:
        return False
    if a == b:
        return True
    fa, fb = _as_fraction(a), _as_fraction(b)
    return fa is not None and fb is not None and fa == fb


def _words(s: str) -> str | None:
    """``s`` as lower-case words when it is a word answer ("banana", "\\text{Yes}"), else None."""
    s = _TEXT_MACRO.sub(r"\1", _clean(s)).strip().lower()
    s = re.sub(r"^(?:the|a|an)\s+", "", s)
    s = re.sub(r"\s+", " ", s)
    if _WORDS.fullmatch(s) and s not in _MATH_WORDS:
        return s
    return None


def _as_math(s: str) -> str:
    """A string math-verify's LaTeX extraction will find: bare answers wrapped in ``$...$``; unit
    words after a number dropped ("12 dollars" would be read as the product 12*d*o*l*l*a*r*s)."""
    s = _clean(s)
    if "$" in s.replace("\\$", "") or "\\boxed" in s or "\\fbox" in s:
        return s  # text with its own math delimiters: let math-verify find the math
    match = _NUMBER_THEN_WORDS.fullmatch(s)
    if match:
        words = match.group(2).split()
        if all(_UNIT_WORD.fullmatch(w) and w.lower().rstrip(".") not in _MATH_WORDS for w in words):
            s = match.group(1)
    return f"${s}$"


def _is_tame(expr: object) -> bool:
    """False for expressions whose evaluation would be astronomically large (sympy hangs).
    Bottom-up, so an exponent is known tame before it is evaluated and bounded."""
    import sympy

    if not isinstance(expr, sympy.Basic):
        return True
    growth = (sympy.factorial, sympy.factorial2, sympy.subfactorial, sympy.gamma)
    try:
        for node in sympy.postorder_traversal(expr):
            if isinstance(node, sympy.Pow):
                arg, bound = node.exp, _MAX_EXPONENT
            elif isinstance(node, sympy.exp):
                arg, bound = node.args[0], _MAX_EXPONENT
            elif isinstance(node, growth):
                arg, bound = node.args[0], _MAX_FACTORIAL
            else:
                continue
            if arg.is_number and bool(abs(arg.evalf(15)) > bound):
                return False
    except Exception:  # NaN/zoo comparisons and the like: do not risk sympy on it
        return False
    return True


def _bracket_depth(s: str) -> int:
    """The deepest nesting of ``(`` and ``[`` in ``s`` (unbalanced openers count too)."""
    depth = deepest = 0
    for char in s:
        if char in "([":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]" and depth:
            depth -= 1
    return deepest


@functools.lru_cache(maxsize=8192)
def _parse_math(math_text: str, timeout: int | None) -> tuple[object, ...]:
    """math-verify's parse of ``math_text`` as a tuple; empty when unparseable or unsafe.

    Cached (rollouts repeat answers; sympy objects are immutable). With ``raise_on_error`` a
    timeout raises instead of returning ``[]``, so a failure is never cached and is retried.
    """
    from math_verify import parse

    if len(math_text) > _MAX_MATH_CHARS or _bracket_depth(math_text) > _MAX_BRACKET_DEPTH:
        return ()
    parsed = parse(math_text, parsing_timeout=timeout, raise_on_error=True)
    if not all(_is_tame(p) for p in parsed):
        return ()
    return tuple(parsed)


def _timeout_arg(timeout_s: float | None) -> int | None:
    """The timeout to give math-verify here: whole seconds (``signal.alarm`` takes no float) in
    the main thread, else None (elsewhere the alarm raises)."""
    if timeout_s is None or timeout_s <= 0 or os.name != "posix":
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    return max(1, math.ceil(timeout_s))


def grade(predicted: str | None, reference: str, *, timeout_s: float = 5) -> bool:
    """Whether ``predicted`` is mathematically equivalent to ``reference`` (bare strings, LaTeX,
    ``\\boxed{}``). Equal strings or numbers first, word answers as lower-case words, the rest
    through math-verify with ``timeout_s`` per step (main thread only). Never raises: None or
    any error inside math-verify is "not equivalent"."""
    if not isinstance(predicted, str) or reference is None:
        return False
    reference = str(reference)  # tolerate a bare int/float from JSON
    try:
        if _plain_equal(predicted, reference):
            return True
        ref_words = _words(reference)
        if ref_words is not None:
            return _words(predicted) == ref_words
    except Exception:
        logger.debug("grading failed before math-verify", exc_info=True)
        return False
    try:  # a dependency of the core; absent only from an environment assembled by hand
        from math_verify import verify
        from math_verify.errors import TimeoutException
    except ImportError:
        _warn_without_math_verify()
        return False

    timeout = _timeout_arg(timeout_s)
    try:
        gold = _parse_math(_as_math(reference), timeout)
        if not gold:
            return False
        pred = _parse_math(_as_math(predicted), timeout)
        if not pred:
            return False
        return bool(verify(list(gold), list(pred), timeout_seconds=timeout))
    except (Exception, TimeoutException):
        logger.debug("math-verify failed; answer graded by string comparison", exc_info=True)
        return False


@functools.cache
def _warn_without_math_verify() -> None:
    """Said once: without math-verify, answers are equal only as strings or numbers."""
    warnings.warn("math-verify is not installed: answers are graded by string and number "
                  "equality only (1/2 and 0.5 agree, \\frac{1}{2} and 0.5 do not); "
                  "pip install math-verify", stacklevel=3)


def grade_completion(
    completion: str,
    reference: str,
    *,
    prefix: str = "",
    timeout_s: float = 5,
    fallback_last_number: bool = False,
) -> GradeResult:
    """Extract the final answer of ``completion`` and grade it against ``reference`` (no answer:
    wrong). ``prefix``: text the completion continues; the answer must end inside the
    completion (`extract_answer`'s ``start``)."""
    if not isinstance(prefix, str):
        prefix = ""
    if isinstance(completion, str):
        text, start = prefix + completion, len(prefix)
    else:
        text, start = completion, 0  # not a string: extract_answer gives None
    answer = extract_answer(text, fallback_last_number=fallback_last_number, start=start)
    return GradeResult(answer=answer, correct=grade(answer, reference, timeout_s=timeout_s))
