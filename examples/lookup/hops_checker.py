"""The first wrong step of a response to a `hops` problem (examples/lookup/make_problems.py).

A response is read line by line against the problem's own tables, the way the reference
solution walks them:

    We start at Mia.                      the question's start person
    Mia's friend is Jack.                 one line per hop: the current person's friend
    ...                                   (exactly the asked number of hops)
    Jack's favourite fruit is the kiwi.   the reached person's fruit
    The kiwi costs 72 coins.              that fruit's price
    So Jack's favourite fruit costs 72 coins.
    The answer is 72.

A line is wrong when it does not say what the tables say *at that point of the walk* (the
subject is not the person reached so far, the friend or fruit or price misread, a hop too few
or too many, a line that fits no pattern). `error_char` is the character offset where the first
wrong line starts, −1 when every line is right; a response that stops before the walk's end
points at its end. The answer is graded separately (the last "The answer is N").
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

FRIEND = re.compile(r"^(\w+)'s friend is (\w+)\.$")
LIKES = re.compile(r"^(\w+)'s favourite fruit is the (\w+)\.$")
PRICE = re.compile(r"^The (\w+) costs (\d+) coins\.$")
START = re.compile(r"^We start at (\w+)\.$")
SO = re.compile(r"^So (\w+)'s favourite fruit costs (\d+) coins\.$")
ANSWER = re.compile(r"The answer is (\d+)")
QUESTION = re.compile(r"Question: Start at (\w+) and go to their friend (\d+) times\.")


@dataclass(frozen=True)
class Tables:
    friend: dict[str, str]
    likes: dict[str, str]
    price: dict[str, int]
    start: str
    hops: int


@dataclass(frozen=True)
class Check:
    """What `check` found: the first wrong line (1-based, 0 when none), its kind, its offset."""

    error_char: int
    first_error_step: int
    error_kind: str
    correct: bool

    def to_dict(self) -> dict:
        return asdict(self)


def parse_tables(question: str) -> Tables:
    """The tables and the question of a hops problem's user turn."""
    friend = dict(m.groups() for m in map(FRIEND.match, question.splitlines()) if m)
    likes = dict(m.groups() for m in map(LIKES.match, question.splitlines()) if m)
    price = {f: int(v) for f, v in (m.groups() for m in map(PRICE.match, question.splitlines())
                                    if m)}
    q = QUESTION.search(question)
    if q is None or not friend or not likes or not price:
        raise ValueError(f"not a hops problem: {question[:80]!r}")
    return Tables(friend, likes, price, q.group(1), int(q.group(2)))


def check(question: str, response: str) -> Check:
    """The first wrong step of `response` to the hops problem `question` (see the module)."""
    t = parse_tables(question)
    truth = t.price[t.likes[_walk(t)]]
    answers = ANSWER.findall(response)
    correct = bool(answers) and int(answers[-1]) == truth
    # Where the reasoning ends: the answer statement (or the end of the response).
    m = ANSWER.search(response)
    end = m.start() if m else len(response)
    current, hops, fruit, value = None, 0, None, None
    expect = "start"
    offset, step = 0, 0
    for raw in response[:end].splitlines(keepends=True):
        line, start, offset = raw.strip(), offset, offset + len(raw)
        if not line:
            continue
        step += 1
        kind = None
        if expect == "start":
            g = START.match(line)
            kind = "garbled" if g is None else ("start" if g.group(1) != t.start else None)
            current, expect = t.start, "hop"
        elif expect == "hop" and (g := FRIEND.match(line)):
            a, b = g.groups()
            if hops == t.hops:
                kind = "extra hop"
            elif a != current:
                kind = "chain"
            elif b != t.friend.get(a):
                kind = "friend"
            current, hops = b, hops + 1
        elif expect == "hop" and (g := LIKES.match(line)):
            a, f = g.groups()
            if hops < t.hops:
                kind = "missing hop"
            elif a != current:
                kind = "chain"
            elif f != t.likes.get(a):
                kind = "fruit"
            fruit, expect = f, "price"
        elif expect == "price" and (g := PRICE.match(line)):
            f, v = g.group(1), int(g.group(2))
            kind = "chain" if f != fruit else ("price" if v != t.price.get(f) else None)
            value, expect = v, "so"
        elif expect == "so" and (g := SO.match(line)):
            a, v = g.group(1), int(g.group(2))
            kind = "restate" if (a != current or v != value) else None
            expect = "done"
        else:
            kind = "garbled" if expect != "done" else "extra"
        if kind:
            return Check(start, step, kind, correct)
    if expect != "done":  # stopped before the walk's end: the error is what is missing
        return Check(end, step + 1, "missing", correct)
    return Check(-1, 0, "", correct)


def question_of(prompt: str) -> str:
    """The problem's own user turn in a few-shot ChatML prompt (the last one), or the prompt."""
    if "<|im_start|>user\n" not in prompt:
        return prompt
    return prompt.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


def _walk(t: Tables) -> str:
    person = t.start
    for _ in range(t.hops):
        person = t.friend[person]
    return person
