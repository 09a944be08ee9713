"""Which traces a run reads: `InputOptions` (keys, slice, limit, bad lines), the input as a
stream in input order (`stream_traces`), the slice a run takes (`select`: `--shard`,
`--max-traces`), each trace's siblings (`SiblingIndex`: the other right-answer responses to its
problem), and `check_inputs`, which checks everything a run can check before its model loads."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cotcredit.data.readers import open_records
from cotcredit.data.trace import FieldOptions, Trace, TraceError, problem_key, trace_outcome
from cotcredit.data.traces import iter_traces
from cotcredit.errors import UserError
from cotcredit.methods import get_method
from cotcredit.options import check_choices, option
from cotcredit.segmentation import SegmentOptions
from cotcredit.store import io


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
    """Traces of an input path (streamed; see `readers`) or a list, in input order; with
    on_error="skip" the bad records come as `TraceError`s in their place. The input is checked
    now, and an empty one is a UserError now (before any output is created). Not yet filtered
    (see `select`). `require_answer=False`: traces without a reference answer are read (a
    segmentation needs none)."""
    if inputs.max_traces is not None and inputs.max_traces < 0:
        raise UserError(f"--max-traces must be 0 or more, got {inputs.max_traces}")
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
    """The `SiblingIndex` of an input path; None for traces given as a list (they have no
    input of their own to find siblings in)."""
    return SiblingIndex(source, inputs) if isinstance(source, (str, Path)) else None


def load_traces(
    source: str | Path | Sequence[Trace], inputs: InputOptions
) -> tuple[list[Trace], list[str]]:
    """Traces from a JSONL path or a list, in memory; returns (traces, messages of skipped
    lines). `run_analysis` streams instead."""
    traces, skipped = [], []
    for _, item in select(stream_traces(source, inputs), inputs):
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
    option (choices, ranges, method names), the segmentation file, and the traces the run will
    read. With `on_error="raise"` the whole input in the run's slice (`--shard`, up to
    `--max-traces`) is read once, streamed, and its first bad line raised; with "skip" only the
    file itself is checked (bad lines are skipped during the run). What needs the tokenizer
    (e.g. a trace longer than the model's context) is still found during the run."""
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
