"""The Python API: one function per command, doing exactly what the command does, and `score`,
which runs any registered method (the method commands are calls of it).

The command line parses its options into the same option objects and calls these functions;
what it adds is printing. Analysis functions return the run's `RunSummary` (counts, notes,
output tables; `.frame()` reads the rows)::

    import cotcredit
    from cotcredit.methods.rredcot import RredcotOptions

    run = cotcredit.redistribute("traces.jsonl", "rredcot.parquet",
                                 options=RredcotOptions(value="rhat"))  # default: R̂ + v̂
    df = run.frame()                      # the same as pd.read_parquet("rredcot.parquet")
    cotcredit.score("traces.jsonl", "attr.parquet", methods=["loo", "shapley"])  # any method
    report = cotcredit.compare(methods="rredcot,mc,loo")   # the tables in the folder

Without an output path an analysis keeps its rows in memory (`frame()` still works). `traces`
is any input the commands read (JSONL, gzip, JSON, Parquet, a `datasets` folder or id; see
`readers`) or a list of `Trace`s; `inputs=InputOptions(preset="processbench", split="test")`
says how to read it, as the command's flags do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cotcredit.errors import UserError
from cotcredit.lm.loading import ModelOptions, model_location
from cotcredit.methods import get_method, registry
from cotcredit.pipeline.inputs import InputOptions, check_inputs
from cotcredit.pipeline.run import SEGMENTS, RunSummary, run_analysis

if TYPE_CHECKING:  # (torch-free import: the model stack loads with the model)
    from cotcredit.data.trace import Trace
    from cotcredit.lm import Scorer
    from cotcredit.segmentation import SegmentOptions

    Model = str | Path | Scorer | ModelOptions | None
    Traces = str | Path | Sequence[Trace]


def scorer_for(model: Model, progress: bool = False) -> Scorer:
    """A loaded scorer for a model name, path, `ModelOptions` or scorer (None: embedded);
    `progress` shows "loading model" on a terminal's stderr while it loads. A `--model` path
    that does not exist fails here, before torch and transformers are imported."""
    if model is None or isinstance(model, (str, Path)):
        model = ModelOptions(model=None if model is None else str(model))
    if not isinstance(model, ModelOptions):
        return model  # a loaded Scorer
    if model.model is not None:
        model_location(model.model)
    from cotcredit.lm import load_scorer

    if not progress:
        return load_scorer(model)
    from rich.console import Console

    with Console(stderr=True).status("loading model"):
        return load_scorer(model)


def _run(
    traces: Traces,
    methods: Mapping[str, Any],
    output: str | Path | None,
    *,
    model: Model,
    segment_options: SegmentOptions | None,
    segments_file: str | Path | None,
    inputs: InputOptions | None,
    overwrite: bool,
    progress: bool,
    timings: bool,
    rename: Mapping[str, str] | None = None,
) -> RunSummary:
    labels = [SEGMENTS] if not methods else list(methods)
    outputs = {label: output for label in labels} if output else {}
    check_inputs(traces, methods=methods, segment_options=segment_options,
                 segments_file=segments_file, inputs=inputs)  # before the model loads
    return run_analysis(
        traces, scorer_for(model, progress), methods=dict(methods),
        segment_options=segment_options,
        segments_file=segments_file, outputs=outputs, inputs=inputs, overwrite=overwrite,
        progress=progress, timings=timings, rename=rename,
    )


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
    return _run(traces, {}, output, model=model, segment_options=options, segments_file=None,
                inputs=inputs, overwrite=overwrite, progress=progress, timings=timings)


def score(
    traces: Traces,
    output: str | Path | None = None,
    *,
    methods: str | Sequence[str] | Mapping[str, Any],
    segment_options: SegmentOptions | None = None,
    segments_file: str | Path | None = None,
    model: Model = None,
    inputs: InputOptions | None = None,
    overwrite: bool = False,
    progress: bool = False,
    timings: bool = False,
    label: str | None = None,
    command: str | None = None,
) -> RunSummary:
    """Run any registered methods (``cotcredit.methods.registry``) on one segmentation of each
    trace, their rows into one table: what every method command does.

    ``methods``: a method name, several (default options each), or name -> options (None:
    defaults), e.g. ``{"rredcot": RredcotOptions(value="rhat")}``. ``label`` (one method): the
    method label of its rows (e.g. "rredcot-rhat" for a variant compared with others).
    ``command``: the methods must be those of this command (``MethodSpec.command``), as on its
    command line. With ``overwrite``, what a method keeps beside its table is replaced too
    (``MethodSpec.overwrite``: mc's rollouts table). Other arguments as ``segment``.
    """
    if isinstance(methods, str):
        methods = [methods]
    if not isinstance(methods, Mapping):
        methods = {name: None for name in methods}
    if command is not None:
        allowed = [n for n, s in registry().items() if s.command and s.command.name == command]
        bad = [m for m in methods if m not in allowed]
        if bad or not methods:
            raise UserError(
                f"--method: unknown method '{','.join(bad)}' (use a comma-separated list of "
                f"{', '.join(allowed)})"
            )
    if overwrite:
        for name, options in methods.items():
            spec = get_method(name)
            spec.overwrite(options if options is not None else spec.options_type())
    if label and len(methods) != 1:
        raise UserError("--label names the rows of one method; give one method")
    rename = {next(iter(methods)): label} if label else None
    return _run(traces, methods, output, model=model, segment_options=segment_options,
                segments_file=segments_file, inputs=inputs, overwrite=overwrite,
                progress=progress, timings=timings, rename=rename)


def redistribute(
    traces: Traces,
    output: str | Path | None = None,
    *,
    options: Any = None,
    label: str | None = None,
    **run: Any,
) -> RunSummary:
    """`cotcredit redistribute`: RREDCoT segment rewards (`methods.rredcot.RredcotOptions`);
    `label` names the rows' method (e.g. "rredcot-rhat" for a variant compared with others).
    Other keyword arguments as `score` (segment_options, segments_file, model, inputs,
    overwrite, progress, timings)."""
    return score(traces, output, methods={"rredcot": options}, label=label, **run)


def mc_baseline(
    traces: Traces,
    output: str | Path | None = None,
    *,
    options: Any = None,
    label: str | None = None,
    **run: Any,
) -> RunSummary:
    """`cotcredit mc-baseline`: Monte Carlo rollout values (`methods.mc.McOptions`). With
    `overwrite`, the rollouts table of `options.save_rollouts` is replaced too. Other keyword
    arguments as `score`."""
    return score(traces, output, methods={"mc": options}, label=label, **run)


ATTRIBUTION_METHODS = ("loo", "shapley", "gradient")


def attribute(
    traces: Traces,
    output: str | Path | None = None,
    *,
    methods: Mapping[str, Any] | Sequence[str] = ("loo", "shapley"),
    **run: Any,
) -> RunSummary:
    """`cotcredit attribute`: leave-one-out, Shapley and gradient attribution into one table;
    `methods` is a list of names (default options) or a mapping name -> options. Other
    keyword arguments as `score`."""
    return score(traces, output, methods=methods, command="attribute", **run)
