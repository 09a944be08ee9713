"""The `cotcredit` command line: parse options, call the Python API of the same name, print.

Every option comes from an options dataclass (`cli_params.with_options`), where its default and
help are written once. User mistakes print one line `error: file:line: reason` and exit with
status 2; finished traces are already on disk when a run stops for any reason.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cotcredit.cli_params import with_options
from cotcredit.comparison import ReportOptions, Shortcuts
from cotcredit.errors import UserError
from cotcredit.exports import ExportOptions
from cotcredit.lm.loading import ModelOptions
from cotcredit.methods.gradient import GradientOptions
from cotcredit.methods.loo import LooOptions
from cotcredit.methods.mc import McOptions
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.methods.shapley import ShapleyOptions
from cotcredit.options import check_choices
from cotcredit.pipeline import SEGMENTS, InputOptions
from cotcredit.problems import GenerateOptions, ProblemInputOptions
from cotcredit.segmentation import SegmentOptions
from cotcredit.traces import FieldOptions

app = typer.Typer(
    name="cotcredit",
    help="Credit assignment on chain-of-thought traces: RREDCoT and its baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
out = Console()
err = Console(stderr=True, soft_wrap=True)  # messages stay one line when piped
# Columns a table may take when printed to a file or pipe: there is no screen to fit, and rich's
# default of 80 would cut cells ("Spearm…"); tables still take only their natural width.
PIPED_WIDTH = 1000


def _fit_consoles() -> None:
    """Let tables printed to a non-terminal take their natural width (COLUMNS still wins)."""
    import os

    for console in (out, err):
        if not console.is_terminal and not os.environ.get("COLUMNS"):
            console.width = PIPED_WIDTH

# ---- what every analysis command takes besides its options classes --------------------------
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


def _output(default: str, what: str = "Parquet table to write (resumed if it exists).") -> type:
    return Annotated[Path, typer.Option("-o", "--output", help=what)]


def _show_option(what: str) -> type:
    return Annotated[
        str | None, typer.Option("--show", help=f"Print one trace's {what} (trace id, or 'first').")
    ]


def _report(summary, quiet: bool) -> None:
    if not summary.main:  # launched: the main process reports for every process
        return
    for note in summary.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    if summary.errors:
        err.print(f"skipped {len(summary.errors)} trace(s):")
        for e in summary.errors[:20]:
            err.print(f"  {e}", markup=False, highlight=False)
        if len(summary.errors) > 20:
            err.print(f"  ... and {len(summary.errors) - 20} more")
    if quiet:
        return
    paths = ", ".join(sorted({str(p) for p in summary.outputs.values()}))
    err.print(
        f"{len(summary.scored)} trace(s) scored, {len(summary.resumed)} already done, "
        f"{len(summary.errors)} skipped in {summary.seconds:.1f} s -> {paths}",
        highlight=False,
    )


def _show(summary, labels: list[str], show: str | None, columns: list[str]) -> None:
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
        cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in columns]
        table.add_row(str(seg), str(r["n_tokens"]), *cells, r["text"].replace("\n", "⏎ ")[:160])
    out.print(table)


# ---- analysis commands ----------------------------------------------------------------------
@app.command()
@with_options(inputs=InputOptions, model=ModelOptions, segment=SegmentOptions)
def segment(
    traces: Traces,
    output: _output("segments.parquet") = Path("segments.parquet"),
    show: _show_option("segments") = None,
    overwrite: Overwrite = False,
    timings: Timings = False,
    quiet: Quiet = False,
    *, inputs: InputOptions, model: ModelOptions, segment: SegmentOptions,
) -> None:
    """Cut each trace's reasoning into segments (hybrid keyword-entropy) and write them."""
    import cotcredit

    summary = cotcredit.segment(traces, output, options=segment, model=model,
                                inputs=inputs, overwrite=overwrite, progress=not quiet,
                                timings=timings)
    _report(summary, quiet)
    _show(summary, [SEGMENTS], show, ["boundary_entropy", "mean_entropy"])


