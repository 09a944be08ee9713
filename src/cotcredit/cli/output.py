"""What the command line prints, and the parameters every analysis command shares.

Tables go to standard output (`out`), messages and summaries to standard error (`err`), one line
per message even when piped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cotcredit.errors import UserError

out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages stay one line when piped
# Columns a table may take when printed to a file or pipe: there is no screen to fit, and rich's
# default of 80 would cut cells ("Spearm…"); tables still take only their natural width.
PIPED_WIDTH = 1000


def fit_consoles() -> None:
    """Let tables printed to a non-terminal take their natural width (COLUMNS still wins)."""
    import os

    for console in (out, err):
        if not console.is_terminal and not os.environ.get("COLUMNS"):
            console.width = PIPED_WIDTH


# What every analysis command takes besides its options classes.
Traces = Annotated[Path, typer.Argument(
    help="Traces: JSONL (.jsonl, .jsonl.gz), JSON list, Parquet file or folder, a datasets "
    "folder (save_to_disk), or a Hugging Face dataset id (with --split/--subset).")]
SegmentsFile = Annotated[
    Path | None,
    typer.Option(help="Reuse a segmentation written by `cotcredit segment` instead of segmenting."),
]
Overwrite = Annotated[bool, typer.Option(help="Replace an existing output instead of resuming it.")]
Timings = Annotated[
    bool, typer.Option(help="Add cost_seconds (wall seconds per trace and method) to the tables.")
]
Label = Annotated[
    str | None,
    typer.Option(help="Method label of the rows (e.g. rredcot-rhat, to compare a variant)."),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or summary.")]


def output_option(what: str = "Parquet table to write (resumed if it exists).") -> type:
    """The `-o/--output` parameter (its default is the command function's)."""
    return Annotated[Path, typer.Option("-o", "--output", help=what)]


def show_option(what: str) -> type:
    """The `--show` parameter: print one trace's `what` after the run."""
    return Annotated[
        str | None, typer.Option("--show", help=f"Print one trace's {what} (trace id, or 'first').")
    ]


def report_skipped(notes: list[str], errors: list[str], what: str, count_rest: bool = True
                   ) -> None:
    """Print notes said once and the first 20 skipped inputs (`what`: "trace(s)", ...), with
    how many more there were when `count_rest`."""
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    if errors:
        err.print(f"skipped {len(errors)} {what}:")
        for e in errors[:20]:
            err.print(f"  {e}", markup=False, highlight=False)
        if count_rest and len(errors) > 20:
            err.print(f"  ... and {len(errors) - 20} more")


def report_run(summary, quiet: bool) -> None:
    """Print a run's notes, skipped traces and (unless `quiet`) its counts."""
    if not summary.main:  # launched: the main process reports for every process
        return
    report_skipped(summary.notes, summary.errors, "trace(s)")
    if quiet:
        return
    paths = ", ".join(sorted({str(p) for p in summary.outputs.values()}))
    err.print(
        f"{len(summary.scored)} trace(s) scored, {len(summary.resumed)} already done, "
        f"{len(summary.errors)} skipped in {summary.seconds:.1f} s -> {paths}",
        highlight=False,
    )


def show_trace(summary, labels: list[str], show: str | None, columns: list[str]) -> None:
    """Print one trace of this run: its segments with `columns` (a label's score when the
    column is a row label)."""
    if not show or not summary.main or not summary.scored:
        return
    tid = summary.scored[0] if show == "first" else show
    if tid not in summary.scored:
        raise UserError(f"--show {tid}: no such trace in this run")
    merged: dict[int, dict] = {}
    for label in labels:
        for r in summary.read_rows(label, trace_id=tid):
            row = merged.setdefault(r["segment"], dict(r))
            row[label] = r.get("score")
    table = Table(title=f"trace {tid}", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("tokens", justify="right")
    for c in columns:
        table.add_column(c, justify="right")
    table.add_column("text", overflow="fold")
    for seg in sorted(merged):
        r = merged[seg]
        cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, ""))
                 for c in columns]
        table.add_row(str(seg), str(r["n_tokens"]), *cells, r["text"].replace("\n", "⏎ ")[:160])
    out.print(table)


