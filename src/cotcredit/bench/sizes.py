"""How much of each regime a bench runs: ``quick`` (a smoke test of the whole path, minutes on
2 CPU cores) and ``full`` (the protocol's sizes, hours), or a ``BenchSize`` of one's own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cotcredit.bench.variants import REFERENCE
from cotcredit.errors import UserError


@dataclass(frozen=True)
class BenchSize:
    """Problems per split (the first of the regime's split), samples per problem, Monte Carlo
    rollouts per boundary, bootstrap resamples, and at most how many traces (the first) each
    expensive method scores per split, e.g. ``{"test": {"mc": 200, "shapley": 100}, "dev":
    {"mc": 60, "shapley": 0}}`` (0: not run on that split; a method not named: every trace)."""

    problems: int
    samples: int
    rollouts: int
    dev_problems: int | None = None  # None: as many as the held-out split
    n_boot: int = 2000
    splits: int = 20  # random splits of the rollout equivalence
    caps: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def problems_for(self, split: str) -> int:
        """Problems of ``split``."""
        return self.dev_problems if split == "dev" and self.dev_problems else self.problems

    def traces_for(self, split: str, method: str) -> int | None:
        """How many traces ``method`` scores on ``split`` (None: all)."""
        return self.caps.get(split, {}).get(method)


#: Methods a full bench does not run on the development split: no option of theirs is chosen
#: there, and they are the expensive ones.
NOT_ON_DEV = ("shapley", "gradient")


def caps(mc: int | None = None, dev_mc: int | None = None, not_on_dev: tuple[str, ...] = (),
         **test: int) -> dict:
    """Per-split caps: Monte Carlo on ``mc`` test and ``dev_mc`` dev traces; the methods named
    in ``test`` on that many test traces; ``NOT_ON_DEV`` and ``not_on_dev`` on no dev trace."""
    test_caps = {**({REFERENCE: mc} if mc is not None else {}), **test}
    dev_caps = {**({REFERENCE: dev_mc} if dev_mc is not None else {}),
                **dict.fromkeys((*NOT_ON_DEV, *not_on_dev), 0)}
    return {"test": test_caps, "dev": dev_caps}


#: The named sizes, per regime (studies/bench/PROTOCOL.md says why ``full`` is what it is).
SIZES: dict[str, dict[str, BenchSize]] = {
    "quick": {
        "unique": BenchSize(problems=6, samples=2, rollouts=8, n_boot=200, splits=4),
        "multipath": BenchSize(problems=6, samples=2, rollouts=8, n_boot=200, splits=4),
        "forecast": BenchSize(problems=6, samples=2, rollouts=8, n_boot=200, splits=4),
        "long": BenchSize(problems=3, samples=2, rollouts=4, n_boot=200, splits=4,
                          caps={"test": {REFERENCE: 3}, "dev": {REFERENCE: 3}}),
        "groups": BenchSize(problems=2, samples=8, rollouts=4, n_boot=200, splits=4),
        "hops": BenchSize(problems=2, samples=1, rollouts=2, dev_problems=1, n_boot=200,
                          splits=2, caps={"test": {REFERENCE: 1}, "dev": {REFERENCE: 0}}),
    },
    "full": {
        # studies/bench/PROTOCOL.md (version 2): every method on every test trace; on dev,
        # Monte Carlo on the first problems only (every sample of each) and no Shapley or
        # gradients; 32 rollouts per boundary (the first n of them are Monte Carlo with n)
        "unique": BenchSize(problems=150, samples=4, rollouts=32, caps=caps(dev_mc=200)),
        "multipath": BenchSize(problems=150, samples=4, rollouts=32, caps=caps(dev_mc=200)),
        "forecast": BenchSize(problems=150, samples=4, rollouts=32, caps=caps(dev_mc=120)),
        "long": BenchSize(problems=50, samples=4, rollouts=32, dev_problems=25,
                          caps=caps(dev_mc=60)),
        "groups": BenchSize(problems=60, samples=8, rollouts=32, dev_problems=30,
                            caps=caps(dev_mc=120)),
        # hops on SmolLM2 is the expensive part: dev runs only what the choice of the best
        # baseline needs and R̂ + v̂ / R̂ (the value-estimate study reads them)
        "hops": BenchSize(problems=240, samples=1, rollouts=8, dev_problems=60,
                          caps=caps(mc=24, dev_mc=8, not_on_dev=("loo",), shapley=40,
                                    gradient=10)),
    },
}
#: A regime the size tables do not name (a user's own) gets the unique regime's size.
DEFAULT_REGIME_SIZE = "unique"
#: The methods a size runs when none are named (None: every registered method and variant).
SIZE_METHODS: dict[str, str | None] = {"quick": "rredcot,rredcot-rhat,loo", "full": None}
#: Where each size keeps its traces in the cache: the full sets where
#: ``python -m cotcredit.bench.traces`` builds them, the quick ones apart (a quick run never
#: rewrites a set a full run is reading). A ``BenchSize`` of one's own: ``custom``.
CACHE_FOLDERS = {"full": "", "quick": "quick"}


def bench_size(size: str | BenchSize, regime: str) -> BenchSize:
    """The size of ``regime`` in a named size (``SIZES``), or ``size`` itself."""
    if isinstance(size, BenchSize):
        return size
    if size not in SIZES:
        raise UserError(f"--size: unknown size {size!r} (known: {', '.join(SIZES)})")
    table = SIZES[size]
    return table.get(regime, table[DEFAULT_REGIME_SIZE])


def size_label(size: str | BenchSize) -> str:
    """The size's name in the cache (``CACHE_FOLDERS``) and the run record."""
    return CACHE_FOLDERS.get(size, "custom") if isinstance(size, str) else "custom"