@app.command()
@with_options(inputs=InputOptions, model=ModelOptions, segment=SegmentOptions,
              rredcot=RredcotOptions)
def redistribute(
    traces: Traces,
    output: _output("rredcot.parquet") = Path("rredcot.parquet"),
    segments_file: SegmentsFile = None,
    show: _show_option("rewards") = None,
    label: Label = None,
    overwrite: Overwrite = False,
    timings: Timings = False,
    quiet: Quiet = False,
    *, inputs: InputOptions, model: ModelOptions, segment: SegmentOptions,
    rredcot: RredcotOptions,
) -> None:
    """RREDCoT: redistribute each trace's outcome over its reasoning segments.

    At every boundary k the model gives R̂_k = log p(Y* | s_k + E) and, with a reference solution
    U*, v̂_k = log p(U* | s_k + C) + log p(Y* | s_k + C + U* + E). Both are computed in log space;
    by default they are combined as probabilities, g_k = exp(R̂_k) + exp(v̂_k), and the reward of
    segment k is r_k = g_k - g_(k-1); the last segment absorbs the outcome - g_K so rewards sum
    to the outcome.
    """
    import cotcredit

    summary = cotcredit.redistribute(
        traces, output, options=rredcot, segment_options=segment, segments_file=segments_file,
        model=model, inputs=inputs, overwrite=overwrite, progress=not quiet,
        timings=timings, label=label,
    )
    _report(summary, quiet)
    _show(summary, [label or "rredcot"], show, ["r_hat", "v_hat", "g_after", "score"])


@app.command("mc-baseline")
@with_options(inputs=InputOptions, model=ModelOptions, segment=SegmentOptions, mc=McOptions)
def mc_baseline(
    traces: Traces,
    output: _output("mc.parquet") = Path("mc.parquet"),
    segments_file: SegmentsFile = None,
    show: _show_option("values") = None,
    label: Label = None,
    overwrite: Overwrite = False,
    timings: Timings = False,
    quiet: Quiet = False,
    *, inputs: InputOptions, model: ModelOptions, segment: SegmentOptions, mc: McOptions,
) -> None:
    """Monte Carlo values: from every segment boundary sample N completions and grade them.

    V_k = fraction of the N rollouts from state s_k (prompt + segments 1..k) whose final answer
    matches the reference (math-verify), stderr = sqrt(V_k (1 - V_k) / N); the credit of segment
    k is V_k - V_(k-1), so a trace's credits sum to V_K - V_0.
    """
    import cotcredit

    summary = cotcredit.mc_baseline(
        traces, output, options=mc, segment_options=segment, segments_file=segments_file,
        model=model, inputs=inputs, overwrite=overwrite, progress=not quiet,
        timings=timings, label=label,
    )
    _report(summary, quiet)
    if summary.main and summary.scored and not quiet:
        _mc_summary(summary, label or "mc", mc.truncated)
    _show(summary, [label or "mc"], show,
          ["value_before", "value_after", "stderr", "n_correct", "n_truncated", "score"])


def _mc_summary(summary, label: str, policy: str) -> None:
    columns = ["trace_id", "segment", "value_before", "value_after", "trace_rollouts",
               "trace_truncated"]
    rows = summary.read_rows(label, columns=columns)
    first, last = {}, {}
    for r in rows:
        first.setdefault(r["trace_id"], r)
        last[r["trace_id"]] = r
    n = sum(r["trace_rollouts"] for r in first.values())
    cut = sum(r["trace_truncated"] for r in first.values())
    table = Table(title="mc-baseline")
    for c in ("traces", "rollouts", "truncated", "policy", "mean V_0", "mean V_K"):
        table.add_column(c, justify="right")
    v0 = [r["value_before"] for r in first.values()]
    vk = [r["value_after"] for r in last.values()]
    table.add_row(str(len(first)), str(n), f"{cut} ({cut / n:.1%})" if n else "0", policy,
                  f"{sum(v0) / len(v0):.3f}", f"{sum(vk) / len(vk):.3f}")
    err.print(table)


