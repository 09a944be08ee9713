"""What every method receives and returns.

A method is one function `run(ctx: TraceContext, options) -> dict[label, list[row]]`: for one
trace it returns, per output label (usually the method's name; `gradient` returns
`gradient-ig` etc.), one dict per segment holding at least `score`, plus its own columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cotcredit.run_cache import RunCache

if TYPE_CHECKING:  # (the model stack loads with the model: keeps `--help` fast)
    from cotcredit.lm import Scorer, TracePass
    from cotcredit.lm.encoding import EncodedTrace
    from cotcredit.segmentation import Segmentation


@dataclass
class TraceContext:
    """One trace ready for scoring: its tokens, one forward pass (with KV cache), its segments,
    and what the run knows of it besides its record. Every method of a run gets the same one.

    `siblings`: the other right-answer responses to the same problem, read by the input stage
    (`pipeline.inputs.SiblingIndex`; None: the input had none to give, e.g. a list of traces).
    `references`: the reference solutions a method follows (each a list of steps), resolved
    once for the trace before it was encoded (`MethodSpec.references`); None: not resolved.
    `cache`: the run's `RunCache`. `value_functions`: the attribution value functions of this
    trace by target (`attribution.value_function`), shared by the methods that use them.
    """

    scorer: Scorer
    encoded: EncodedTrace
    forward: TracePass
    segmentation: Segmentation
    notes: list[str] = field(default_factory=list)  # said once per run (e.g. "no solution")
    siblings: list[str] | None = None
    references: list[list[str]] | None = None
    cache: RunCache = field(default_factory=RunCache)
    value_functions: dict[Any, Any] = field(default_factory=dict)
    # What the running method spent that the scorer's counters do not see, by cost column
    # (e.g. the trace pass a method reads only for some options; a value head's share of the
    # rollouts it was fitted on); added to the method's cost, fresh for each method.
    extra_cost: dict[str, int] = field(default_factory=dict)

    @property
    def trace(self):
        """The trace being scored."""
        return self.encoded.trace

    def prefix_len(self, boundary: int) -> int:
        """Sequence length of state s_k whose reasoning ends at token `boundary`."""
        return self.encoded.prompt_len + boundary


MethodRows = dict[str, list[dict[str, Any]]]


def reference_room(scorer: Scorer, references: Sequence[Sequence[str]]) -> int:
    """Tokens of the longest reference (its steps one a line): the context a method that
    follows references keeps free after the trace for them."""
    return max((len(scorer.encode_text("\n".join(steps))) for steps in references), default=0)


@dataclass(frozen=True)
class MethodCommand:
    """A command of the command line that writes method tables, made from the specs that name
    it: ``cotcredit NAME TRACES -o OUTPUT`` with the options of its methods.

    A command of one method takes ``--label`` (the rows' method label); a command shared by
    several methods (``attribute``: loo, shapley, gradient) takes ``--method``, a comma-separated
    choice among them, and writes them into one table.
    """

    name: str  # the command, e.g. "redistribute"
    help: str  # its --help text; the first sentence is its line in `cotcredit --help`
    default_output: str  # the table it writes by default, e.g. "rredcot.parquet"
    show: str = "scores"  # what --show prints of one trace ("rewards", "values", "scores")
    method_help: str = ""  # shared command: the help of --method
    default_methods: str = ""  # shared command: the default of --method, e.g. "loo,shapley"
    # Markdown of its page in the docs (examples, the output), between the title and the
    # options the docs read from the command line ("": the help's first paragraph).
    page: str = ""

    def hint(self, method: str, shared: bool) -> str:
        """How to make `method`'s table on the command line (for messages)."""
        return f"cotcredit {self.name} TRACES" + (f" --method {method}" if shared else "")


def _no_hook(options: Any) -> None:
    """A hook that does nothing."""


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: what it estimates, its options, how it runs on one trace, and what
    the command line and the report need to know of it.

    Only `name`, `options_type`, `run` and `labels` are required. A method file defines one
    `SPEC`; a package outside cotcredit registers one through the entry point group
    ``cotcredit.methods`` (see `cotcredit.methods.registry`).
    """

    name: str
    options_type: type
    run: Callable[[TraceContext, Any], MethodRows]
    labels: Callable[[Any], list[str]]
    # Context tokens a trace must leave free for this method's probes: (scorer, trace, options).
    reserve: Callable[[Scorer, Any, Any], int] = lambda scorer, trace, options: 64
    # The reference solutions the method follows on a trace, each a list of steps: (trace, its
    # siblings or None, options, the run's notes) -> them. Resolved once per trace, before it
    # is encoded: the run keeps room for the longest besides `reserve` (`reference_room`), and
    # `run` finds them on the context (`ctx.references`). None: the method follows none.
    references: Callable[[Any, Any, Any, list[str]], list[list[str]]] | None = None
    # Whether the run's input stage must find each trace's siblings (the other right-answer
    # responses to its problem) for these options; they reach the method on the context.
    reads_siblings: Callable[[Any], bool] = lambda options: False
    description: str = ""
    # The method's own columns (besides `score`) and their Arrow types ("float64", "int64",
    # "string", "bool"): every table has a fixed schema, declared here, never inferred per trace.
    columns: dict[str, str] = field(default_factory=dict)
    order: int = 100  # position in reports and listings (lower first)
    all_labels: tuple[str, ...] = ()  # every label the method can write (default: its name)
    # The command that writes this method's table (None: the method runs through `compare`
    # and the Python API only).
    command: MethodCommand | None = None
    # Options `compare` offers as flags of its own: {flag name: option field}, e.g.
    # {"rollouts": "rollouts"} gives `compare --rollouts`.
    shortcuts: dict[str, str] = field(default_factory=dict)
    # False for a method that cannot run on its default options (it needs a file or setting
    # from the user, as `value-head` its fitted head): `bench` leaves it out of its defaults.
    runs_with_defaults: bool = True
    # Once per run, before the first trace: options with everything the run decides filled in
    # (e.g. the exit string chosen from the model), so the table metadata records it.
    prepare: Callable[[Scorer, Any], Any] = lambda scorer, options: options
    # Once per run, after the last trace (also after an error): close what the method opened.
    finish: Callable[[Any], None] = _no_hook
    # Whether the method reads the one forward pass over the trace that every method of a run
    # shares (its cache, log-probs, entropies): if so, that pass counts in the method's cost,
    # since a run of this method alone pays for it.
    uses_trace_pass: bool = True
    # The columns `--show` prints of one trace (empty: the score of each row label).
    show: tuple[str, ...] = ()
    # (before, after) columns of a value-based method (the value at the segment's start and
    # end): the report correlates their differences (`cotcredit.report.credit`).
    value_columns: tuple[str, str] | None = None
    # What the command prints after a run (e.g. a table), from (run summary, row label,
    # options); None prints nothing.
    summary: Callable[[Any, str, Any], Any] | None = None
    # What `overwrite=True` replaces besides the output table (mc: its rollouts table).
    overwrite: Callable[[Any], None] = _no_hook

    def __post_init__(self) -> None:
        if not self.all_labels:
            object.__setattr__(self, "all_labels", (self.name,))

    @property
    def default_output(self) -> str:
        """The table its command writes by default ("" without a command)."""
        return self.command.default_output if self.command else ""
