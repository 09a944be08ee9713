"""Deterministic lookup problems the embedded model (SmolLM2-135M-Instruct) solves some of the time.

The generator is `cotcredit.bench.regimes.hops.make_problems` (the `hops` task is the benchmark's
`hops` regime, whose checker is `cotcredit.bench.regimes.hops.check`); this script writes its
problems to a file. Three tasks, one JSONL line per problem (id, prompt, answer, solution):

  mc-study  two reads in a chain: a table of favourite fruits, a table of prices (2 rows each);
            "How much does Paul's favourite fruit cost?" The reference reasoning has four lines
            (restate who, read the fruit, read its price, restate) and ends "The answer is 61.".
  train     two reads and a sum: 3 fruits with one-digit prices; "How much do one kiwi and one
            plum cost together?" Three lines (read, read, add), then "The answer is 9.".
  hops      2-4 friend hops, then a fruit and its price: tables of friends, fruits and prices
            (3 rows each); "Start at Jack and go to their friend 3 times. How much does ...?"
            6-8 reasoning lines, one table read each (the regime's checker finds the first
            wrong one), then "The answer is 31.".

Why this shape (measured in examples/lookup/README.md): the 135M model cannot follow a format it is
only told about, but it copies the format of earlier assistant turns. So the prompt is a few-shot
conversation rendered in the model's own ChatML format: `--shots` solved examples as earlier
user/assistant turns, then the problem: what the chat template would render, so cotcredit uses it as
it is (it recognises the template's markers in the prompt). The examples draw their names and fruits
from pools the problems never use, so an example's rows are never confused with the problem's.
Prices are in "coins" and the answer is a plain "The answer is N." line: with dollars and \\boxed{}
the model wrote "$8.43"-style answers.

    python examples/lookup/make_problems.py --task mc-study --n 50 --seed 14 \\
        --out examples/lookup/study_problems.jsonl

The same arguments write the same file, byte for byte. `--exclude` skips problems that occur in
other files (a held-out split never repeats a training problem).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cotcredit.bench.regimes.hops import DEFAULT_ROWS, EXAMPLE_FRUITS, TASKS, make_problems

__all__ = ["make_problems", "questions_in"]


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
