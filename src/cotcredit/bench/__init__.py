"""A known-truth benchmark for credit methods: regimes whose first wrong step a checker knows.

Each regime (``REGIMES``: unique, multipath, forecast, long, hops) isolates one hypothesis about
credit assignment; it has a task generator, a checker that accepts every valid path, a small
checkpoint and labelled development and held-out traces. ``run_bench`` runs every registered
method, Monte Carlo and the cheap baselines on them and writes the leaderboard::

    import cotcredit.bench
    result = cotcredit.bench.run_bench("unique,multipath", "rredcot,loo", output="bench")
    result.leaderboard        # one row per regime and method (a DataFrame)

Its modules: ``regimes`` (the tasks and checkers), ``organism`` (the checkpoints' model and
training recipe), ``traces`` (labelled traces, cached), ``metrics`` (localization, false blame,
Monte Carlo tracking, cost), ``leaderboard``, ``variants`` (which methods, with which options),
``sizes`` (quick and full) and ``run`` (``run_bench``). Names are imported on first use:
``import cotcredit.bench`` loads no torch.
"""

from __future__ import annotations

from cotcredit._lazy import lazy_index

_WHERE = {
    # the regimes: tasks, checkers, checkpoints, labelled traces
    "REGIMES": "cotcredit.bench.regimes",
    "Regime": "cotcredit.bench.regimes.base",
    "Problem": "cotcredit.bench.regimes.base",
    "StepLabel": "cotcredit.bench.regimes.base",
    "get_regime": "cotcredit.bench.regimes",
    "checkpoint": "cotcredit.bench.regimes",
    "regime_traces": "cotcredit.bench.traces",
    # the benchmark: metrics, sizes, the run
    "regime_metrics": "cotcredit.bench.metrics",
    "BenchSize": "cotcredit.bench.sizes",
    "SIZES": "cotcredit.bench.sizes",
    "BenchOptions": "cotcredit.bench.run",
    "BenchResult": "cotcredit.bench.run",
    "run_bench": "cotcredit.bench.run",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_index(__name__, _WHERE)