@app.command()
@with_options(inputs=InputOptions, model=ModelOptions, segment=SegmentOptions, loo=LooOptions,
              shapley=ShapleyOptions, gradient=GradientOptions)
def attribute(
    traces: Traces,
    output: _output("attr.parquet") = Path("attr.parquet"),
    method: Annotated[
        str,
        typer.Option("--method", help="Comma-separated: loo (f(all) - f(all but k)), shapley "
                     "(Shapley values), gradient (captum on input embeddings). All write into "
                     "one table."),
    ] = "loo,shapley",
    segments_file: SegmentsFile = None,
    show: _show_option("scores") = None,
    overwrite: Overwrite = False,
    timings: Timings = False,
    quiet: Quiet = False,
    *, inputs: InputOptions, model: ModelOptions, segment: SegmentOptions, loo: LooOptions,
    shapley: ShapleyOptions, gradient: GradientOptions,
) -> None:
    """Attribute f = log p(Y* | prompt + reasoning + E) to the reasoning segments.

    A segment is absent by deletion of its tokens (or replacement by --baseline-text). loo:
    f(all) - f(all but k), positive = the segment helped the answer. shapley: Shapley values
    of the segments (they sum to f(all) - f(none)). gradient: captum attributions on the input
    embeddings, summed per segment (signed), with their L2 norm and the IG convergence delta.
    """
    import cotcredit

    given = {"loo": loo, "shapley": shapley, "gradient": gradient}
    names = list(dict.fromkeys(m.strip() for m in method.split(",") if m.strip()))
    methods = {name: given.get(name) for name in names}
    summary = cotcredit.attribute(
        traces, output, methods=methods, segment_options=segment, segments_file=segments_file,
        model=model, inputs=inputs, overwrite=overwrite, progress=not quiet,
        timings=timings,
    )
    _report(summary, quiet)
    labels = [lab for lab in summary.paths if lab != SEGMENTS]
    _show(summary, labels, show, labels)


@app.command()
@with_options(inputs=InputOptions, model=ModelOptions, segment=SegmentOptions,
              report=ReportOptions, shortcuts=Shortcuts)
