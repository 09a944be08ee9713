"""Reading a response line by line: its reasoning lines, its answer statement, and where it
first departs from a reference solution.

Every regime's checker walks the response's lines; `departure_char` is the one alignment rule
between a response and a reference that the benchmark uses (documented in `StepLabel`):

    the reasoning lines of both (the lines before the answer statement), blank lines dropped,
    whitespace-normalised (runs of whitespace as one space, none at either end), compared
    by index. The departure is the start of the first response line that differs from the
    reference's line at the same index or that the reference does not have; when the response
    has fewer reasoning lines and all of them match, it is where the next one would start (the
    answer statement, or the end of the response). -1: the response follows the reference's
    reasoning throughout (its answer statement is not compared: a departure there is none
    inside the reasoning, where credit is assigned).
"""

from __future__ import annotations


def split_lines(text: str) -> list[tuple[int, str]]:
    """(start offset, text without its line break) of every line of `text`."""
    out, pos = [], 0
    for ln in text.splitlines(keepends=True):
        out.append((pos, ln.rstrip("\r\n")))
        pos += len(ln)
    return out


def answer_line_index(lines: list[tuple[int, str]], prefix: str) -> int | None:
    """Index of the first line that starts (after leading blanks) with the answer statement
    `prefix` ("The answer is"), or None."""
    key = prefix.strip()
    return next((i for i, (_, t) in enumerate(lines) if t.lstrip().startswith(key)), None)


def reasoning_end(text: str, prefix: str) -> int:
    """Offset where the reasoning ends: the answer statement's line, or the end of `text`."""
    lines = split_lines(text)
    at = answer_line_index(lines, prefix)
    return len(text) if at is None else lines[at][0]


def normalise(line: str) -> str:
    return " ".join(line.split())


def reasoning_lines(text: str, prefix: str) -> list[tuple[int, str]]:
    """The non-blank lines before the answer statement, whitespace-normalised, with offsets."""
    end = reasoning_end(text, prefix)
    return [(s, normalise(t)) for s, t in split_lines(text[:end]) if t.strip()]


def departure_char(response: str, reference: str, prefix: str) -> int:
    """Where `response` first departs from the `reference` solution (module docstring)."""
    mine, ref = reasoning_lines(response, prefix), reasoning_lines(reference, prefix)
    for i, (start, text) in enumerate(mine):
        if i >= len(ref) or text != ref[i][1]:
            return start
    return -1 if len(mine) == len(ref) else reasoning_end(response, prefix)
