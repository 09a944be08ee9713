"""`cotcredit bench`: the known-truth benchmark (`cotcredit.bench.run_bench`) and its
leaderboard, printed as one table of localization and Monte Carlo tracking per regime."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cotcredit.bench.run import BenchOptions
from cotcredit.cli.commands import Quiet, err, out
from cotcredit.data.trace import FieldOptions
from cotcredit.errors import UserError
from cotcredit.lm.loading import ModelOptions
from cotcredit.options import with_options

HELP = """Benchmark credit methods on regimes whose first wrong step is known.

Runs every method (and named variant), Monte Carlo and the cheap baselines (refdiff,
refdiff-solutions, refdiff-siblings, entropy, position, position-length, random) on each
regime's development and held-out traces, one segment per reasoning line, and writes the
leaderboard (leaderboard.md, .csv, .json; comparisons.md, .csv), each regime's compare report and
trace explorer into the output folder. With --traces FILE --model M: your own labelled traces
(steps with a label, or error_char) are the regime, scored with your model. Resumable: rerun the
same command to continue. Exits with status 2 when a method failed on a regime (the other
results are written)."""


def _cell(value: float, paired_low: float, paired_high: float) -> str:
    if not math.isfinite(value):
        return "–"
    mark = " ▲" if paired_low > 0 else " ▼" if paired_high < 0 else ""
    return f"{value:.2f}{mark}"


def leaderboard_table(board) -> Table:
    """Method × regime: top-1 localization / MC-tracking Spearman (▲/▼: the paired interval
    with the regime's best baseline lies above/below 0)."""
    regimes = list(dict.fromkeys(board["regime"]))
    table = Table(title="bench: localization top-1 / Spearman with MC (held-out; ▲▼ vs the "
                  "best baseline)")
    table.add_column("method")
    for r in regimes:
        table.add_column(r, justify="right")
    for method in dict.fromkeys(board["method"]):
        cells = []
        for r in regimes:
            row = board.loc[(board["regime"] == r) & (board["method"] == method)]
            if row.empty:
                cells.append("–")
                continue
            x = row.iloc[0]
            cells.append(_cell(x["loc_top1"], x["loc_vs_best_low"], x["loc_vs_best_high"])
                         + " / "
                         + _cell(x["mc_spearman"], x["mc_vs_best_low"], x["mc_vs_best_high"]))
        kind = board.loc[board["method"] == method, "kind"].iloc[0]
        table.add_row(method + (" (baseline)" if kind == "baseline" else ""), *cells)
    return table


def bench(
    output: Annotated[Path, typer.Option("-o", "--output", help="The bench folder (resumed "
                                         "when it exists).")] = Path("bench"),
    quiet: Quiet = False,
    *, options: BenchOptions, model: ModelOptions, inputs: FieldOptions,
) -> None:
    """Benchmark credit methods on regimes whose first wrong step is known (``HELP``)."""
    from cotcredit.bench.run import run_bench

    def say(line: str) -> None:
        if not quiet:
            err.print(line, markup=False, highlight=False)

    given = options.traces is not None or model != ModelOptions() or inputs != FieldOptions()
    result = run_bench(output=output, options=options, log=say,
                       model=model if given else None, inputs=inputs if given else None)
    if not quiet:
        out.print(leaderboard_table(result.leaderboard))
        err.print(f"leaderboard: {result.files['markdown']}", highlight=False)
    if result.failures:
        raise _Failures(result.failures)


class _Failures(UserError):
    """Methods that failed on a regime: one line each (the CLI prints every line)."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


def add_bench_command(app: typer.Typer) -> None:
    """Register `cotcredit bench` on `app`."""
    app.command("bench", help=HELP)(with_options(options=BenchOptions, model=ModelOptions,
                                                 inputs=FieldOptions)(bench))
