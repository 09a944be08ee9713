"""The one path every analysis takes: traces → encode → one forward pass → segments → methods
→ rows appended per trace to Parquet tables.

`run_analysis` is what `segment`, `redistribute`, `mc-baseline`, `attribute` and `compare` call.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from cotcredit import __version__
from cotcredit.errors import UserError
from cotcredit.lm import Scorer
from cotcredit.methods import TraceContext, get_method
from cotcredit.segmentation import SegmentOptions, segment_encoded, segmentation_from_rows
from cotcredit.tables import TableWriter, check_finite, rows_by_trace, run_key
from cotcredit.traces import FieldNames, Trace, TraceError, read_traces

SEGMENTS = "segments"  # the output label of the segmentation itself


@dataclass
class InputOptions:
    """Which traces are read and how bad lines are treated."""

    fields: FieldNames = field(default_factory=FieldNames)
    on_error: str = "raise"  # raise | skip
    max_traces: int | None = None
    shard: tuple[int, int] | None = None  # (i, n): process traces whose id hashes to i mod n


@dataclass
class RunSummary:
    """What a run did: counts, per-trace errors, notes said once, outputs written."""

    outputs: dict[str, Path]
    scored: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rows: dict[str, list[dict]] = field(default_factory=dict)  # label -> rows of this run


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
    if shard is None:
        return True
    h = int(hashlib.sha1(trace_id.encode()).hexdigest()[:8], 16)
    return h % shard[1] == shard[0]


def load_traces(
    source: str | Path | Sequence[Trace], inputs: InputOptions
) -> tuple[list[Trace], list[str]]:
    """Traces from a JSONL path or a list; returns (traces, messages of skipped lines)."""
    if isinstance(source, (str, Path)):
        res = read_traces(source, inputs.fields, inputs.on_error)
        traces, skipped = res.traces, [str(e) for e in res.skipped]
    else:
        traces, skipped = list(source), []
    traces = [t for t in traces if in_shard(t.id, inputs.shard)]
    if inputs.max_traces is not None and inputs.max_traces < 0:
        raise UserError(f"--max-traces must be 0 or more, got {inputs.max_traces}")
    if inputs.max_traces is not None:
        traces = traces[: inputs.max_traces]
    return traces, skipped


def _plain(obj: Any) -> Any:
    return asdict(obj) if is_dataclass(obj) else obj


def _key_options(obj: Any) -> Any:
    """Options for the run key: without the fields an options class marks as not changing
    results (`NOT_IN_RUN_KEY`, e.g. batch size or where rollouts are saved)."""
    plain = _plain(obj)
    for name in getattr(obj, "NOT_IN_RUN_KEY", ()):
        plain.pop(name, None)
    return plain


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def segment_columns(ctx: TraceContext, run_id: str) -> list[dict]:
    """The segmentation columns shared by every table, one dict per segment."""
    return [
        {
            "run_id": run_id,
            "trace_id": ctx.trace.id,
            "segment": s.index,
            "char_start": s.char_start,
            "char_end": s.char_end,
            "token_start": s.token_start,
            "token_end": s.token_end,
            "n_tokens": s.n_tokens,
            "text": s.text,
            "boundary_entropy": s.boundary_entropy,
            "mean_entropy": s.mean_entropy,
        }
        for s in ctx.segmentation.segments
    ]


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
) -> RunSummary:
    """Segment every trace once and run each method on that segmentation.

    `methods` maps a method name to its options (None: defaults). `outputs` maps an output label
    (`"segments"`, a method name, or a row label such as `gradient-ig`) to a Parquet path; rows of
    labels sharing a path go into one file. Labels without a path are only returned.
    """
    t_start = time.perf_counter()
    inputs = inputs or InputOptions()
    seg_opts = (segment_options or SegmentOptions()).validate()
    methods = methods or {}
    specs = {name: get_method(name) for name in methods}
    opts = {
        name: (o if o is not None else specs[name].options_type()) for name, o in methods.items()
    }
    for o in opts.values():
        if hasattr(o, "validate"):
            o.validate()
    stored = rows_by_trace(segments_file) if segments_file else None
    seg_source: Any = (
        {"file": str(segments_file), "sha256": _file_digest(Path(segments_file))}
        if segments_file
        else _plain(seg_opts)
    )
    traces_list, skipped = load_traces(traces, inputs)
    summary = RunSummary(outputs={k: Path(v) for k, v in (outputs or {}).items()}, errors=skipped)

    # Labels -> output label used for writing; each output path gets one writer.
    labels: dict[str, str] = {SEGMENTS: SEGMENTS}
    for name, spec in specs.items():
        for lab in spec.labels(opts[name]):
            labels[lab] = lab if lab in summary.outputs else name
    by_path: dict[Path, list[str]] = {}
    for lab, out in labels.items():
        if out in summary.outputs:
            by_path.setdefault(summary.outputs[out], []).append(lab)
    unknown = set(summary.outputs) - set(labels.values()) - set(labels)
    if unknown:
        raise UserError(f"no method writes output '{', '.join(sorted(unknown))}'")
    base_spec = {
        "model": scorer.describe(),
        "segmentation": seg_source,
        "fields": _plain(inputs.fields),
    }
    writers: dict[Path, TableWriter] = {}
    for path, labs in by_path.items():
        names = sorted({lab if lab == SEGMENTS else get_method(lab).name for lab in labs})
        spec = {
            **base_spec,
            "outputs": sorted(labs),
            "methods": {n: _plain(opts[n]) for n in names if n in opts},
        }
        key_spec = {**spec, "model": scorer.run_identity(),
                    "methods": {n: _key_options(opts[n]) for n in names if n in opts}}
        meta = {
            # The key covers every option that changes results; the model by content when its
            # folder has a fingerprint (shards on machines with other paths are one run).
            "run_id": run_key(key_spec),
            "cotcredit_version": __version__,
            "created": time.time(),
            # Which slice this file holds (not in the key: `cotcredit merge` joins the shards).
            "shard": f"{inputs.shard[0]}/{inputs.shard[1]}" if inputs.shard else None,
            **spec,
        }
        writers[path] = TableWriter(path, meta, overwrite=overwrite)

    todo = [
        t for t in traces_list if not writers or any(t.id not in w.done for w in writers.values())
    ]
    summary.resumed = [t.id for t in traces_list if t not in todo]
    needs_segments = stored is None
    bar = _progress(progress, len(todo))
    try:
        for trace in todo:
            try:
                rows = _score_trace(
                    trace,
                    scorer,
                    specs,
                    opts,
                    seg_opts,
                    stored,
                    segments_file,
                    needs_segments,
                    summary,
                )
            except (UserError, TraceError) as e:
                if inputs.on_error != "skip":
                    raise
                summary.errors.append(str(e))
                bar.advance()
                continue
            for path, labs in by_path.items():
                w = writers[path]
                if trace.id in w.done:
                    continue
                run_id = w.key
                out_rows = [{**r, "run_id": run_id} for lab in labs for r in rows.get(lab, [])]
                w.append(out_rows)
            if keep_rows:
                for lab, rs in rows.items():
                    summary.rows.setdefault(lab, []).extend(rs)
            summary.scored.append(trace.id)
            bar.advance()
    finally:
        bar.stop()
        for w in writers.values():
            w.close()
    summary.seconds = time.perf_counter() - t_start
    return summary


def _score_trace(
    trace, scorer, specs, opts, seg_opts, stored, segments_file, needs_segments, summary: RunSummary
) -> dict[str, list[dict]]:
    reserve = max([spec.reserve(scorer, trace, opts[n]) for n, spec in specs.items()] or [0])
    enc = scorer.encode(trace, reserve=reserve)
    fwd = scorer.forward(enc.ids, keep_cache=bool(specs))
    if stored is not None:
        if trace.id not in stored:
            raise UserError(f"{segments_file}: has no segmentation for trace '{trace.id}'")
        seg = segmentation_from_rows(enc, stored[trace.id], str(segments_file))
    else:
        seg = segment_encoded(enc, fwd.entropies, seg_opts)
    ctx = TraceContext(scorer, enc, fwd, seg)
    base = segment_columns(ctx, "")
    rows: dict[str, list[dict]] = {SEGMENTS: base}
    for name, spec in specs.items():
        result = spec.run(ctx, opts[name])
        for lab, per_seg in result.items():
            if len(per_seg) != len(base):
                raise RuntimeError(
                    f"method {name} returned {len(per_seg)} rows for {len(base)} segments"
                )
            rows[lab] = [{**b, "method": lab, **r} for b, r in zip(base, per_seg)]
    for note in ctx.notes:
        if note not in summary.notes:
            summary.notes.append(note)
    fwd.cache = None
    for rs in rows.values():  # a NaN score is an error for this trace, never a silent row
        check_finite(rs, trace.where)
    return rows


class _NoBar:
    def advance(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _RichBar:
    def __init__(self, total: int):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.p = Progress(
            TextColumn("traces"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            transient=False,
        )
        self.task = self.p.add_task("traces", total=total)
        self.p.start()

    def advance(self) -> None:
        self.p.advance(self.task)

    def stop(self) -> None:
        self.p.stop()


def _progress(enabled: bool, total: int):
    return _RichBar(total) if enabled and total > 1 else _NoBar()
