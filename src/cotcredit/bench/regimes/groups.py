"""`groups`: the `multipath` task, checker and checkpoint, with its held-out traces in groups of
8 samples per problem, as a GRPO step samples a group.

Methods and baselines that read a problem's other right responses (RREDCoT's default with
``references: siblings``, the ``refdiff-siblings`` baseline) are measured here where they would
be used: with 8 samples, most problems have several right responses to read. The problems are
`multipath`'s own (same ids, same prompts), so sample j of a problem is the same draw in both
regimes (the generator seeds sample j from the seed, the problem id and j): the first four
samples of each group are `multipath`'s traces of that problem.
"""

from __future__ import annotations

from cotcredit.bench.regimes.base import Problem, checkpoint_path
from cotcredit.bench.regimes.multipath import Multipath

#: Samples per problem: a GRPO group.
GROUP_SIZE = 8


class Groups(Multipath):
    name = "groups"
    description = (
        "The multipath task, checker and checkpoint, with 8 samples per held-out problem (a "
        "GRPO group), the first 4 of each the multipath regime's own: where a method or a "
        "baseline that reads a problem's other right responses would be used."
    )
    hypothesis = "with a group of responses per problem, the right siblings are known paths"

    def problems(self, split: str, n: int) -> list[Problem]:
        """`multipath`'s first `n` problems of `split` (the same ids: the same draws)."""
        return _MULTIPATH.problems(split, n)

    def model(self) -> str:
        return str(checkpoint_path(_MULTIPATH.name))


_MULTIPATH = Multipath()
