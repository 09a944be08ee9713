"""Write the organism's problem files from their seeds.

    python -m studies.organism.problems          # or: make organism-problems

test.jsonl (1,000) and dev.jsonl (300) hold the organism studies' held-out problems,
train.jsonl (20,000, 4.7 MB) the training study's; none is tracked: each study's make target
writes them first, the same files from the same seeds. Splits are disjoint by prompt.
"""

from __future__ import annotations

import argparse

from cotcredit.bench.organism.task import split_problems, write_problems
from studies.organism import PROBLEMS

SIZES = {"train": 20000, "dev": 300, "test": 1000}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args(argv)
    for split, problems in split_problems(SIZES).items():
        path = PROBLEMS / f"{split}.jsonl"
        write_problems(problems, path, split)
        print(f"{path}: {len(problems)} problems")


if __name__ == "__main__":
    main()
