"""What every method receives and returns.

A method is one function `run(ctx: TraceContext, options) -> dict[label, list[row]]`: for one
trace it returns, per output label (usually the method's name; `gradient` returns
`gradient-ig` etc.), one dict per segment holding at least `score`, plus its own columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the model stack loads with the model: keeps `--help` fast)
    from cotcredit.encoding import EncodedTrace
    from cotcredit.lm import Scorer, TracePass
    from cotcredit.segmentation import Segmentation


@dataclass
class TraceContext:
    """One trace ready for scoring: its tokens, one forward pass (with KV cache), its segments."""

    scorer: Scorer
    encoded: EncodedTrace
    forward: TracePass
    segmentation: Segmentation
    notes: list[str] = field(default_factory=list)  # said once per run (e.g. "no solution")

    @property
    def trace(self):
        return self.encoded.trace

    def prefix_len(self, boundary: int) -> int:
        """Sequence length of state s_k whose reasoning ends at token `boundary`."""
        return self.encoded.prompt_len + boundary


MethodRows = dict[str, list[dict[str, Any]]]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: its name, output labels, options type and scoring function."""

    name: str
    options_type: type
    run: Callable[[TraceContext, Any], MethodRows]
    labels: Callable[[Any], list[str]]
    # Context tokens a trace must leave free for this method's probes: (scorer, trace, options).
    reserve: Callable[[Scorer, Any, Any], int] = lambda scorer, trace, options: 64
    description: str = ""
    # The method's own columns (besides `score`) and their Arrow types ("float64", "int64",
    # "string", "bool"): every table has a fixed schema, declared here, never inferred per trace.
    columns: dict[str, str] = field(default_factory=dict)
    order: int = 100  # position in reports and listings (lower first)
    all_labels: tuple[str, ...] = ()  # every label the method can write (default: its name)
    # The command that writes this method's table and its default output name, e.g.
    # ("redistribute", "rredcot.parquet"); "TRACES" stands for the traces file.
    command: str = ""
    default_output: str = ""
    # Once per run, before the first trace: options with everything the run decides filled in
    # (e.g. the exit string chosen from the model), so the table metadata records it.
    # Options `compare` offers as flags of its own: {flag name: option field}, e.g.
    # {"rollouts": "rollouts"} gives `compare --rollouts`.
    shortcuts: dict[str, str] = field(default_factory=dict)
    prepare: Callable[[Scorer, Any], Any] = lambda scorer, options: options
    # Once per run, after the last trace (also after an error): close what the method opened.
    finish: Callable[[Any], None] = lambda options: None
    # Whether the method reads the one forward pass over the trace that every method of a run
    # shares (its cache, log-probs, entropies): if so, that pass counts in the method's cost,
    # since a run of this method alone pays for it.
    uses_trace_pass: bool = True

    def __post_init__(self) -> None:
        if not self.all_labels:
            object.__setattr__(self, "all_labels", (self.name,))
