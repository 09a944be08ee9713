"""Write the organism's problem files from their seeds.

    python -m studies.organism.problems          # or: make organism-problems

test.jsonl (1,000) and dev.jsonl (300) hold the organism studies' held-out problems,
train.jsonl (20,000, 4.7 MB) the training study's; none is tracked: each study's make target
writes them first, the same files from the same seeds. Splits are disjoint by prompt.
"""

from __future__ import annotations

import argparse
from pathlib import Path

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


def problem_file(split: str) -> Path:
    """The split's problem file; written first, with the other splits, when this machine lacks
    it (the files are not tracked; a study run from Python skips the make target that writes
    them)."""
    path = PROBLEMS / f"{split}.jsonl"
    if not path.is_file():
        main([])
    return path


if __name__ == "__main__":
    main()
