"""Python API: the same operations as the command line, returning pandas DataFrames."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from cotcredit.io import read_table
from cotcredit.lm import ModelOptions, Scorer, load_scorer
from cotcredit.pipeline import SEGMENTS, InputOptions, RunSummary, run_analysis
from cotcredit.segmentation import SegmentOptions
from cotcredit.traces import Trace


def _scorer(model: str | Path | Scorer | ModelOptions | None) -> Scorer:
    if isinstance(model, Scorer):
        return model
    if isinstance(model, ModelOptions):
        return load_scorer(model)
    return load_scorer(ModelOptions(model=None if model is None else str(model)))


def _frame(summary: RunSummary, label: str) -> pd.DataFrame:
    path = summary.outputs.get(label)
    if path is not None and path.exists():
        return read_table(path).to_pandas()
    return pd.DataFrame(summary.rows.get(label, []))


def segment(
    traces: str | Path | Sequence[Trace],
    output: str | Path | None = None,
    *,
    model: str | Scorer | ModelOptions | None = None,
    options: SegmentOptions | None = None,
    inputs: InputOptions | None = None,
    overwrite: bool = False,
    **segment_kwargs,
) -> pd.DataFrame:
    """Segment traces (hybrid keyword–entropy); one row per segment. Writes `output` if given.

    Keyword arguments override `SegmentOptions` fields (segments=, merge=, min_tokens=, ...).
    """
    options = SegmentOptions(**{**(options.__dict__ if options else {}), **segment_kwargs})
    outputs = {SEGMENTS: output} if output else {}
    summary = run_analysis(
        traces,
        _scorer(model),
        segment_options=options,
        outputs=outputs,
        inputs=inputs,
        overwrite=overwrite,
    )
    return _frame(summary, SEGMENTS)


def score(
    traces: str | Path | Sequence[Trace],
    methods: dict[str, object],
    output: str | Path | None = None,
    *,
    model: str | Scorer | ModelOptions | None = None,
    segment_options: SegmentOptions | None = None,
    segments_file: str | Path | None = None,
    inputs: InputOptions | None = None,
    overwrite: bool = False,
) -> pd.DataFrame:
    """Run methods (name -> options or None) on one shared segmentation; rows of all methods."""
    outputs = {name: output for name in methods} if output else {}
    summary = run_analysis(
        traces,
        _scorer(model),
        methods=methods,
        segment_options=segment_options,
        segments_file=segments_file,
        outputs=outputs,
        inputs=inputs,
        overwrite=overwrite,
    )
    if output:
        return read_table(output).to_pandas()
    return pd.DataFrame([r for lab, rs in summary.rows.items() if lab != SEGMENTS for r in rs])


def redistribute(traces, output=None, *, options=None, **kwargs) -> pd.DataFrame:
    """RREDCoT segment rewards (see `cotcredit.methods.rredcot`)."""
    from cotcredit.methods.rredcot import RredcotOptions

    return score(traces, {"rredcot": options or RredcotOptions()}, output, **kwargs)


def mc_baseline(traces, output=None, *, options=None, **kwargs) -> pd.DataFrame:
    """Monte Carlo rollout values per segment (see `cotcredit.methods.mc`)."""
    from cotcredit.methods.mc import McOptions

    return score(traces, {"mc": options or McOptions()}, output, **kwargs)


def attribute(traces, output=None, *, methods: dict[str, object] | Sequence[str] = ("loo", "shapley"),
              **kwargs) -> pd.DataFrame:
    """Leave-one-out, Shapley and gradient attribution on the segments; `methods` is a list of
    names (default options) or a mapping name -> options."""
    if not isinstance(methods, dict):
        methods = {name: None for name in methods}
    return score(traces, methods, output, **kwargs)