def compare(
    files: Annotated[
        list[Path] | None,
        typer.Argument(metavar="[TRACES | SCORES...]",
                       help="A JSONL file of traces (runs the methods), or with --scores: score "
                       "tables. None: the score tables in --dir."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output",
                     help="Report folder [default: report, or DIR/report without inputs]."),
    ] = None,
    methods: Annotated[
        str, typer.Option("--methods", help="Comma-separated methods: rredcot, mc, loo, shapley, "
                          "gradient (or gradient-ig, ..., or a --label given to a run).")
    ] = "rredcot,mc,loo",
    scores: Annotated[
        bool, typer.Option("--scores", help="Correlate the score tables given as inputs.")
    ] = False,
    dir_: Annotated[
        Path, typer.Option("--dir", help="Without inputs: the folder whose score tables "
                           "(rredcot.parquet, mc.parquet, attr.parquet, ...) are compared.")
    ] = Path("."),
    config: Annotated[
        Path | None,
        typer.Option(help="YAML/TOML/JSON file of method options: {mc: {rollouts: 8}, rredcot: "
                     "{value: rhat}}."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="METHOD.OPTION=VALUE, repeatable (e.g. --set mc.rollouts=4)."),
    ] = None,
    segments_file: SegmentsFile = None,
    overwrite: Overwrite = False,
    timings: Timings = False,
    quiet: Quiet = False,
    *, inputs: InputOptions, model: ModelOptions, segment: SegmentOptions,
    report: ReportOptions, shortcuts: Shortcuts,
) -> None:
    """Correlate several methods' scores on one segmentation and write a report.

    Without inputs, compares the score tables the per-method commands wrote in the current
    folder (or --dir); with a traces file, runs the methods first; with --scores, reads the
    named score tables. Writes correlations.parquet, report.md, a self-contained report.html,
    report.tex (booktabs tables) and figures (PNG and PDF) into the output folder, and prints a
    summary table.
    """
    import cotcredit

    kwargs = dict(methods=methods, output=output, report=report)
    if scores or not files:
        if scores and not files:
            raise UserError("compare --scores: name the score tables, or leave out --scores to "
                            "use the tables in --dir")
        result = cotcredit.compare(scores=files or None, folder=dir_, **kwargs)
    else:
        if len(files) != 1:
            raise UserError("compare: give one traces file, or --scores with score tables")
        short = {k: v for k, v in dataclasses.asdict(shortcuts).items() if v is not None}
        result = cotcredit.compare(
            files[0], model=model, config=config, sets=set_, shortcuts=short,
            segment_options=segment, segments_file=segments_file, inputs=inputs,
            overwrite=overwrite, progress=not quiet, timings=timings, **kwargs,
        )
        if result is None:  # launched: the main process reports
            return
        _report(result.run, quiet)
    if quiet:
        return
    from cotcredit.report import cost_table, summary_table, terminal

    for label, path in result.sources.items():
        err.print(f"{label}: {path}", markup=False, highlight=False)
    corr = result.correlations
    costs = result.costs()
    if corr.reference is None:
        out.print(summary_table(corr))
    for table in terminal.analysis_tables(corr, costs, result.localization, result.rollouts):
        out.print(table)
    if costs is not None:
        out.print(cost_table(costs))
    err.print(f"report: {result.files.html}", highlight=False)


# ---- other commands -------------------------------------------------------------------------
@app.command()
@with_options(fields=FieldOptions, options=ExportOptions,
              exclude=("solution_field", "outcome_field", "preset", "messages_field",
                       "steps_field", "label_field", "error_field"))
def export(
    scores: Annotated[Path, typer.Argument(help="Score table (Parquet file or table folder).")],
    output: _output("prm.jsonl", "JSON Lines file to write.") = Path("prm.jsonl"),
    traces: Annotated[
        Path | None, typer.Option(help="The traces JSONL the scores came from (for the prompts).")
    ] = None,
    *, fields: FieldOptions, options: ExportOptions,
) -> None:
    """Export one method's segment credits, e.g. as labels for a process reward model."""
    import cotcredit

    res = cotcredit.export(scores, output, traces=traces, options=options, fields=fields.names())
    err.print(f"{res.n_written} trace(s) of {res.method} -> {res.path}"
              + (f" ({len(res.skipped_nan)} left out: NaN scores)" if res.skipped_nan else ""),
              highlight=False)


@app.command("merge")
def merge_cmd(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="Tables written by the shards of one run (--shard i/n)."),
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="Table to write.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing output table.")] = False,
    quiet: Quiet = False,
) -> None:
    """Join shard outputs of one run into one table.

    Every input must hold the same run (one run_id: same model, segmentation, methods and
    options) and no trace may be in two inputs; anything else is refused. The run metadata is
    kept, with the list of merged files. Rows keep their values; only the file changes.
    """
    import cotcredit

    summary = cotcredit.merge(inputs, output, overwrite=overwrite)
    for note in summary.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    if not quiet:
        err.print(f"merged {len(summary.inputs)} file(s): {summary.traces} trace(s), "
                  f"{summary.rows} row(s) -> {summary.output}", markup=False, highlight=False)


@app.command()
@with_options(model=ModelOptions, inputs=ProblemInputOptions, options=GenerateOptions,
              exclude=("truncate", "response_field", "outcome_field", "messages_field",
                       "steps_field", "label_field", "error_field"))
