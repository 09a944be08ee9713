"""The method contract and the registry.

A method is one function `run(ctx: TraceContext, options) -> dict[label, list[row]]`: for one
trace it returns, per output label (usually the method's name; `gradient` returns
`gradient-ig` etc.), one dict per segment holding at least `score`, plus its own columns. What
the run builds once (the answer forcing, the sampling generators, a fitted value head) is in its
`RunCache`, which every trace's context carries (`ctx.forcing`, `ctx.generator`).

Every module in this package that defines `SPEC` (a `MethodSpec`) is a method, and so is every
`MethodSpec` a package outside cotcredit registers through the entry point group
``cotcredit.methods``, e.g. in its pyproject.toml::

    [project.entry-points."cotcredit.methods"]
    mymethod = "mypackage.mymethod:SPEC"

It then runs in `compare`, through `cotcredit.score`, and (with a `MethodCommand`) gets its own
command; nothing else changes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from cotcredit.errors import UserError
from cotcredit.lm.encoding import Forcing, ForcingOptions, answer_forcing
from cotcredit.lm.generation import Generator
from cotcredit.lm.sampling import get_generator
from cotcredit.options import comma_list

if TYPE_CHECKING:  # (the model stack loads with the model: keeps `--help` fast)
    from cotcredit.lm import Scorer, TracePass
    from cotcredit.lm.encoding import EncodedTrace
    from cotcredit.segmentation import Segmentation


# ---- the run's cache -------------------------------------------------------------------------
T = TypeVar("T")


class RunCache:
    """Objects a run builds once, by kind and key, passed explicitly instead of kept on the
    model: `run_analysis` makes one per run, an online scorer one for its life. Kinds:
    ``"forcing"`` (`TraceContext.forcing`), ``"generator"`` (`TraceContext.generator`, whose
    token counts give each method's cost) and ``"value-head"`` (`methods.value_head`: a fitted
    head by its file)."""

    def __init__(self) -> None:
        self._built: dict[tuple[str, Hashable], Any] = {}

    def get(self, kind: str, key: Hashable, build: Callable[[], T]) -> T:
        """The `kind` object for `key`, built by `build()` the first time."""
        if (kind, key) not in self._built:
            self._built[kind, key] = build()
        return self._built[kind, key]

    def of_kind(self, kind: str) -> list[Any]:
        """Every `kind` object built so far, in the order they were built."""
        return [v for (k, _), v in self._built.items() if k == kind]


# ---- what a method is handed and returns -----------------------------------------------------
@dataclass
class TraceContext:
    """One trace ready for scoring: its tokens, one forward pass (with KV cache), its segments,
    and what the run knows of it besides its record. Every method of a run gets the same one.

    `siblings`: the other right-answer responses to the same problem, read by the input stage
    (`pipeline.run.SiblingIndex`; None: the input had none to give, e.g. a list of traces).
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

    def forcing(self, options: ForcingOptions) -> Forcing:
        """The run's answer forcing for `options` (`answer_forcing`), built once per run."""
        return self.cache.get("forcing", (id(self.scorer.tokenizer), options),
                              lambda: answer_forcing(self.scorer, options))

    def generator(self, backend: str = "hf", engine_args: dict | None = None) -> Generator:
        """The run's generator of `backend` (`get_generator`), built once per run, so its token
        counts are the run's."""
        return self.cache.get("generator", (id(self.scorer.model), backend),
                              lambda: get_generator(self.scorer, backend, engine_args))

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


# ---- the registry ----------------------------------------------------------------------------
#: The entry point group of methods defined outside cotcredit.
ENTRY_POINTS = "cotcredit.methods"

__all__ = [
    "ENTRY_POINTS",
    "MethodCommand",
    "MethodRows",
    "MethodSpec",
    "RunCache",
    "TraceContext",
    "get_method",
    "label_to_method",
    "method_commands",
    "method_order",
    "parse_methods",
    "plugin_specs",
    "reference_room",
    "registry",
    "shared_command",
]

