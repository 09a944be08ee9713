"""What every regime is: a problem generator with disjoint splits, a checker that labels a
response's first wrong step, a checkpoint and the settings its traces are sampled with.

A regime's problems come from seeded pools: `test` is drawn first, `dev` skips every `test`
prompt of the test pool, `train` skips both pools, so `problems(split, n)` is the first n of
its split whatever n is, and the splits never share a prompt.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field
from functools import cached_property
from importlib import resources
from pathlib import Path

from cotcredit.bench.lines import departure_char
from cotcredit.errors import UserError

SPLITS = ("train", "dev", "test")
EXIT_STRING = "The answer is "


@dataclass(frozen=True)
class StepLabel:
    """What a regime's checker says about one response."""

    correct: bool  # the final answer is right
    n_steps: int  # steps the reference needs
    first_error_step: int  # 1-based index of the first wrong step among the response's lines; 0: none
    error_kind: str  # "" or the checker's kind
    error_char: int  # char offset in the response where the first wrong step starts; -1: none
    # char offset where the response first departs from the reference solution (the first
    # reasoning line that is not the reference's line at the same index, `lines.departure_char`);
    # -1: it follows the reference throughout
    departure_char: int
    valid_departure: bool  # departs from the reference AND every step is valid (another path)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Problem:
    """One problem of a regime (JSON-able with `to_json`)."""

    id: str
    prompt: str
    answer: str
    solution: str  # the canonical reference solution (ends with its answer statement)
    solutions: tuple[str, ...] = ()  # every reference offered (first == solution)
    meta: dict = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        """A problem line `cotcredit generate` reads (its extra fields are carried along)."""
        return {"id": self.id, "prompt": self.prompt, "answer": self.answer,
                "solution": self.solution, "solutions": list(self.solutions), "meta": self.meta}


def make_label(*, correct: bool, n_steps: int, first_error_step: int, error_kind: str,
               error_char: int, response: str, solution: str,
               prefix: str = EXIT_STRING) -> StepLabel:
    """A `StepLabel` from a checker's verdict, with the departure from `solution`."""
    dep = departure_char(response, solution, prefix)
    return StepLabel(correct=bool(correct), n_steps=n_steps, first_error_step=first_error_step,
                     error_kind=error_kind, error_char=error_char, departure_char=dep,
                     valid_departure=dep >= 0 and error_char < 0)


def checkpoint_path(name: str) -> Path:
    """The folder of a regime's shipped checkpoint (package data)."""
    return Path(str(resources.files("cotcredit.bench") / "checkpoints" / name))


class Regime:
    """A known-truth regime (see the module docstring). Subclasses set the class attributes
    and implement `draw` (one problem from a seeded stream) and `check`."""

    name: str = ""
    description: str = ""  # what it tests and what it cannot
    # why no checkpoint ships with this version ("": one does); the bench leaves such a regime
    # out of a default run and says why
    unavailable: str = ""
    hypothesis: str = ""  # which hypothesis it separates, in one line
    # why its first-error labels are defined by string comparison with the reference ("": they
    # are not); the leaderboard marks such a regime
    string_labels: str = ""
    sampling: dict = {}  # temperature, top_p, max_new_tokens of its traces
    exit_string: str = EXIT_STRING
    pools: dict[str, int] = {"test": 1000, "dev": 300}  # held-out pool sizes
    split_seeds: dict[str, int] = {"train": 1, "dev": 2, "test": 3}
    max_number: int = 19  # the largest number its texts hold (one token each in an organism's)

    def draw(self, rng: random.Random, split: str, index: int) -> Problem:
        """One problem from the split's stream (`index`: its position, for its id)."""
        raise NotImplementedError

    def key(self, problem: Problem) -> str:
        """What makes two problems the same (the splits are disjoint by it): the prompt."""
        return problem.prompt

    def check(self, problem: Problem, response: str) -> StepLabel:
        """The first wrong step of `response`, its kind and offset, the graded answer and the
        departure from the reference solution."""
        raise NotImplementedError

    def model(self) -> str:
        """The checkpoint folder its traces are sampled from."""
        return str(checkpoint_path(self.name))

    def problems(self, split: str, n: int) -> list[Problem]:
        """The first `n` problems of `split` (train | dev | test): seeded, disjoint by prompt."""
        if split not in SPLITS:
            raise UserError(f"split must be one of {', '.join(SPLITS)}, got '{split}'")
        if split in self.pools and n > self.pools[split]:
            raise UserError(f"regime {self.name}: the {split} split has {self.pools[split]} "
                            f"problems, {n} asked")
        return self._stream(split, n, self._taken(split))

    def _taken(self, split: str) -> frozenset[str]:
        before = {"test": (), "dev": ("test",), "train": ("test", "dev")}[split]
        return frozenset().union(*(self._pool_keys(s) for s in before))

    def _pool_keys(self, split: str) -> frozenset[str]:
        return self._pool_key_cache.setdefault(
            split, frozenset(self.key(p) for p in self.problems(split, self.pools[split])))

    @cached_property
    def _pool_key_cache(self) -> dict[str, frozenset[str]]:
        return {}

    def _stream(self, split: str, n: int, exclude: frozenset[str]) -> list[Problem]:
        rng = random.Random(self.split_seeds[split])
        seen, out = set(exclude), []
        while len(out) < n:
            p = self.draw(rng, split, len(out))
            if self.key(p) in seen:
                continue
            seen.add(self.key(p))
            out.append(p)
        return out

    def training_response(self, problem: Problem, rng: random.Random) -> str:
        """The response a training sequence of `problem` shows (default: its reference)."""
        return problem.solution

    def __repr__(self) -> str:
        return f"Regime({self.name!r})"


def write_problems(problems: list[Problem], path: Path) -> None:
    """One JSON line per problem (`Problem.to_json`), written atomically: processes of a launch
    write the same file while others read it."""
    from cotcredit.store import io

    path.parent.mkdir(parents=True, exist_ok=True)
    io.write_atomic(path, "".join(json.dumps(p.to_json(), ensure_ascii=False) + "\n"
                                  for p in problems))