def generate(
    problems: Annotated[
        Path,
        typer.Argument(help="Problems (prompt and reference answer, + solution, id): any input "
                       "the analysis commands read (JSONL, Parquet, a datasets folder or id)."),
    ],
    output: _output("traces.jsonl", "JSONL file of traces to append to (resumed if it exists).")
    = Path("traces.jsonl"),
    overwrite: Overwrite = False,
    quiet: Quiet = False,
    *, model: ModelOptions, inputs: ProblemInputOptions, options: GenerateOptions,
) -> None:
    """Sample graded reasoning traces from a problem set, as input for the other commands.

    Each response is graded against the reference answer (math-verify) and appended as a trace
    line (id '<problem id>-s<j>', prompt, response, answer, solution, correct, sampling
    metadata). A rerun skips problems already sampled.
    """
    import cotcredit

    check_choices(inputs)
    summary = cotcredit.generate(
        problems, output, model=model, options=options, fields=inputs.names(),
        on_error=inputs.on_error, max_problems=inputs.max_problems, overwrite=overwrite,
        progress=not quiet, split=inputs.split, subset=inputs.subset,
    )
    for note in summary.notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    if summary.errors:
        err.print(f"skipped {len(summary.errors)} problem(s):")
        for e in summary.errors[:20]:
            err.print(f"  {e}", markup=False, highlight=False)
    if summary.no_reasoning:
        err.print(f"note: {summary.no_reasoning} response(s) are empty or only state an answer; "
                  "the analysis commands reject them (use --on-error skip there)", highlight=False)
    if quiet:
        return
    table = Table(title=f"generate -> {output}")
    for c in ("problems", "sampled now", "resumed", "samples", "accuracy", "truncated", "seconds"):
        table.add_column(c, justify="right")
    s = summary
    table.add_row(
        str(s.problems), str(s.sampled), str(s.resumed), str(s.samples),
        f"{s.accuracy:.1%} ({s.correct})" if s.samples else "-",
        f"{s.truncated} ({s.truncated / s.samples:.1%})" if s.samples else "0",
        f"{s.seconds:.1f}",
    )
    err.print(table)


@app.command()
def train(
    config: Annotated[Path, typer.Argument(help="YAML config of the run (see examples/train/).")],
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from the last checkpoint in output_dir.")
    ] = False,
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Override grpo.max_steps of the config.")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Override the config's seed.")] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Delete checkpoints and logs already in output_dir, start over.")
    ] = False,
) -> None:
    """GRPO on a problem set, with plain (advantage: grpo) or RREDCoT token advantages.

    Writes checkpoints, metrics.jsonl, eval.json (accuracy before/after on eval_file),
    reward_curve.png and config.yaml to output_dir. Several GPUs:
    `accelerate launch -m cotcredit train config.yaml`.
    """
    import cotcredit

    result = cotcredit.train(config, resume=resume, max_steps=max_steps, seed=seed,
                             overwrite=overwrite)
    evaluation = ""
    if result.eval and result.eval.get("after"):
        before, after = result.eval["before"]["accuracy"], result.eval["after"]["accuracy"]
        evaluation = f", eval accuracy {before:.3f} -> {after:.3f}"
    err.print(f"trained to step {result.global_step} in {result.seconds:.0f} s{evaluation}; "
              f"outputs in {result.output_dir}", markup=False, highlight=False)


@app.command()
def version() -> None:
    """Print the cotcredit version."""
    from cotcredit.version import __version__

    out.print(__version__)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user errors into one line (or one line per problem)
    and exit status 2."""
    interrupted = "interrupted: finished traces are saved; rerun the same command to resume"
    _fit_consoles()
    try:
        rc = app(args=argv, standalone_mode=False)
    except UserError as e:
        for line in getattr(e, "lines", None) or [str(e)]:
            err.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print(interrupted)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # usage errors: typer vendors its own click (typer._click)
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.exit(130)
        raise
    # Not standalone, typer turns Ctrl-C into a *returned* 130.
    if rc == 130:
        err.print(interrupted)
    if isinstance(rc, int) and rc:
        sys.exit(rc)


if __name__ == "__main__":
    main()
