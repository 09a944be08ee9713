"""`hops`: a lookup task in realistic language for the embedded SmolLM2-135M-Instruct, and the
lookup problem generator it comes from.

Three lookup tasks share the generator (`make_problems`); `hops` is the regime:

  mc-study  two reads in a chain: a table of favourite fruits, a table of prices (2 rows each);
            "How much does Paul's favourite fruit cost?" The reference reasoning has four lines
            (restate who, read the fruit, read its price, restate) and ends "The answer is 61.".
  train     two reads and a sum: 3 fruits with one-digit prices; "How much do one kiwi and one
            plum cost together?" Three lines (read, read, add), then "The answer is 9.".
  hops      2-4 friend hops, then a fruit and its price: tables of friends, fruits and prices
            (3 rows each); "Start at Jack and go to their friend 3 times. How much does ...?"
            6-8 reasoning lines, one table read each, then "The answer is 31.".

Why this shape: the 135M model cannot follow a format it is only told about, but it copies the
format of earlier assistant turns. So the prompt is a few-shot conversation rendered in the
model's own ChatML format: `shots` solved examples as earlier user/assistant turns, then the
problem (what its chat template would render; cotcredit recognises the template's markers in
the prompt). The examples draw their names and fruits from pools the problems never use. Prices
are in "coins" and the answer is a plain "The answer is N." line.

The checker (`check`) reads a hops response line by line against the problem's own tables, the
way the reference solution walks them:

    We start at Mia.                      the question's start person
    Mia's friend is Jack.                 one line per hop: the current person's friend
    ...                                   (exactly the asked number of hops)
    Jack's favourite fruit is the kiwi.   the reached person's fruit
    The kiwi costs 72 coins.              that fruit's price
    So Jack's favourite fruit costs 72 coins.
    The answer is 72.

A line is wrong when it does not say what the tables say at that point of the walk. Kinds:
``start``, ``chain`` (the subject is not the person or fruit reached so far), ``friend``,
``fruit``, ``price`` (a misread), ``missing hop``, ``extra hop``, ``restate``, ``garbled`` (fits
no pattern), ``extra`` (lines after the walk), ``missing`` (the response stops before the
walk's end: the error is at its end). Blank lines are skipped. The answer is graded on its own
(the last "The answer is N").
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass

from cotcredit.bench.regimes.base import Problem, Regime, StepLabel, make_label

# SmolLM2's chat template: its default system message when none is given, then ChatML turns.
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry",
         "Ivy", "Jack", "Kate", "Liam", "Mia", "Noah", "Olga", "Paul"]  # fmt: skip
FRUITS = ["apple", "banana", "pear", "orange", "lemon", "mango",
          "peach", "plum", "cherry", "grape", "melon", "kiwi"]  # fmt: skip
# The few-shot examples use their own names and fruits (never a problem's).
EXAMPLE_NAMES = ["Zoe", "Yuri", "Xena", "Walt", "Vera", "Uma"]
EXAMPLE_FRUITS = ["fig", "date", "lime", "papaya", "guava", "apricot"]
HOPS = (2, 3, 4)  # friend-hops of the hops task: 6 to 8 reasoning lines


def chatml(turns: list[tuple[str, str]]) -> str:
    """The conversation as SmolLM2's chat template renders it, ready for the assistant's reply."""
    text = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    for role, content in turns:
        text += f"<|im_start|>{role}\n{content}<|im_end|>\n"
    return text + "<|im_start|>assistant\n"


def chain_problem(rng: random.Random, names: list[str], fruits: list[str], rows: int):
    """Who likes which fruit, what each fruit costs; the question chains the two tables."""
    people = rng.sample(names, rows)
    likes = dict(zip(people, rng.sample(fruits, rows)))
    price = dict(zip(likes.values(), rng.sample(range(10, 100), rows)))
    who = rng.choice(people)
    fruit, answer = likes[who], price[likes[who]]
    question = (
        "Favourite fruits:\n"
        + "\n".join(f"{p}'s favourite fruit is the {likes[p]}." for p in people)
        + "\n\nPrices:\n"
        + "\n".join(f"The {f} costs {price[f]} coins." for f in rng.sample(list(price), rows))
        + f"\n\nQuestion: How much does {who}'s favourite fruit cost?"
    )
    solution = (
        f"The question asks about {who}.\n"
        f"{who}'s favourite fruit is the {fruit}.\n"
        f"The {fruit} costs {answer} coins.\n"
        f"So {who}'s favourite fruit costs {answer} coins.\n"
        f"The answer is {answer}."
    )
    return question, str(answer), solution


def sum_problem(rng: random.Random, names: list[str], fruits: list[str], rows: int):
    """One-digit prices of a few fruits; the question asks for two of them together."""
    del names  # this task has no people
    items = rng.sample(fruits, rows)
    # Distinct prices: reading a wrong fruit changes the sum.
    price = dict(zip(items, rng.sample(range(1, 10), rows)))
    x, y = rng.sample(items, 2)
    answer = price[x] + price[y]
    question = (
        "Prices:\n"
        + "\n".join(f"The {f} costs {price[f]} coins." for f in items)
        + f"\n\nQuestion: How much do one {x} and one {y} cost together?"
    )
    solution = (
        f"The {x} costs {price[x]} coins.\n"
        f"The {y} costs {price[y]} coins.\n"
        f"Together they cost {price[x]} + {price[y]} = {answer} coins.\n"
        f"The answer is {answer}."
    )
    return question, str(answer), solution


def hops_problem(rng: random.Random, names: list[str], fruits: list[str], rows: int):
    """Who is whose friend, who likes which fruit, what each fruit costs; the question follows
    the friends 2-4 times from a start person, then reads that person's fruit and its price.
    Every line of the reference reads one table row, so a misread shows at its line."""
    people = rng.sample(names, rows)
    # Each person's friend is someone else; the chain may revisit people, as a table allows.
    friend = {p: rng.choice([q for q in people if q != p]) for p in people}
    likes = dict(zip(people, rng.sample(fruits, rows)))
    price = dict(zip(likes.values(), rng.sample(range(10, 100), rows)))
    start, hops = rng.choice(people), rng.choice(HOPS)
    chain = [start]
    for _ in range(hops):
        chain.append(friend[chain[-1]])
    end = chain[-1]
    fruit, answer = likes[end], price[likes[end]]
    question = (
        "Friends:\n"
        + "\n".join(f"{p}'s friend is {friend[p]}." for p in people)
        + "\n\nFavourite fruits:\n"
        + "\n".join(f"{p}'s favourite fruit is the {likes[p]}." for p in rng.sample(people, rows))
        + "\n\nPrices:\n"
        + "\n".join(f"The {f} costs {price[f]} coins." for f in rng.sample(list(price), rows))
        + f"\n\nQuestion: Start at {start} and go to their friend {hops} times. How much does "
        "the favourite fruit of the person you reach cost?"
    )
    lines = [f"We start at {start}."]
    lines += [f"{a}'s friend is {b}." for a, b in zip(chain, chain[1:])]
    lines += [f"{end}'s favourite fruit is the {fruit}.", f"The {fruit} costs {answer} coins.",
              f"So {end}'s favourite fruit costs {answer} coins.", f"The answer is {answer}."]
    return question, str(answer), "\n".join(lines)


TASKS = {"mc-study": chain_problem, "train": sum_problem, "hops": hops_problem}
# Rows per table, chosen so that the model's sampled accuracy lands near the middle; hops: 3
# people (with 4 the embedded model solved 6 of 64 and erred mostly on the first hop).
DEFAULT_ROWS = {"mc-study": 2, "train": 3, "hops": 3}


def make_problems(task: str, n: int, seed: int, rows: int | None = None, shots: int = 2,
                  exclude: set[str] | None = None) -> list[dict]:
    """`n` distinct problems of `task` (JSON lines: id, prompt, answer, solution, user_turn);
    the same arguments give the same list.

    Problems and few-shot examples come from two random streams of `seed`, so changing `shots`
    leaves the problems themselves unchanged. A problem whose question is in `exclude` (or
    already drawn) is skipped and another one drawn."""
    make, rows = TASKS[task], rows or DEFAULT_ROWS[task]
    problems_rng, examples_rng = random.Random(seed), random.Random(f"{seed}-examples")
    seen, out = set(exclude or ()), []
    while len(out) < n:
        question, answer, solution = make(problems_rng, NAMES, FRUITS, rows)
        if question in seen:
            continue
        seen.add(question)
        turns = []
        for _ in range(shots):
            ex_question, _, ex_solution = make(examples_rng, EXAMPLE_NAMES, EXAMPLE_FRUITS, rows)
            turns += [("user", ex_question), ("assistant", ex_solution)]
        # shots=0: the bare question, for a model that needs no examples (use its chat template).
        prompt = chatml([*turns, ("user", question)]) if shots else question
        out.append({
            "id": f"{task}-{seed}-{len(out):04d}",
            "prompt": prompt,
            "answer": answer,
            "solution": solution,
            "user_turn": question,  # the problem alone, without the examples
        })  # fmt: skip
    return out


# ---- the checker ---------------------------------------------------------------------------
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
    rows = question.splitlines()
    friend = dict(m.groups() for m in map(FRIEND.match, rows) if m)
    likes = dict(m.groups() for m in map(LIKES.match, rows) if m)
    price = {f: int(v) for f, v in (m.groups() for m in map(PRICE.match, rows) if m)}
    q = QUESTION.search(question)
    if q is None or not friend or not likes or not price:
        raise ValueError(f"not a hops problem: {question[:80]!r}")
    return Tables(friend, likes, price, q.group(1), int(q.group(2)))


def check(question: str, response: str) -> Check:
    """The first wrong step of `response` to the hops problem `question` (module docstring)."""
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


# ---- the regime ----------------------------------------------------------------------------
EMBEDDED = "embedded"  # what `Hops.model()` returns: the embedded default model


class Hops(Regime):
    name = "hops"
    description = (
        "A multi-hop table lookup in realistic language (follow a friend table 2-4 times, read "
        "a fruit and its price) for the embedded SmolLM2-135M-Instruct, prompted with two "
        "solved examples; a checker reads each line against the tables. It tests whether a "
        "method's findings on the organisms hold for a pretrained model's own language; its "
        "model is fixed (not trained here), its traces few, and it has one valid path."
    )
    hypothesis = "do the organism results hold on a pretrained model's language?"
    string_labels = (
        "its checker accepts a line only in the reference's wording, and no held-out trace of "
        "the lookup study has every step right: the first wrong step is, in effect, the first "
        "departure from the reference text, so refdiff localizes it by construction; it ranks "
        "no string-based row and is left out of every headline claim")
    sampling = {"temperature": 0.7, "top_p": 1.0, "max_new_tokens": 160}
    pools = {"test": 1000, "dev": 1000}
    split_seeds = {"train": 23, "dev": 22, "test": 21}  # test: the lookup study's problems
    rows, shots = 3, 2

    def key(self, problem: Problem) -> str:
        return problem.meta["user_turn"]

    def _stream(self, split: str, n: int, exclude: frozenset[str]) -> list[Problem]:
        found = make_problems("hops", n, self.split_seeds[split], self.rows, self.shots,
                              exclude=set(exclude))
        return [Problem(id=p["id"], prompt=p["prompt"], answer=p["answer"],
                        solution=p["solution"], solutions=(p["solution"],),
                        meta={"user_turn": p["user_turn"]}) for p in found]

    def check(self, problem: Problem, response: str) -> StepLabel:
        c = check(question_of(problem.prompt), response)
        n_steps = len(problem.solution.splitlines()) - 1  # the reference's reasoning lines
        return make_label(correct=c.correct, n_steps=n_steps,
                          first_error_step=c.first_error_step, error_kind=c.error_kind,
                          error_char=c.error_char, response=response, solution=problem.solution)

    def model(self) -> str:
        return EMBEDDED
