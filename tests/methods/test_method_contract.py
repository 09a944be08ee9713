"""Every registered method (the package's and any registered by entry point) keeps the one
contract of the registry, checked the same way for all: one row per segment and label, the
declared columns and no other (in memory, where a row may leave a declared column out, and in
the Parquet table), the same numbers when run again, and for a value method, credits that are
differences of its values."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from cotcredit.errors import UserError
from cotcredit.methods import registry
from cotcredit.options import build_options
from cotcredit.pipeline.run import score
from cotcredit.pipeline.summary import SEGMENTS
from cotcredit.segmentation import SegmentOptions
from cotcredit.store.tables import table_schema

#: Sizes that keep every method quick on the tiny model, set where a method has the option.
TINY = {"rollouts": 2, "max_new_tokens": 6, "samples": 4, "steps": 4, "rollout_budget": 4}
SEGMENT_KEYS = ["trace_id", "segment", "char_start", "char_end"]


def tiny_options(spec):
    """The method's options with every `TINY` size it has."""
    given = {}
    for key, value in TINY.items():
        try:
            build_options(spec.options_type, {**given, key: value})
        except UserError:  # no such option
            continue
        given[key] = value
    return build_options(spec.options_type, given, spec.name)


def fitted_head(folder, traces, scorer, found):
    """Options of `value-head` (it cannot run on its defaults): a head fitted to the rows of
    the `mc` run above."""
    from cotcredit.methods.value_head import ValueHeadOptions
    from cotcredit.methods.value_head_fit import HeadSpec, fit_value_head

    mc = pd.DataFrame(found["mc"][2].rows["mc"])
    fit_value_head(traces, mc, scorer, folder / "head.pt", spec=HeadSpec("linear", l2=0.1),
                   folds=2)
    return ValueHeadOptions(str(folder / "head.pt"))


#: How the test sets up a method that cannot run on its default options.
SETUP = {"value-head": fitted_head}


@pytest.fixture(scope="module")
def runs(scorer, tmp_path_factory):
    """name -> (spec, options, rows in memory, rows read back from the table) of each method."""
    import json

    from conftest import SAMPLE_TRACES

    folder = tmp_path_factory.mktemp("contract")
    traces = folder / "traces.jsonl"
    traces.write_text("".join(json.dumps(t) + "\n" for t in SAMPLE_TRACES))
    found = {}
    for name, spec in registry().items():
        options = (tiny_options(spec) if spec.runs_with_defaults
                   else SETUP[name](folder, traces, scorer, found))
        common = {"methods": {name: options}, "model": scorer,
                  "segment_options": SegmentOptions(segments=3)}
        memory = score(traces, **common)
        table = folder / f"{name}.parquet"
        written = score(traces, table, **common)
        found[name] = (spec, options, memory, written, table)
    return found


@pytest.mark.parametrize("name", list(registry()))
def test_one_row_per_segment_and_label(runs, name):
    spec, options, memory, _, _ = runs[name]
    segments = pd.DataFrame(memory.rows[SEGMENTS])[SEGMENT_KEYS]
    labels = spec.labels(options)
    assert set(memory.rows) == {SEGMENTS, *labels}
    for label in labels:
        rows = pd.DataFrame(memory.rows[label])
        assert (rows["method"] == label).all()
        pd.testing.assert_frame_equal(rows[SEGMENT_KEYS], segments)


@pytest.mark.parametrize("name", list(registry()))
def test_rows_hold_the_declared_columns_and_no_other(runs, name):
    spec, options, memory, written, table = runs[name]
    schema = table_schema({name: spec.columns})
    declared = set(spec.columns)
    for label in spec.labels(options):
        for row in memory.rows[label]:
            assert set(row) <= set(schema.names), set(row) - set(schema.names)
            assert set(schema.names) - set(row) <= declared  # only its own may be left out
    on_disk = pd.read_parquet(table)
    assert list(on_disk.columns) == schema.names
    import pyarrow.parquet as pq

    from cotcredit.store import io

    for f in io.files_of(table):
        assert pq.read_schema(f).remove_metadata().equals(schema), f


@pytest.mark.parametrize("name", list(registry()))
def test_the_same_numbers_again(runs, name):
    spec, options, memory, _, table = runs[name]
    on_disk = pd.read_parquet(table)
    for label in spec.labels(options):
        again = on_disk[on_disk["method"] == label].reset_index(drop=True)
        first = pd.DataFrame(memory.rows[label])
        columns = [c for c in ["score", *spec.columns] if c in first]
        pd.testing.assert_frame_equal(again[columns], first[columns], check_dtype=False)


@pytest.mark.parametrize("name", [n for n, s in registry().items() if s.value_columns])
def test_a_value_method_s_credits_are_differences_of_its_values(runs, name):
    """Each segment's value after it is the next one's before it; a segment between the first
    and the last is credited exactly after - before; so a trace's credits sum to its change in
    value plus what the first and last segments add (a start value, a terminal correction)."""
    spec, options, memory, _, _ = runs[name]
    before, after = spec.value_columns
    for label in spec.labels(options):
        for _, trace in pd.DataFrame(memory.rows[label]).groupby("trace_id"):
            trace = trace.sort_values("segment")
            assert list(trace[after].iloc[:-1]) == list(trace[before].iloc[1:])
            delta = (trace[after] - trace[before]).to_numpy()
            credit = trace["score"].to_numpy()
            inner = slice(1, len(trace) - 1)
            assert credit[inner] == pytest.approx(delta[inner], abs=1e-12)
            ends = (credit[0] - delta[0]) + (credit[-1] - delta[-1]) if len(trace) > 1 else (
                credit[0] - delta[0])
            change = trace[after].iloc[-1] - trace[before].iloc[0]
            assert math.fsum(credit) == pytest.approx(change + ends, abs=1e-9)


def test_a_context_gives_the_run_s_forcing_and_generator_built_once(scorer):
    """What a run builds once is in its `RunCache`: every trace's context of one run gets the
    same answer forcing and generator (so a generator's token counts are the run's), another
    run new ones."""
    from cotcredit.lm.encoding import ForcingOptions
    from cotcredit.methods import RunCache, TraceContext

    run = RunCache()
    first, second = (TraceContext(scorer, None, None, None, cache=run) for _ in range(2))
    assert first.forcing(ForcingOptions()) is second.forcing(ForcingOptions())
    assert first.forcing(ForcingOptions()) is not first.forcing(ForcingOptions(exit_string="A:"))
    assert first.generator("hf") is second.generator("hf")
    assert run.of_kind("generator") == [first.generator("hf")]
    other = TraceContext(scorer, None, None, None)  # another run
    assert other.generator("hf") is not first.generator("hf")
    with pytest.raises(UserError):
        first.generator("nope")
