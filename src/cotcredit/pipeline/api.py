"""The Python API of the commands: `score` (any registered methods), `segment`, and one function
per method command, made from the registry. The command line calls these and adds printing.
Each returns the run's `RunSummary` (`.frame()` reads the rows)::

    import cotcredit
    from cotcredit.methods.rredcot import RredcotOptions

    run = cotcredit.redistribute("traces.jsonl", "rredcot.parquet",
                                 options=RredcotOptions(value="rhat"))  # default: R̂ + v̂
    df = run.frame()                      # the same as pd.read_parquet("rredcot.parquet")
    cotcredit.score("traces.jsonl", "attr.parquet", methods=["loo", "shapley"])  # any method
    report = cotcredit.compare(methods="rredcot,mc,loo")   # the tables in the folder

A method command's function is named after it (``mc-baseline``: ``mc_baseline``):
``NAME(traces, output, options=..., label=...)``, or ``NAME(traces, output, methods=...)`` for a
shared command (``attribute``). Without an output path the rows stay in memory. `traces` is any
input the commands read or a list of `Trace`s; `inputs=InputOptions(...)` says how to read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cotcredit.methods import MethodCommand, MethodSpec, method_commands
from cotcredit.options import comma_list
from cotcredit.pipeline.run import InputOptions, RunSummary, score, scorer_for

if TYPE_CHECKING:
    from cotcredit.pipeline.run import Model, Traces
    from cotcredit.segmentation import SegmentOptions

__all__ = ["command_function", "command_functions", "score", "scorer_for", "segment"]


def segment(
    traces: Traces,
    output: str | Path | None = None,
    *,
    options: SegmentOptions | None = None,
    model: Model = None,
    inputs: InputOptions | None = None,
    overwrite: bool = False,
    progress: bool = False,
    timings: bool = False,
) -> RunSummary:
    """`cotcredit segment`: hybrid keyword–entropy segmentation, one row per segment."""
    return score(traces, output, methods={}, segment_options=options, model=model,
                 inputs=inputs, overwrite=overwrite, progress=progress, timings=timings)


def command_functions() -> dict[str, Callable[..., RunSummary]]:
    """Python name -> function of every method command of the registry, in registry order."""
    return {python_name(name): command_function(command, specs)
            for name, (command, specs) in method_commands().items()}


def python_name(command: str) -> str:
    """The Python name of a command's function (``mc-baseline``: ``mc_baseline``)."""
    return command.replace("-", "_")


def command_function(command: MethodCommand, specs: Sequence[MethodSpec]
                     ) -> Callable[..., RunSummary]:
    """The function of `command`, whose methods are `specs`: `score` with its methods."""
    summary = command.help.split("\n\n", 1)[0].replace("\n", " ")
    if len(specs) == 1:
        name = specs[0].name

        def run(traces: Traces, output: str | Path | None = None, *, options: Any = None,
                label: str | None = None, **kwargs: Any) -> RunSummary:
            return score(traces, output, methods={name: options}, label=label,
                         command=command.name, **kwargs)

        run.__doc__ = (
            f"`cotcredit {command.name}`: {summary}\n\n`options`: a "
            f"`{specs[0].options_type.__name__}` (None: defaults); `label`: the rows' method "
            "label (e.g. a variant's). Other keyword arguments as `score` (segment_options, "
            "segments_file, model, inputs, overwrite, progress, timings)."
        )
    else:
        default = tuple(comma_list(command.default_methods))

        def run(traces: Traces, output: str | Path | None = None, *,
                methods: Mapping[str, Any] | Sequence[str] = default,
                **kwargs: Any) -> RunSummary:
            return score(traces, output, methods=methods, command=command.name, **kwargs)

        run.__doc__ = (
            f"`cotcredit {command.name}`: {summary}\n\n`methods`: names (default options) or "
            f"name -> options, among {', '.join(s.name for s in specs)} (default: "
            f"{', '.join(default)}). Other keyword arguments as `score`."
        )
    run.__name__ = run.__qualname__ = python_name(command.name)
    run.__module__ = __name__
    return run


def __getattr__(name: str) -> Callable[..., RunSummary]:
    """The function of a method command (``cotcredit.pipeline.api.redistribute``)."""
    functions = command_functions()
    if name in functions:
        return functions[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *command_functions()})
