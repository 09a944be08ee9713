"""The organism's task: follow a chain of additions and subtractions from a start number.

A problem states a start number and a chain of operations (3 to 6 by default; the `long`
regime draws 20 to 40); every intermediate value stays in 0..19 (small numbers keep the
arithmetic learnable in minutes on a CPU), and each number is one token of the organism's
tokenizer. The prompt and the reference solution look like this:

    Start at 7. Add 5. Subtract 9. Add 14. Subtract 6. What number do you end at?

    7 + 5 = 12
    12 - 9 = 3
    3 + 14 = 17
    17 - 6 = 11
    The answer is 11.

Each reasoning line is one step that depends on the previous one (its first number is the
previous line's result), so a wrong step is a program check away (`checker`). Problems are
drawn from a seeded generator; the splits are disjoint by prompt (`split_problems`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_VALUE = 19
MIN_STEPS, MAX_STEPS = 3, 6
ANSWER_PREFIX = "The answer is "  # the final line, and the exit string E that forces an answer
QUESTION = "What number do you end at?"
OPS = {"+": "Add", "-": "Subtract"}
SPLIT_SEEDS = {"train": 1, "dev": 2, "test": 3}


@dataclass(frozen=True)
class Chain:
    """A start number and a chain of (operator, operand) steps."""

    start: int
    steps: tuple[tuple[str, int], ...]

    @property
    def values(self) -> list[int]:
        """The running value before the first step and after each step."""
        out = [self.start]
        for op, b in self.steps:
            out.append(apply(out[-1], op, b))
        return out

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def prompt(self) -> str:
        return f"Start at {self.start}. {operations_text(self.steps)} {QUESTION}"

    @property
    def solution(self) -> str:
        return reference_solution(self)

    def to_json(self, pid: str) -> dict:
        """A problem line `cotcredit generate` reads (prompt, answer, solution, id)."""
        return {
            "id": pid, "prompt": self.prompt, "answer": str(self.answer),
            "solution": self.solution, "n_steps": len(self.steps),
        }


Problem = Chain  # the name this class had before the regimes (kept for old imports)


def apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def in_range(value: int) -> bool:
    return 0 <= value <= MAX_VALUE


def operations_text(steps) -> str:
    """The operations as the prompt states them: "Add 5. Subtract 9."."""
    return " ".join(f"{OPS[op]} {b}." for op, b in steps)


def step_line(a: int, op: str, b: int) -> str:
    """One reasoning line, without its line break: "37 + 25 = 62"."""
    return f"{a} {op} {b} = {apply(a, op, b)}"


def reference_solution(problem: Chain, upto: int | None = None) -> str:
    """The solution's step lines (the first `upto` of them, all by default), each ending in a
    line break, then "The answer is N." (the final answer even when `upto` cuts the chain)."""
    vals = problem.values
    n = len(problem.steps) if upto is None else upto
    lines = [step_line(vals[i], *problem.steps[i]) + "\n" for i in range(n)]
    return "".join(lines) + f"{ANSWER_PREFIX}{problem.answer}."


def parse_prompt(prompt: str) -> Chain | None:
    """The problem a prompt states, or None if it is not one of this task's prompts."""
    words = prompt.replace(".", " ").split()
    q = QUESTION.replace(".", " ").split()
    if len(words) < 2 + len(q) or words[:2] != ["Start", "at"] or words[-len(q):] != q:
        return None
    body = words[2 : len(words) - len(q)]
    names = {v: k for k, v in OPS.items()}
    try:
        start = int(body[0])
        rest = body[1:]
        if len(rest) % 2:
            return None
        steps = tuple((names[rest[i]], int(rest[i + 1])) for i in range(0, len(rest), 2))
    except (KeyError, ValueError, IndexError):
        return None
    return Chain(start, steps)


def random_problem(rng: random.Random, min_steps: int = MIN_STEPS,
                   max_steps: int = MAX_STEPS) -> Chain:
    """One problem: `min_steps`..`max_steps` steps, each operand 1..MAX_VALUE, every value in
    0..MAX_VALUE."""
    n = rng.randint(min_steps, max_steps)
    value = rng.randint(0, MAX_VALUE)
    start, steps = value, []
    for _ in range(n):
        ops = [op for op, room in (("+", MAX_VALUE - value), ("-", value)) if room >= 1]
        op = rng.choice(ops)
        room = MAX_VALUE - value if op == "+" else value
        b = rng.randint(1, room)
        steps.append((op, b))
        value = apply(value, op, b)
    return Chain(start, tuple(steps))


def generate_problems(split: str, n: int, *, exclude: set[str] | None = None,
                      min_steps: int = MIN_STEPS, max_steps: int = MAX_STEPS,
                      seed: int | None = None) -> Iterator[Chain]:
    """`n` distinct problems of a split, always the same ones (seeded by the split's name, or
    by `seed`); prompts in `exclude` are skipped (train excludes dev and test)."""
    rng = random.Random(SPLIT_SEEDS[split] if seed is None else seed)
    seen = set(exclude or ())
    made = 0
    while made < n:
        p = random_problem(rng, min_steps, max_steps)
        if p.prompt in seen:
            continue
        seen.add(p.prompt)
        made += 1
        yield p


def split_problems(sizes: dict[str, int], **kwargs) -> dict[str, list[Chain]]:
    """The three splits, disjoint by prompt: test first, then dev, then train (`kwargs`: of
    `generate_problems`)."""
    out: dict[str, list[Chain]] = {}
    taken: set[str] = set()
    for split in ("test", "dev", "train"):
        out[split] = list(generate_problems(split, sizes.get(split, 0), exclude=taken, **kwargs))
        taken |= {p.prompt for p in out[split]}
    return out


def write_problems(problems: list[Chain], path: Path, split: str) -> None:
    """One JSON line per problem, ids `<split>-<i>`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i, p in enumerate(problems):
            f.write(json.dumps(p.to_json(f"{split}-{i}")) + "\n")


def read_problems(path: Path) -> list[Chain]:
    """Problems of a file written by `write_problems`."""
    out = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            p = parse_prompt(json.loads(line)["prompt"])
            if p is None:
                raise ValueError(f"{path}: not an organism problem: {line[:80]}")
            out.append(p)
    return out
