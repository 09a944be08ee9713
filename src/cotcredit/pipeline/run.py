"""The one path every analysis takes: traces → encode → one forward pass → segments → methods
→ rows appended per trace to Parquet tables.

`score` (every analysis command) checks the inputs before the model loads (`check_inputs`), then
runs `run_analysis`. The input (`InputOptions`: keys, slice, limit, bad lines) is streamed in
input order (`stream_traces`, `select`), with each trace's siblings (`SiblingIndex`), and each
trace's rows are written once it is scored, so memory does not grow with the input. Under a
launcher each process scores the traces whose id hashes to it; the main process compacts the
parts and reports.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cotcredit import distributed
from cotcredit.data.readers import open_records
from cotcredit.data.trace import (
    FieldNames,
    FieldOptions,
    Trace,
    TraceError,
    problem_key,
    trace_outcome,
)
from cotcredit.data.traces import iter_traces
from cotcredit.errors import UserError
from cotcredit.lm.loading import ModelOptions, model_location
from cotcredit.methods import RunCache, TraceContext, get_method, reference_room, registry
from cotcredit.options import check_choices, option
from cotcredit.pipeline.summary import SEGMENTS, RunSummary
from cotcredit.segmentation import (
    SegmentOptions,
    segment_encoded,
    segmentation_from_rows,
    step_segmentation,
)
from cotcredit.store import io
from cotcredit.version import __version__

if TYPE_CHECKING:  # the model stack loads with the run (keeps `--help` fast)
    from cotcredit.lm import Scorer
    from cotcredit.store.tables import TableWriter

    Model = str | Path | Scorer | ModelOptions | None
    Traces = str | Path | Sequence[Trace]


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
    """Run registered methods on one segmentation of each trace, their rows into one table.

    ``methods``: a name, several, or name -> options (None: defaults), e.g.
    ``{"rredcot": RredcotOptions(value="rhat")}``; none: the segmentation alone. ``label`` (one
    method): its rows' label. ``command``: the methods must be this command's. ``overwrite``
    also replaces what a method keeps beside its table (mc's rollouts). ``model``: a name, path,
    `ModelOptions` or `Scorer` (None: embedded); no ``output``: rows in memory (``frame()``).
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
    if label and len(methods) != 1:
        raise UserError("--label names the rows of one method; give one method")
    check_inputs(traces, methods=methods, segment_options=segment_options,
                 segments_file=segments_file, inputs=inputs)  # before the model loads
    if overwrite:
        for name, options in methods.items():
            spec = get_method(name)
            spec.overwrite(options if options is not None else spec.options_type())
    outputs = dict.fromkeys(list(methods) or [SEGMENTS], output) if output else {}
    return run_analysis(
        traces, scorer_for(model, progress), methods=dict(methods),
        segment_options=segment_options, segments_file=segments_file, outputs=outputs,
        inputs=inputs, overwrite=overwrite, progress=progress, timings=timings,
        rename={next(iter(methods)): label} if label else None,
    )


def scorer_for(model: Model, progress: bool = False) -> Scorer:
    """A loaded scorer for a model name, path, `ModelOptions` or scorer (None: embedded). A
    `--model` path that does not exist fails before torch is imported."""
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


# ---- the input -------------------------------------------------------------------------------
@dataclass
class InputOptions(FieldOptions):
    """Which traces are read (keys, slice, limit) and how bad lines are treated."""

    on_error: str = option(
        "raise", choices=("raise", "skip"),
        help="raise: stop at the first bad trace; skip: skip it, report it, go on.",
    )
    max_traces: int | None = option(None, help="Process at most this many traces.")
    shard: str | tuple[int, int] | None = option(
        None, help="i/n: process only the i-th of n deterministic slices of the traces."
    )

    def shard_slice(self) -> tuple[int, int] | None:
        """(i, n) of --shard i/n, or None."""
        return parse_shard(self.shard) if isinstance(self.shard, str) else self.shard

    def validate(self) -> InputOptions:
        """Check the options (choices, format, shard, limit); returns self."""
        check_choices(self)
        self.names()  # an unknown --format
        self.shard_slice()
        if self.max_traces is not None and self.max_traces < 0:
            raise UserError(f"--max-traces must be 0 or more, got {self.max_traces}")
        return self


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """'i/n' -> (i, n) with 0 <= i < n."""
    if not text:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UserError(f"--shard must look like i/n (e.g. 0/4), got '{text}'") from None
    if not (n >= 1 and 0 <= i < n):
        raise UserError(f"--shard {text}: need 0 <= i < n")
    return i, n


def in_shard(trace_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether trace `trace_id` belongs to shard (i, n) (by a hash of its id; None: every trace)."""
    if shard is None:
        return True
    h = int(hashlib.sha1(trace_id.encode()).hexdigest()[:8], 16)
    return h % shard[1] == shard[0]


def stream_traces(
    source: str | Path | Sequence[Trace], inputs: InputOptions, require_answer: bool = True
) -> Iterator[Trace | TraceError]:
    """Traces of an input path (streamed) or a list, in input order, not yet filtered (`select`);
    with on_error="skip" the bad records come as `TraceError`s in their place. An empty input is
    a UserError now, before any output is created. `require_answer=False`: traces without a
    reference answer are read (a segmentation needs none). `inputs`: validated."""
    if not isinstance(source, (str, Path)):
        return iter(list(source))
    items = iter_traces(source, inputs.names(), inputs.on_error, split=inputs.split,
                        subset=inputs.subset, require_answer=require_answer)
    first = next(items, None)  # raises for an empty file or a bad first line
    return itertools.chain([first] if first is not None else [], items)


def select(
    items: Iterator[Trace | TraceError], inputs: InputOptions
) -> Iterator[tuple[int, Trace | TraceError]]:
    """(input position, item) of the traces in `--shard`, up to `--max-traces`, and of the bad
    lines before the stream stops."""
    limit = inputs.max_traces
    if limit == 0:
        return
    taken = 0
    for pos, item in enumerate(items):
        if isinstance(item, Trace):
            if not in_shard(item.id, inputs.shard_slice()):
                continue
            taken += 1
        yield pos, item
        if limit is not None and taken >= limit:  # stop reading: later lines are not ours
            return


class SiblingIndex:
    """The right-answer responses (outcome ≥ 0.5) of a run's whole input by problem
    (`problem_key`), read once with the run's own reading options (every shard's traces, bad
    records skipped), so that each trace can be given its siblings."""

    def __init__(self, source: str | Path, inputs: InputOptions):
        self.correct: dict[str, list[tuple[str, str]]] = {}  # key -> [(trace id, response)]
        for t in iter_traces(source, inputs.names(), "skip", split=inputs.split,
                             subset=inputs.subset):
            if isinstance(t, Trace) and trace_outcome(t) >= 0.5:
                self.correct.setdefault(problem_key(t), []).append((t.id, t.response))

    def of(self, trace: Trace) -> list[str]:
        """The other right-answer responses to `trace`'s problem (never the trace itself)."""
        return [r for tid, r in self.correct.get(problem_key(trace), []) if tid != trace.id]


def sibling_index(source: str | Path | Sequence[Trace], inputs: InputOptions
                  ) -> SiblingIndex | None:
    """The `SiblingIndex` of an input path; None for traces given as a list (no input to read)."""
    return SiblingIndex(source, inputs) if isinstance(source, (str, Path)) else None


def load_traces(
    source: str | Path | Sequence[Trace], inputs: InputOptions
) -> tuple[list[Trace], list[str]]:
    """Traces from a JSONL path or a list, in memory; returns (traces, messages of skipped
    lines). `run_analysis` streams instead."""
    traces, skipped = [], []
    for _, item in select(stream_traces(source, inputs.validate()), inputs):
        if isinstance(item, TraceError):
            skipped.append(str(item))
        else:
            traces.append(item)
    return traces, skipped


def check_inputs(
    traces: str | Path | Sequence[Trace],
    *,
    methods: Mapping[str, Any] | None = None,
    segment_options: SegmentOptions | None = None,
    segments_file: str | Path | None = None,
    inputs: InputOptions | None = None,
) -> None:
    """Check what a run can check without its model, so a mistake costs no model load: every
    option, the segmentation file, and the traces the run will read (with `on_error="raise"`
    the whole input in the run's slice, streamed once; with "skip" the file itself). What needs
    the tokenizer (e.g. a trace longer than the model's context) is found during the run."""
    inputs = (inputs or InputOptions()).validate()
    (segment_options or SegmentOptions()).validate()
    for name, o in (methods or {}).items():
        spec = get_method(name)
        o = o if o is not None else spec.options_type()
        if hasattr(o, "validate"):
            o.validate()
    if segments_file is not None:
        io.check_exists(Path(segments_file))
    # The input exists, is not empty, its first record reads (segmenting needs no answer).
    items = stream_traces(traces, inputs, require_answer=bool(methods))
    if inputs.on_error == "raise" and isinstance(traces, (str, Path)):
        for _ in select(items, inputs):
            pass


def line_count(source: str | Path | Sequence[Trace], inputs: InputOptions) -> int:
    """Records of a traces input (the progress bar's total), without parsing them."""
    if not isinstance(source, (str, Path)):
        return len(source)
    return open_records(source, split=inputs.split, subset=inputs.subset).count()


# ---- the run ---------------------------------------------------------------------------------
def _plain(obj: Any) -> Any:
    return asdict(obj) if is_dataclass(obj) else obj


def _key_options(obj: Any) -> Any:
    """Options for the run key: without the fields an options class marks as not changing
    results (`NOT_IN_RUN_KEY`, e.g. batch size or where rollouts are saved)."""
    plain = _plain(obj)
    for name in getattr(obj, "NOT_IN_RUN_KEY", ()):
        plain.pop(name, None)
    return plain


# The aliases of the six groups tables were keyed by before chat turns, generation lists and steps
# were read; with those defaults the recorded fields stay as they were, so runs keep their keys.
_KEYED_BEFORE = {"response": ("response", "completion", "generation", "output"),
                 "outcome": ("correct", "reward")}


def fields_spec(names: FieldNames) -> dict:
    """The field names recorded in a table's metadata and run key: every group that differs from
    its default, and the six original groups always (as written before the others existed), so
    an unchanged reading keeps its run key."""
    default = FieldNames()
    out = {}
    for key, value in _plain(names).items():
        if key in ("prompt", "response", "answer", "solution", "outcome", "id"):
            out[key] = _KEYED_BEFORE.get(key, value) if value == getattr(default, key) else value
        elif value != getattr(default, key):
            out[key] = value
    return out


# The segmentation columns every table has that are a `Segment`'s own attributes.
_SEGMENT_FIELDS = ("char_start", "char_end", "token_start", "token_end", "n_tokens", "text",
                   "boundary_entropy", "mean_entropy")


def segment_columns(ctx: TraceContext, run_id: str) -> list[dict]:
    """The segmentation columns shared by every table, one dict per segment (`error_char`: the
    trace's, on each of its rows)."""
    return [{"run_id": run_id, "trace_id": ctx.trace.id, "segment": s.index,
             **{f: getattr(s, f) for f in _SEGMENT_FIELDS}, "error_char": ctx.trace.error_char}
            for s in ctx.segmentation.segments]


def run_analysis(
    traces: str | Path | Sequence[Trace],
    scorer: Scorer,
    *,
    methods: dict[str, Any] | None = None,
    segment_options: SegmentOptions | None = None,
    segments_file: str | Path | None = None,
    outputs: dict[str, str | Path] | None = None,
    inputs: InputOptions | None = None,
    overwrite: bool = False,
    progress: bool = False,
    keep_rows: bool = True,
    timings: bool = False,
    rename: Mapping[str, str] | None = None,
    cache: RunCache | None = None,
) -> RunSummary:
    """Segment every trace once and run each method on that segmentation.

    `outputs` maps an output label (`"segments"`, a method, or a row label such as
    `gradient-ig`) to a Parquet path (labels sharing a path share a table); without one the rows
    are in `summary.rows` (unless `keep_rows=False`). `timings` adds `cost_seconds`. `rename`
    maps a row label to another (a variant). `cache`: default a new `RunCache`.
    """
    from cotcredit.store.tables import TableWriter, rows_by_trace, run_key, table_schema

    t_start = time.perf_counter()
    inputs = (inputs or InputOptions()).validate()
    seg_opts = (segment_options or SegmentOptions()).validate()
    methods = methods or {}
    specs = {name: get_method(name) for name in methods}
    opts = {name: o if o is not None else specs[name].options_type()
            for name, o in methods.items()}
    for o in opts.values():
        if hasattr(o, "validate"):
            o.validate()
    # What the run decides once (e.g. the exit string from the model) goes into the metadata.
    opts = {name: specs[name].prepare(scorer, o) for name, o in opts.items()}
    stored = rows_by_trace(segments_file) if segments_file else None
    seg_source: Any = ({"file": str(segments_file), "sha256": stored.digest()}
                       if segments_file else _plain(seg_opts))
    items = stream_traces(traces, inputs, require_answer=bool(specs))
    cache = cache if cache is not None else RunCache()
    # Each trace's siblings (the other right answers to its problem), for methods that read them.
    siblings = (sibling_index(traces, inputs)
                if any(spec.reads_siblings(opts[n]) for n, spec in specs.items()) else None)
    summary = RunSummary(outputs={k: Path(v) for k, v in (outputs or {}).items()})
    procs = distributed.processes()
    summary.main = procs.main

    # Labels -> output label used for writing; each output path gets one writer.
    rename = dict(rename or {})
    labels: dict[str, str] = {SEGMENTS: SEGMENTS}
    owner: dict[str, str] = {}  # row label -> method
    for name, spec in specs.items():
        for lab in spec.labels(opts[name]):
            lab = rename.get(lab, lab)
            owner[lab] = name
            labels[lab] = lab if lab in summary.outputs else name
    by_path: dict[Path, list[str]] = {}
    for lab, out in labels.items():
        if out in summary.outputs:
            by_path.setdefault(summary.outputs[out], []).append(lab)
            summary.paths[lab] = summary.outputs[out]
    unknown = set(summary.outputs) - set(labels.values()) - set(labels)
    if unknown:
        raise UserError(f"no method writes output '{', '.join(sorted(unknown))}'")
    base_spec = {"model": scorer.describe(), "segmentation": seg_source,
                 "fields": fields_spec(inputs.names())}
    writers: dict[Path, TableWriter] = {}
    for path, labs in by_path.items():
        names = sorted({lab if lab == SEGMENTS else owner[lab] for lab in labs})
        spec = {**base_spec, "outputs": sorted(labs),
                "methods": {n: _plain(opts[n]) for n in names if n in opts}}
        key_spec = {**spec, "model": scorer.run_identity(),
                    "methods": {n: _key_options(opts[n]) for n in names if n in opts}}
        meta = {
            # The key covers every option that changes results; the model by content when its
            # folder has a fingerprint (shards on machines with other paths are one run).
            "run_id": run_key(key_spec),
            "cotcredit_version": __version__,
            "created": time.time(),
            # Which slice this table holds (not in the key: `cotcredit merge` joins the shards).
            "shard": "/".join(map(str, inputs.shard_slice())) if inputs.shard else None,
            **spec,
        }
        schema = table_schema({n: specs[n].columns for n in specs if n in names} or None,
                              timed=timings)
        writers[path] = TableWriter(path, meta, overwrite=overwrite, schema=schema,
                                    main=procs.main)
    if procs.count > 1:  # the main process repaired and compacted the tables: now read them
        procs.wait()
        if not procs.main:
            for w in writers.values():
                w.load_done()

    keep = keep_rows and not writers
    total = line_count(traces, inputs) if progress and procs.main else 0
    if inputs.max_traces is not None and inputs.shard is None:
        total = min(total, inputs.max_traces)
    bar, task = _progress(progress and procs.main, total)
    finished = False
    try:
        for pos, trace in select(items, inputs):
            bar.advance(task)
            if isinstance(trace, TraceError):
                if procs.main:  # every process reads the same bad lines
                    summary.errors.append(str(trace))
                continue
            if not procs.takes(trace.id):
                continue
            if writers and all(trace.id in w.done for w in writers.values()):
                summary.resumed.append(trace.id)
                continue
            try:
                rows = _score_trace(
                    trace, siblings.of(trace) if siblings is not None else None, scorer, cache,
                    specs, opts, seg_opts, stored, segments_file, summary, timings, rename,
                )
            except (UserError, TraceError) as e:
                if inputs.on_error != "skip":
                    raise
                summary.errors.append(str(e))
                continue
            for path, labs in by_path.items():
                w = writers[path]
                if trace.id in w.done:
                    continue
                out_rows = [{**r, "run_id": w.key} for lab in labs for r in rows.get(lab, [])]
                w.append(out_rows, position=pos)
            if keep:
                for lab, rs in rows.items():
                    summary.rows.setdefault(lab, []).extend(rs)
            summary.scored.append(trace.id)
        finished = True
    finally:
        bar.stop()
        if not finished and procs.count == 1:
            # Interrupted or failed: still leave one file per table, never hiding the original
            # error. (Launched, the other processes may be merging their parts: the next run
            # compacts.)
            closers = [w.close for w in writers.values()]
            closers += [functools.partial(spec.finish, opts[n]) for n, spec in specs.items()]
            for close in closers:
                try:
                    close()
                except Exception:  # noqa: BLE001
                    pass
    if procs.count > 1:
        procs.wait()  # every process's parts are written
        _gather(summary, procs)
    for name, spec in specs.items():  # e.g. compact a method's own tables (main process)
        spec.finish(opts[name])
    if procs.main:
        for w in writers.values():
            w.close()
    if procs.count > 1:
        procs.wait()  # compacted: a next step of this process may read the tables
    summary.seconds = time.perf_counter() - t_start
    return summary


def _gather(summary: RunSummary, procs: distributed.Processes) -> None:
    """Give the main process's summary the counts, errors and notes of every process."""
    mine = {k: getattr(summary, k) for k in ("scored", "resumed", "errors", "notes")}
    every = procs.gather(mine)
    if not procs.main:
        return
    for key in ("scored", "resumed", "errors"):
        setattr(summary, key, [x for part in every for x in part[key]])
    summary.notes = list(dict.fromkeys(n for part in every for n in part["notes"]))


def _forward_tokens(scorer: Scorer) -> int:
    return int(getattr(scorer, "forward_tokens", 0))


def _generation_stats(cache: RunCache) -> tuple[int, int]:
    """(prompt tokens prefilled, tokens sampled) by the run's generators so far."""
    gens = cache.of_kind("generator")
    return (sum(int(g.stats.prompt_tokens) for g in gens), sum(int(g.stats.tokens) for g in gens))


def with_rendered_prompt(trace: Trace, scorer: Scorer) -> Trace:
    """`trace` with its chat turns (`trace.messages`) rendered by the model's chat template into
    its prompt, which the scorer then uses as it is (it holds the template's markers); without
    turns or a template the trace is unchanged (its prompt is the turns' plain text)."""
    if not trace.messages or not scorer.uses_chat_template:
        return trace
    turns = list(trace.messages)
    system = scorer.options.system_prompt
    if system and not any(t["role"] == "system" for t in turns):
        turns.insert(0, {"role": "system", "content": system})
    prompt = scorer.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    return dataclasses.replace(trace, prompt=prompt)


def _score_trace(
    trace, siblings, scorer, cache, specs, opts, seg_opts, stored, segments_file,
    summary: RunSummary, timed: bool, rename: Mapping[str, str],
) -> dict[str, list[dict]]:
    from cotcredit.store.tables import check_finite

    t0, f0 = time.perf_counter(), _forward_tokens(scorer)
    trace = with_rendered_prompt(trace, scorer)
    notes: list[str] = []
    # Each method's references, resolved once: room is kept for them, and `run` reads them.
    references = {n: spec.references(trace, siblings, opts[n], notes)
                  for n, spec in specs.items() if spec.references is not None}
    reserve = max([spec.reserve(scorer, trace, opts[n])
                   + reference_room(scorer, references.get(n, ())) for n, spec in specs.items()]
                  or [0])
    enc = scorer.encode(trace, reserve=reserve)
    fwd = scorer.forward(enc.ids, keep_cache=bool(specs), stats_from=enc.prompt_len)
    if stored is not None:
        if trace.id not in stored:
            raise UserError(f"{segments_file}: has no segmentation for trace '{trace.id}'")
        seg = segmentation_from_rows(enc, stored[trace.id], str(segments_file))
    elif trace.steps is not None or seg_opts.segments == "steps":
        seg = step_segmentation(enc, fwd.entropies)
    else:
        seg = segment_encoded(enc, fwd.entropies, seg_opts)
    ctx = TraceContext(scorer, enc, fwd, seg, notes, siblings=siblings, cache=cache)
    shared = {"cost_forward_tokens": _forward_tokens(scorer) - f0}
    if timed:
        shared["cost_seconds"] = time.perf_counter() - t0
    base = segment_columns(ctx, "")
    rows: dict[str, list[dict]] = {SEGMENTS: [{**b, **shared} for b in base]}
    for name, spec in specs.items():
        t0, f0 = time.perf_counter(), _forward_tokens(scorer)
        p0, g0 = _generation_stats(cache)
        method_ctx = dataclasses.replace(ctx, references=references.get(name), extra_cost={})
        result = spec.run(method_ctx, opts[name])
        p1, g1 = _generation_stats(cache)
        # A method's cost is what a run of it alone would pay: its own passes, the prefill of
        # its rollouts, the shared trace pass if it reads it, and what it says it spent besides.
        extra = method_ctx.extra_cost
        own = {"cost_forward_tokens": _forward_tokens(scorer) - f0 + p1 - p0
               + extra.get("cost_forward_tokens", 0),
               "cost_generated_tokens": g1 - g0 + extra.get("cost_generated_tokens", 0)}
        if timed:
            own["cost_seconds"] = time.perf_counter() - t0
        cost = {k: v + shared.get(k, 0) if spec.uses_trace_pass else v for k, v in own.items()}
        for lab, per_seg in result.items():
            lab = rename.get(lab, lab)
            if len(per_seg) != len(base):
                raise RuntimeError(
                    f"method {name} returned {len(per_seg)} rows for {len(base)} segments"
                )
            rows[lab] = [{**b, "method": lab, **r, **cost} for b, r in zip(base, per_seg)]
    for note in [*trace.notes, *ctx.notes, *scorer.notes]:
        if note not in summary.notes:
            summary.notes.append(note)
    fwd.cache = None
    for rs in rows.values():  # a NaN score is an error for this trace, never a silent row
        check_finite(rs, trace.where)
    return rows


def _progress(enabled: bool, total: int):
    """(bar, task): a progress bar over `total` traces, drawn only when `enabled` and there are
    several."""
    from rich import progress as rp

    bar = rp.Progress(rp.TextColumn("traces"), rp.BarColumn(), rp.MofNCompleteColumn(),
                      rp.TimeRemainingColumn(), disable=not (enabled and total > 1))
    task = bar.add_task("traces", total=total)
    bar.start()
    return bar, task