_REGISTRY: dict[str, MethodSpec] | None = None


def plugin_specs() -> list[MethodSpec]:
    """The specs registered under the entry point group `ENTRY_POINTS` (an entry point names a
    `MethodSpec`, or a module holding one as `SPEC`). One that fails to load is left out with
    a warning naming it: a broken package must not break every command."""
    found = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINTS):
        try:
            spec = ep.load()
        except Exception as e:  # noqa: BLE001  (any error of someone else's package)
            warnings.warn(f"method {ep.name} ({ep.value}) did not load: {e}", stacklevel=2)
            continue
        spec = getattr(spec, "SPEC", spec)
        if not isinstance(spec, MethodSpec):
            warnings.warn(f"method {ep.name} ({ep.value}) is not a MethodSpec", stacklevel=2)
            continue
        found.append(spec)
    return found


def registry() -> dict[str, MethodSpec]:
    """Name -> spec of every available method, in display order (discovered once): the
    modules of this package, then those of entry points (a name taken already is skipped,
    with a warning)."""
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, MethodSpec] = {}
        for mod in pkgutil.iter_modules(__path__):
            module = importlib.import_module(f"{__name__}.{mod.name}")
            spec = getattr(module, "SPEC", None)
            if isinstance(spec, MethodSpec):
                found[spec.name] = spec
        for spec in plugin_specs():
            if spec.name in found:
                warnings.warn(f"method {spec.name} of an entry point is taken already; left "
                              "out", stacklevel=2)
                continue
            found[spec.name] = spec
        _REGISTRY = dict(sorted(found.items(), key=lambda kv: (kv[1].order, kv[0])))
    return _REGISTRY


def get_method(name: str) -> MethodSpec:
    """The spec registered under `name`, or a UserError listing the known names."""
    reg = registry()
    if name not in reg:
        owner = label_to_method(name)
        if owner:
            return reg[owner]
        raise UserError(f"unknown method '{name}' (known: {', '.join(reg)})")
    return reg[name]


def label_to_method(label: str) -> str | None:
    """The method that writes rows labelled `label` (e.g. gradient-ig -> gradient)."""
    for name, spec in registry().items():
        if label == name or label in spec.all_labels:
            return name
        if label.startswith(name + "-"):
            return name
    return None


def parse_methods(methods: str | Sequence[str], flag: str = "--methods") -> list[str]:
    """Method names from ``"a,b"`` or a list, blanks and repeats dropped; at least one (else a
    UserError naming `flag`)."""
    names = comma_list(methods)
    if not names:
        raise UserError(f"{flag}: name at least one method")
    return names


def method_commands() -> dict[str, tuple[MethodCommand, list[MethodSpec]]]:
    """Command name -> (its `MethodCommand`, the specs that name it), in registry order: what
    the command line, the Python API and the docs make one command, function and page of."""
    found: dict[str, tuple[MethodCommand, list[MethodSpec]]] = {}
    for spec in registry().values():
        if spec.command is not None:
            found.setdefault(spec.command.name, (spec.command, []))[1].append(spec)
    return found


def shared_command(name: str) -> bool:
    """Whether method `name`'s command is shared with other methods (chosen with --method)."""
    command = registry()[name].command
    return command is not None and sum(
        s.command is not None and s.command.name == command.name for s in registry().values()
    ) > 1


def method_order(labels) -> list[str]:
    """Distinct row labels (method names or labels such as gradient-ig) in display order: the
    registry's order of their methods, a method's labels in its own order, then unknown labels
    alphabetically."""
    distinct = list(dict.fromkeys(str(x) for x in labels))
    rank: dict[str, tuple[int, int]] = {}
    for pos, (name, spec) in enumerate(registry().items()):
        for sub, lab in enumerate((name, *spec.all_labels)):
            rank.setdefault(lab, (pos, sub))
    known = sorted((x for x in distinct if x in rank), key=lambda x: rank[x])
    return known + sorted(x for x in distinct if x not in rank)
