"""The method commands, made from the method specs: each `MethodCommand` becomes `cotcredit NAME
TRACES -o OUTPUT` with the parameters every analysis command takes and its methods' options
(`--label` for a command of one method, `--method` for a shared one). It calls
`cotcredit.score` and prints the run's summary.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Annotated, Any

import typer

from cotcredit.cli import output as cli_output
from cotcredit.cli.params import with_options
from cotcredit.lm.loading import ModelOptions
from cotcredit.methods import MethodCommand, MethodSpec, method_commands
from cotcredit.options import comma_list
from cotcredit.pipeline.inputs import InputOptions
from cotcredit.pipeline.run import SEGMENTS, score
from cotcredit.segmentation import SegmentOptions


def _keyword(spec: MethodSpec) -> str:
    """The Python keyword a method's options take in its command function."""
    return spec.name.replace("-", "_")


def _signature(command: MethodCommand, shared: bool) -> inspect.Signature:
    """The command's own parameters (the options classes' come from `with_options`)."""
    p = inspect.Parameter
    params = [
        p("traces", p.POSITIONAL_OR_KEYWORD, annotation=cli_output.Traces),
        p("output", p.POSITIONAL_OR_KEYWORD, default=Path(command.default_output),
          annotation=cli_output.output_option()),
    ]
    if shared:
        params.append(p("method", p.POSITIONAL_OR_KEYWORD, default=command.default_methods,
                        annotation=Annotated[str, typer.Option(
                            "--method", help=command.method_help)]))
    params += [
        p("segments_file", p.POSITIONAL_OR_KEYWORD, default=None,
          annotation=cli_output.SegmentsFile),
        p("show", p.POSITIONAL_OR_KEYWORD, default=None,
          annotation=cli_output.show_option(command.show)),
    ]
    if not shared:
        params.append(p("label", p.POSITIONAL_OR_KEYWORD, default=None,
                          annotation=cli_output.Label))
    params += [
        p("overwrite", p.POSITIONAL_OR_KEYWORD, default=False, annotation=cli_output.Overwrite),
        p("timings", p.POSITIONAL_OR_KEYWORD, default=False, annotation=cli_output.Timings),
        p("quiet", p.POSITIONAL_OR_KEYWORD, default=False, annotation=cli_output.Quiet),
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
        cli_output.report_run(summary, quiet)
        if shared:
            labels = [lab for lab in summary.paths if lab != SEGMENTS]
            cli_output.show_trace(summary, labels, show, labels)
            return
        spec = specs[0]
        row_label = label or spec.name
        if spec.summary is not None and summary.main and summary.scored and not quiet:
            table = spec.summary(summary, row_label, given[spec.name])
            if table is not None:
                cli_output.err.print(table)
        cli_output.show_trace(summary, [row_label], show, list(spec.show))

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
