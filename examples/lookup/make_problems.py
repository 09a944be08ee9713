"""Deterministic lookup problems the embedded model (SmolLM2-135M-Instruct) solves some of the time.

Two tasks, one JSONL line per problem (id, prompt, answer, solution):

  mc-study  two reads in a chain: a table of favourite fruits, a table of prices (2 rows each);
            "How much does Paul's favourite fruit cost?" The reference reasoning has four lines
            (restate who, read the fruit, read its price, restate) and ends "The answer is 61.".
  train     two reads and a sum: 3 fruits with one-digit prices; "How much do one kiwi and one
            plum cost together?" Three lines (read, read, add), then "The answer is 9.".
  hops      2-4 friend hops, then a fruit and its price: tables of friends, fruits and prices
            (3 rows each); "Start at Jack and go to their friend 3 times. How much does ...?"
            6-8 reasoning lines, one table read each (`hops_checker.py` finds the first wrong
            one), then "The answer is 31.".

Why this shape (measured in examples/lookup/README.md): the 135M model cannot follow a format it
is only told about, but it copies the format of earlier assistant turns. So the prompt is a
few-shot conversation rendered in the model's own ChatML format: `--shots` solved examples as
earlier user/assistant turns, then the problem: what the chat template would render, so
cotcredit uses it as it is (it recognises the template's markers in the prompt). The examples draw their names and fruits from pools the
problems never use, so an example's rows are never confused with the problem's. Prices are in
"coins" and the answer is a plain "The answer is N." line: with dollars and \\boxed{} the model
wrote "$8.43"-style answers.

    python examples/lookup/make_problems.py --task mc-study --n 50 --seed 14 \\
        --out examples/lookup/study_problems.jsonl

The same arguments write the same file, byte for byte. `--exclude` skips problems that occur in
other files (a held-out split never repeats a training problem).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

# SmolLM2's chat template: its default system message when none is given, then ChatML turns.
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry",
         "Ivy", "Jack", "Kate", "Liam", "Mia", "Noah", "Olga", "Paul"]  # fmt: skip
FRUITS = ["apple", "banana", "pear", "orange", "lemon", "mango",
          "peach", "plum", "cherry", "grape", "melon", "kiwi"]  # fmt: skip
# The few-shot examples use their own names and fruits (never a problem's).
EXAMPLE_NAMES = ["Zoe", "Yuri", "Xena", "Walt", "Vera", "Uma"]
EXAMPLE_FRUITS = ["fig", "date", "lime", "papaya", "guava", "apricot"]


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


HOPS = (2, 3, 4)  # friend-hops of the hops task: 6 to 8 reasoning lines


def hops_problem(rng: random.Random, names: list[str], fruits: list[str], rows: int):
    """Who is whose friend, who likes which fruit, what each fruit costs; the question follows
    the friends 2-4 times from a start person, then reads that person's fruit and its price.
    Every line of the reference reads one table row, so a misread shows at its line
    (`hops_checker.check`)."""
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
# Rows per table, chosen so that the model's sampled accuracy lands near the middle (README);
# hops: 3 people (with 4 the embedded model solved 6 of 64 and erred mostly on the first hop;
# examples/lookup_study/calibration/).
DEFAULT_ROWS = {"mc-study": 2, "train": 3, "hops": 3}


def make_problems(
    task: str,
    n: int,
    seed: int,
    rows: int | None = None,
    shots: int = 2,
    exclude: set[str] | None = None,
) -> list[dict]:
    """`n` distinct problems of `task`; the same arguments give the same list.

    Problems and few-shot examples come from two random streams of `seed`, so changing `shots`
    leaves the problems themselves unchanged. A problem whose question is in `exclude` (or
    already drawn) is skipped and another one drawn.
    """
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


def questions_in(path: Path) -> set[str]:
    """The `user_turn` (the problem without its examples) of every problem in a file."""
    with path.open() as f:
        return {json.loads(line)["user_turn"] for line in f if line.strip()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--n", type=int, required=True, help="number of problems")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    parser.add_argument(
        "--rows", type=int, help="rows per table: the difficulty [mc-study: 2, train: 3]"
    )
    parser.add_argument(
        "--shots",
        type=int,
        default=2,
        help="solved examples before the problem (0: the bare question, for a model that needs"
        " no examples; then keep its chat template on)",
    )
    parser.add_argument(
        "--exclude",
        type=Path,
        nargs="*",
        default=[],
        help="problem files whose questions must not be repeated",
    )
    args = parser.parse_args()
    if args.n < 1 or args.shots < 0:
        parser.error("--n must be at least 1 and --shots at least 0")
    args.rows = args.rows or DEFAULT_ROWS[args.task]
    if not 2 <= args.rows <= len(EXAMPLE_FRUITS):  # the examples' pools are the smallest
        parser.error(f"--rows must be between 2 and {len(EXAMPLE_FRUITS)}")
    exclude = set().union(*(questions_in(p) for p in args.exclude))
    problems = make_problems(args.task, args.n, args.seed, args.rows, args.shots, exclude)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for p in problems:
            f.write(json.dumps(p) + "\n")
    print(
        f"{args.out}: {len(problems)} {args.task} problems (seed {args.seed}, {args.rows} rows, "
        f"{args.shots} shots)"
    )


if __name__ == "__main__":
    main()
