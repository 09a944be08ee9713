"""The `cotcredit` command line: parse options, call the Python API of the same name, print.

Every option comes from an options dataclass (`options.with_options`); the method commands are
made from the method specs (`command_function`: each `MethodCommand` becomes `cotcredit NAME
TRACES -o OUTPUT` with the parameters every analysis command takes and its methods' options,
`--label` for a command of one method, `--method` for a shared one). Tables go to standard
output (`out`), messages and summaries to standard error (`err`), one line per message even
when piped. A user's mistake prints one line `error: file:line: reason` and exits with status
2; finished traces are on disk whenever a run stops. (`cotcredit bench` is added by
`cotcredit.cli`.)
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cotcredit.data.problems import ProblemInputOptions
from cotcredit.data.trace import FieldOptions
from cotcredit.errors import UserError
from cotcredit.lm.loading import ModelOptions
from cotcredit.methods import MethodCommand, MethodSpec, method_commands
from cotcredit.options import check_choices, comma_list, with_options
from cotcredit.pipeline.export import ExportOptions
from cotcredit.pipeline.generate import GenerateOptions
from cotcredit.pipeline.run import SEGMENTS, InputOptions, score
from cotcredit.report.compare import ReportOptions, Shortcuts
from cotcredit.segmentation import SegmentOptions

# ---- what the command line prints, and what every analysis command takes ---------------------
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


# ---- the method commands, made from the method specs -----------------------------------------
def _keyword(spec: MethodSpec) -> str:
    """The Python keyword a method's options take in its command function."""
    return spec.name.replace("-", "_")


def _signature(command: MethodCommand, shared: bool) -> inspect.Signature:
    """The command's own parameters (the options classes' come from `with_options`)."""
    p = inspect.Parameter
    params = [
        p("traces", p.POSITIONAL_OR_KEYWORD, annotation=Traces),
        p("output", p.POSITIONAL_OR_KEYWORD, default=Path(command.default_output),
          annotation=output_option()),
    ]
    if shared:
        params.append(p("method", p.POSITIONAL_OR_KEYWORD, default=command.default_methods,
                        annotation=Annotated[str, typer.Option(
                            "--method", help=command.method_help)]))
    params += [
        p("segments_file", p.POSITIONAL_OR_KEYWORD, default=None,
          annotation=SegmentsFile),
        p("show", p.POSITIONAL_OR_KEYWORD, default=None,
          annotation=show_option(command.show)),
    ]
    if not shared:
        params.append(p("label", p.POSITIONAL_OR_KEYWORD, default=None,
                          annotation=Label))
    params += [
        p("overwrite", p.POSITIONAL_OR_KEYWORD, default=False, annotation=Overwrite),
        p("timings", p.POSITIONAL_OR_KEYWORD, default=False, annotation=Timings),
        p("quiet", p.POSITIONAL_OR_KEYWORD, default=False, annotation=Quiet),
    ]
    return inspect.Signature(params)


def command_function(command: MethodCommand, specs: list[MethodSpec]):
    """The Typer command function of `command` (not yet registered)."""
    shared = len(specs) > 1

    def run(*, traces: Path, output: Path, segments_file: Path | None, show: str | None,
            overwrite: bool, timings: bool, quiet: bool, inputs: InputOptions,
            model: ModelOptions, segment: SegmentOptions, method: str = "",
            label: str | None = None, **options: Any) -> None:
        given = {spec.name: options[_keyword(spec)] for spec in specs}
        if shared:
            names = comma_list(method)
            methods = {name: given.get(name) for name in names}
        else:
            methods = given
        summary = score(
            traces, output, methods=methods, command=command.name, segment_options=segment,
            segments_file=segments_file, model=model, inputs=inputs, overwrite=overwrite,
            progress=not quiet, timings=timings, label=label,
        )
        report_run(summary, quiet)
        if shared:
            labels = [lab for lab in summary.paths if lab != SEGMENTS]
            show_trace(summary, labels, show, labels)
            return
        spec = specs[0]
        row_label = label or spec.name
        if spec.summary is not None and summary.main and summary.scored and not quiet:
            table = spec.summary(summary, row_label, given[spec.name])
            if table is not None:
                err.print(table)
        show_trace(summary, [row_label], show, list(spec.show))

    run.__name__ = command.name.replace("-", "_")
    run.__doc__ = command.help
    run.__signature__ = _signature(command, shared)  # type: ignore[attr-defined]
    groups = {"inputs": InputOptions, "model": ModelOptions, "segment": SegmentOptions,
              **{_keyword(spec): spec.options_type for spec in specs}}
    return with_options(**groups)(run)


def add_method_commands(app: typer.Typer) -> None:
    """Register one command per `MethodCommand` of the registry on `app`. A command whose
    options clash with the command's own parameters (a method from another package naming
    an option `output`, say) is left out with a warning: the other commands still work."""
    for name, (command, specs) in method_commands().items():
        try:
            function = command_function(command, specs)
        except TypeError as e:
            warnings.warn(f"command {name} left out: {e}", stacklevel=2)
            continue
        app.command(name, help=command.help)(function)


app = typer.Typer(
    name="cotcredit",
    help="Credit assignment on chain-of-thought traces: RREDCoT and its baselines.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
# ---- analysis commands -----------------------------------------------------------------------
@app.command()
@with_options(inputs=InputOptions, model=ModelOptions, segment=SegmentOptions)
def segment(
    traces: Traces,
    output: output_option() = Path("segments.parquet"),
    show: show_option("segments") = None,
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
    report_run(summary, quiet)
    show_trace(summary, [SEGMENTS], show, ["boundary_entropy", "mean_entropy"])


# The method commands (redistribute, mc-baseline, attribute, ...), made from the method specs.
add_method_commands(app)


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
    report.tex (booktabs tables), figures (PNG and PDF) and explorer.html (every trace with its
    credit, to browse in a browser) into the output folder, and prints a summary table.
    """
    import cotcredit

    kwargs = dict(methods=methods, output=output, report=report)
    if scores or not files:
        if scores and not files:
            raise UserError("compare --scores: name the score tables, or leave out --scores to "
                            "use the tables in --dir")
        result = cotcredit.compare(scores=files or None, folder=dir_, inputs=inputs, **kwargs)
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
        report_run(result.run, quiet)
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
    if result.explorer is not None:
        err.print(f"explorer: {result.explorer.path}", highlight=False)
        if result.explorer.note:
            err.print(result.explorer.note, markup=False, highlight=False)


# ---- other commands --------------------------------------------------------------------------
@app.command()
@with_options(fields=FieldOptions, options=ExportOptions,
              exclude=("solution_field", "outcome_field", "preset", "messages_field",
                       "steps_field", "label_field", "error_field"))
def export(
    scores: Annotated[Path, typer.Argument(help="Score table (Parquet file or table folder).")],
    output: output_option("JSON Lines file to write.") = Path("prm.jsonl"),
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
    output: output_option("JSONL file of traces to append to (resumed if it exists).")
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
    if not summary.main:  # launched: the main process reports for every one
        return
    report_skipped(summary.notes, summary.errors, "problem(s)", count_rest=False)
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
    fit_consoles()
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
