"""`compare`: correlate several methods' scores on one shared segmentation and write the report.

The scores come from one of three places:

* a traces file: the methods are run here, on one segmentation (``run_methods``);
* score tables named by the caller (``compare_scores``);
* the score tables already in a folder (``cotcredit.pipeline.scores.find_score_tables``).
"""


from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cotcredit.errors import UserError
from cotcredit.methods import get_method, parse_methods, registry
from cotcredit.options import build_options, option, parse_sets, read_config
from cotcredit.pipeline.run import (
    SEGMENTS,
    InputOptions,
    RunSummary,
    check_inputs,
    load_traces,
    run_analysis,
)
from cotcredit.pipeline.scores import (  # (ScoreTablesNotFound: re-exported, older imports)
    ScoreTablesNotFound,  # noqa: F401
    find_score_tables,
    labels_in,
)
from cotcredit.segmentation import SegmentOptions
from cotcredit.store import io

if TYPE_CHECKING:  # the report stack (pandas, scipy, matplotlib) loads when a report is made
    import pandas as pd

    from cotcredit.lm import Scorer
    from cotcredit.report.explorer import ExplorerFile
    from cotcredit.report.localization import Localization
    from cotcredit.report.rollouts import RolloutAnalysis
    from cotcredit.report.sections import ReportFiles
    from cotcredit.report.stats import Correlations

#: Default column of first-error offsets (``cotcredit.report.localization.ERROR_FIELD``).
ERROR_FIELD = "error_char"

#: The report folder inside the folder searched for score tables.
REPORT_FOLDER = "report"


@dataclass
class CompareResult:
    """What `compare` read, computed and wrote."""

    scores: pd.DataFrame  # every compared method's rows
    correlations: Correlations
    files: ReportFiles
    sources: dict[str, Path] = field(default_factory=dict)  # row label -> table it came from
    run: RunSummary | None = None  # the analysis run, when compare ran the methods
    localization: Localization | None = None  # when the tables carry error offsets
    rollouts: RolloutAnalysis | None = None  # ceiling and rollout equivalence
    explorer: ExplorerFile | None = None  # explorer.html, unless turned off

    def costs(self) -> pd.DataFrame | None:
        """Mean seconds and tokens per trace of each method (None: no table records costs)."""
        from cotcredit.report.costs import cost_summary

        return cost_summary(self.scores)


@dataclass
class Analysis:
    """The report's statistics before anything is written (``analyse``)."""

    rows: pd.DataFrame  # the methods' rows, credits as defined
    baseline_rows: pd.DataFrame  # the baselines' rows
    correlations: Correlations
    localization: Localization | None
    rollouts: RolloutAnalysis | None

    @property
    def scores(self) -> pd.DataFrame:
        """Every compared row, baselines included (built on demand: at dataset scale it is
        a copy of the whole table)."""
        import pandas as pd

        return pd.concat([self.rows, self.baseline_rows], ignore_index=True)




def shortcut_fields() -> dict[str, tuple[str, str]]:
    """compare's shortcut flags from the registry: flag name -> (method, option field)."""
    return {flag: (name, target) for name, spec in registry().items()
            for flag, target in spec.shortcuts.items()}


def _shortcut_options() -> type:
    """A dataclass with one optional field per shortcut flag, typed and documented like the
    method option it sets (None: the method's default)."""
    import dataclasses
    import typing

    fields = []
    for flag, (name, target) in shortcut_fields().items():
        cls = registry()[name].options_type
        f = {f.name: f for f in dataclasses.fields(cls)}[target]
        hint = typing.get_type_hints(cls)[target]
        fields.append((flag, hint | None, option(None, help=f"{name}: {f.metadata['help']}")))
    return dataclasses.make_dataclass("Shortcuts", fields, frozen=True)


Shortcuts = _shortcut_options()


def method_options(
    methods: str | list[str],
    config: Path | None = None,
    sets: list[str] | None = None,
    **shortcuts: Any,
) -> dict[str, Any]:
    """Options per method from a config file, `--set` items and a few CLI shortcuts."""
    names = parse_methods(methods)
    resolved = []
    for n in names:
        spec = get_method(n)  # accepts labels such as gradient-ig
        if spec.name not in resolved:
            resolved.append(spec.name)
    mapping: dict[str, dict[str, Any]] = {n: {} for n in resolved}
    if config is not None:
        for name, opts in read_config(config).items():
            if name not in registry():
                raise UserError(
                    f"{config}: unknown method '{name}' (known: {', '.join(registry())})"
                )
            if name in mapping:
                mapping[name].update(opts)
    for name, opts in parse_sets(sets).items():
        if name not in mapping:
            raise UserError(f"--set {name}.…: method '{name}' is not among --methods")
        mapping[name].update(opts)
    short = shortcut_fields()
    for key, value in shortcuts.items():
        if key not in short:
            raise UserError(f"compare: unknown shortcut '{key}' (known: {', '.join(short)})")
        name, target = short[key]
        if value is not None and name in mapping:
            mapping[name][target] = value
    kinds = [n.split("-", 1)[1] for n in names if n.startswith("gradient-")]
    if kinds and "kinds" not in mapping.get("gradient", {}):
        mapping["gradient"]["kinds"] = ",".join(kinds)
    return {n: build_options(get_method(n).options_type, mapping[n], n) for n in resolved}


def run_methods(
    traces,
    scorer: Scorer,
    options: dict[str, Any],
    out_dir: Path,
    *,
    segment_options: SegmentOptions | None = None,
    segments_file: Path | None = None,
    inputs: InputOptions | None = None,
    overwrite: bool = False,
    progress: bool = False,
    timings: bool = False,
) -> tuple[RunSummary, list[Path]]:
    """Run every method on one segmentation per trace; one Parquet file per method in out_dir."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: exists and is not a folder")
    outputs = {SEGMENTS: out_dir / "segments.parquet"}
    outputs.update({name: out_dir / f"{name}.parquet" for name in options})
    summary = run_analysis(
        traces,
        scorer,
        methods=options,
        segment_options=segment_options,
        segments_file=segments_file,
        outputs=outputs,
        inputs=inputs,
        overwrite=overwrite,
        progress=progress,
        keep_rows=False,
        timings=timings,
    )
    return summary, [outputs[name] for name in options]


def report_columns(error_field: str = ERROR_FIELD) -> tuple[str, ...]:
    """The score-table columns `compare` reads besides the required ones (a table without one
    is read without it): the value-based methods' value columns, Monte Carlo's split halves,
    rollout counts and standard errors, outcomes, costs, the entropy baseline's column and the
    first-error offsets. A wide table's other columns are not read."""
    from cotcredit.report.baselines import ENTROPY_COLUMN
    from cotcredit.report.costs import COST_COLUMNS
    from cotcredit.report.rollouts import COUNT_COLUMNS
    from cotcredit.report.stats import HALF_COLUMNS

    values = [c for spec in registry().values() if spec.value_columns for c in spec.value_columns]
    return tuple(dict.fromkeys((*values, *HALF_COLUMNS, *COUNT_COLUMNS, "stderr", "outcome",
                                *COST_COLUMNS, ENTROPY_COLUMN, error_field)))


def analyse(
    scores: pd.DataFrame,
    *,
    reference: str = "mc",
    n_boot: int = 2000,
    min_segments: int = 3,
    seed: int = 0,
    credit: str = "differences",
    baselines: str | Sequence[str] = "position",
    error_field: str = ERROR_FIELD,
    rollouts: str | Path | None = None,
    splits: int = 20,
    sources: Mapping[str, Path] | None = None,
    checked: bool = False,
    departures: Mapping[str, Any] | None = None,
) -> Analysis:
    """Every statistic of the report from loaded score rows (``load_scores``): the credit
    definition, the baselines, the correlations with paired differences, first-error
    localization (when the rows carry ``error_field``) and rollout equivalence with the
    ceilings (when the reference is Monte Carlo with counts: a rollouts table, given or beside
    its table, or the table's own counts). Inputs are checked before anything is computed;
    ``checked``: the rows come from ``load_scores`` (normalized, one segmentation);
    ``departures``: where each trace departs from its known paths, per string comparison
    (``refdiff``, ``refdiff-solutions``, ``refdiff-siblings``; or one Series: ``refdiff``'s;
    ``report.baselines.departures_from_traces``)."""
    import pandas as pd

    from cotcredit.pipeline.scores import check_segmentations, normalize
    from cotcredit.report.baselines import baseline_rows, parse_baselines
    from cotcredit.report.credit import trace_outcomes, value_credit, value_methods
    from cotcredit.report.localization import error_offsets, localize
    from cotcredit.report.rollouts import (
        COUNT_COLUMNS,
        counts_from_mc,
        counts_from_rollouts,
        find_rollouts,
        read_rollouts,
        rollout_analysis,
    )
    from cotcredit.report.stats import HALF_COLUMNS, correlate

    names = parse_baselines(baselines)
    if not checked:
        scores = normalize(scores)
        check_segmentations(scores)
    offsets = error_offsets(scores, error_field, sources)
    credited = value_credit(scores, credit)
    base_rows, added, notes = baseline_rows(credited, names, reference, departures=departures,
                                            seed=seed)
    # The statistics read a few columns: concatenating only those keeps a second copy of a
    # large table (its texts above all) out of memory.
    wanted = ["trace_id", "segment", "method", "score", "char_start", "char_end",
              *(c for c in (*HALF_COLUMNS, error_field) if c in credited.columns)]
    with_baselines = pd.concat([credited[wanted], base_rows[[c for c in wanted
                                                              if c in base_rows]]],
                               ignore_index=True)
    corr = correlate(
        with_baselines, n_boot=n_boot, seed=seed, min_segments=min_segments,
        reference=reference, baselines=added, checked=True,
        params={"credit": credit, "value_methods": sorted(value_methods(scores))},
    )
    corr.params["notes"] = notes
    localization = None
    if offsets is not None:
        localization = localize(with_baselines, offsets, corr.methods, baselines=added,
                                n_boot=n_boot, seed=seed, error_field=error_field)
    ro = None
    if corr.reference is not None:
        # The counts' columns only: a copy of the reference's rows with every column (its
        # texts above all) is what a large table cannot afford twice.
        wanted = ["trace_id", "segment", *(c for c in ("value_before", *COUNT_COLUMNS)
                                           if c in scores.columns)]
        ref_rows = scores.loc[scores["method"] == corr.reference, wanted]
        path = find_rollouts((sources or {}).get(corr.reference), rollouts)
        if path is not None:
            policy = ref_rows.get("truncated_policy")
            drop = policy is not None and (policy.astype(str) == "drop").any()
            counts, source = counts_from_rollouts(read_rollouts(path), drop), str(path)
        else:
            counts, source = counts_from_mc(ref_rows), f"{corr.reference} table"
        if len(counts):
            ro = rollout_analysis(
                with_baselines, counts, corr.compared(), credit=credit,
                outcomes=trace_outcomes(scores), splits=splits, n_boot=n_boot, seed=seed,
                source=source,
            )
    return Analysis(credited, base_rows, corr, localization, ro)


def compare_scores(
    paths: Sequence[str | Path],
    out_dir: str | Path,
    *,
    methods: Sequence[str] | None = None,
    sources: Mapping[str, Path] | None = None,
    explorer: bool = True,
    max_traces_explorer: int | None = None,
    traces: Any = None,
    **options: Any,
) -> CompareResult:
    """Load score tables (refusing mismatched segmentations), analyse (``analyse``: options
    reference, n_boot, min_segments, seed, credit, baselines, error_field, rollouts, splits),
    write the report and, with ``explorer``, the trace explorer (``explorer.html``, at most
    ``max_traces_explorer`` traces; ``traces``: the traces' records, for prompts and final
    answers, and for the ``refdiff`` baseline their reference solutions; see
    ``cotcredit.report.explorer``).

    ``methods`` keeps only those row labels' rows (a table may hold others); ``sources`` (label
    -> table) is recorded in the report's notes and the result.
    """
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.writer import write_report

    scores = load_scores(list(paths), methods,
                         columns=report_columns(options.get("error_field", ERROR_FIELD)))
    if sources is None:
        sources = _table_of(list(paths), scores)
        named = False
    else:
        named = True
    if traces is not None and "departures" not in options:
        from cotcredit.report.baselines import REFDIFF, departures_from_traces, parse_baselines

        wanted = [b for b in parse_baselines(options.get("baselines", "position"))
                  if b in REFDIFF] or ["refdiff"]
        traces = list(traces)
        options["departures"] = {b: departures_from_traces(traces, REFDIFF[b]) for b in wanted}
    result = analyse(scores, sources=sources, checked=True, **options)
    # Inputs are named relative to the report folder: a report is read next to its tables and
    # must not carry the path of the machine that made it.
    where = Path(out_dir)
    if named:
        shown = ", ".join(f"{lab}: {io.relative(p, where)}" for lab, p in sources.items())
        notes = {"score tables": shown}
    else:
        notes = {"score files": ", ".join(io.relative(p, where) for p in paths)}
    if result.rollouts is not None:
        src = result.rollouts.source
        notes["rollout counts"] = (io.relative(Path(src), where) if Path(src).exists() else src)
    for note in result.correlations.params.get("notes", []):
        notes.setdefault("baselines", note)
    compared = result.scores
    files = write_report(compared, result.correlations, Path(out_dir), notes=notes,
                         localization=result.localization, rollouts=result.rollouts)
    page = None
    if explorer:
        from cotcredit.report.explorer import EXPLORER_FILE, write_explorer

        same = {k: options[k] for k in ("reference", "credit", "error_field", "min_segments")
                if k in options}
        page = write_explorer(scores, traces, Path(out_dir) / EXPLORER_FILE,
                              max_traces=max_traces_explorer, **same)
    return CompareResult(compared, result.correlations, files,
                         dict(sources or {}) if named else {}, localization=result.localization,
                         rollouts=result.rollouts, explorer=page)


def _table_of(paths: list[str | Path], scores: pd.DataFrame) -> dict[str, Path]:
    """Row label -> the table it came from (for messages and the rollouts beside mc)."""
    found: dict[str, Path] = {}
    for p in paths:
        for label in labels_in(Path(p)) or {}:
            found.setdefault(label, Path(p))
    return found


def compare_folder(
    folder: str | Path = ".",
    methods: str | Sequence[str] = "rredcot,mc,loo",
    out_dir: str | Path | None = None,
    **kwargs: Any,
) -> CompareResult:
    """Correlate the methods' score tables found in ``folder`` (``find_score_tables``); the
    report goes to ``out_dir`` (default ``folder/report``). ``kwargs`` go to
    ``compare_scores`` (reference, n_boot, min_segments, seed, credit, baselines, ...)."""
    sources = find_score_tables(folder, methods)
    out = Path(out_dir) if out_dir is not None else Path(folder) / REPORT_FOLDER
    paths = list(dict.fromkeys(sources.values()))
    return compare_scores(paths, out, methods=list(sources), sources=sources, **kwargs)


@dataclass(frozen=True)
class ReportOptions:
    """How `compare` summarises agreement between methods."""

    reference: str = option("mc", help="Method the baselines, paired differences, position and "
                            "top-1 analyses compare against.")
    bootstrap: int = option(2000, help="Bootstrap resamples of traces for the CIs.")
    min_segments: int = option(3, help="Traces with fewer segments are counted, not correlated.")
    credit: str = option("differences", help="What is correlated for value-based methods "
                         "(rredcot, mc): differences (v_k - v_(k-1), no start value, no terminal "
                         "correction), return (plus the start value first and outcome - last "
                         "value last) or score (as written).")
    baselines: str = option("position", help="Baselines added as rows (comma-separated; none: "
                            "no baseline): position, position-length, uniform, random (read no "
                            "text); refdiff (the first line that departs from the reference "
                            "solution: needs the traces), entropy (the model's own mean token "
                            "entropy per segment).")
    error_column: str = option(ERROR_FIELD, help="Table column with the first wrong step's "
                               "character offset (-1: no error): adds the localization table.")
    rollouts_table: str | None = option(None, help="Saved Monte Carlo rollouts for the ceiling and "
                                  "rollout equivalence [default: rollouts.parquet beside the mc "
                                  "table, else the mc table's counts].")
    splits: int = option(20, help="Random held-out splits averaged in the rollout equivalence.")
    explorer: bool = option(True, flag="--explorer/--no-explorer",
                            help="Write explorer.html, the interactive trace explorer, into the "
                            "report folder.")
    max_traces_explorer: int | None = option(None, help="At most this many traces in "
                                             "explorer.html (kept: those with a labelled error, "
                                             "then the methods' strongest disagreement) "
                                             "[default: as many as fit in about 20 MB].")
    explorer_traces: str | None = option(None, help="The traces file of the score tables, for "
                                         "the explorer's prompts and final answers and the "
                                         "refdiff baseline's reference solutions [default: the "
                                         "traces input; without one, texts rebuilt from the "
                                         "segments].")


def compare(
    traces=None,
    methods: str | Sequence[str] = "rredcot,mc,loo",
    output: str | Path | None = None,
    *,
    scores: Sequence[str | Path] | None = None,
    folder: str | Path = ".",
    model: Any = None,
    options: Mapping[str, Any] | None = None,
    config: str | Path | None = None,
    sets: Sequence[str] | None = None,
    shortcuts: Mapping[str, Any] | None = None,
    report: ReportOptions | None = None,
    segment_options: SegmentOptions | None = None,
    segments_file: str | Path | None = None,
    inputs: InputOptions | None = None,
    overwrite: bool = False,
    progress: bool = False,
    timings: bool = False,
) -> CompareResult | None:
    """`cotcredit compare`: correlate methods on one segmentation and write the report.

    Three ways to get the scores:

    * ``traces`` (a JSONL path or traces): run ``methods`` on one segmentation, their tables and
      the report going to ``output`` (default ``report``). Method options: ``options`` (name ->
      options object), else built from ``config`` (YAML/TOML/JSON), ``sets``
      ("mc.rollouts=4") and ``shortcuts`` ({"rollouts": 4}, see `shortcut_fields`).
    * ``scores``: the named score tables; report in ``output`` (default ``report``).
    * neither: the score tables of ``methods`` found in ``folder`` (`find_score_tables`);
      report in ``output`` (default ``folder/report``).

    The report folder also gets ``explorer.html``, the interactive trace explorer
    (``report.explorer``, ``report.max_traces_explorer``; prompts and final answers from the
    traces input or ``report.explorer_traces``, read with ``inputs``' field names).

    Under a launcher every process scores its share and only the main process writes the
    report (the others return None).
    """
    report = report or ReportOptions()
    # The report's options are checked before any method runs (or any model loads).
    from cotcredit.report.baselines import REFDIFF, REFDIFF_NEEDS_TRACES, parse_baselines
    from cotcredit.report.credit import CREDITS

    if (set(parse_baselines(report.baselines)) & set(REFDIFF) and traces is None
            and report.explorer_traces is None):
        raise UserError(REFDIFF_NEEDS_TRACES)
    if report.credit not in CREDITS:
        raise UserError(f"--credit: unknown definition {report.credit!r} (known: "
                        f"{', '.join(CREDITS)})")
    if report.splits < 1:
        raise UserError(f"--splits must be at least 1, got {report.splits}")
    if report.max_traces_explorer is not None and report.max_traces_explorer < 1:
        raise UserError("--max-traces-explorer must be at least 1 (--no-explorer: no explorer)")
    if report.explorer_traces is not None and not Path(report.explorer_traces).exists():
        raise UserError(f"--explorer-traces: {report.explorer_traces}: no such file")
    stats = {"reference": report.reference, "n_boot": report.bootstrap,
             "min_segments": report.min_segments, "credit": report.credit,
             "baselines": report.baselines, "error_field": report.error_column,
             "rollouts": report.rollouts_table, "splits": report.splits,
             "explorer": report.explorer, "max_traces_explorer": report.max_traces_explorer}

    # The explorer's prompts and final answers, refdiff's solutions (read after the run).
    wants_traces = report.explorer or bool(set(parse_baselines(report.baselines)) & set(REFDIFF))

    def records(source):
        if not wants_traces or source is None:
            return None
        return load_traces(source, inputs or InputOptions())[0]

    running = {"model": model, "options": options, "config": config, "sets": sets,
               "shortcuts": shortcuts, "segments_file": segments_file}
    given = [k for k, v in running.items() if v]
    if traces is None and scores is None:
        if given:
            raise UserError(f"compare: {', '.join(given)} only apply when running methods on "
                            "a traces file")
        return compare_folder(folder, methods, output, traces=records(report.explorer_traces),
                              **stats)
    if scores is not None:
        if traces is not None or given:
            raise UserError(
                "compare --scores: give score tables only (no traces or method options)")
        return compare_scores(list(scores), output or REPORT_FOLDER,
                              traces=records(report.explorer_traces), **stats)
    from cotcredit.pipeline.api import scorer_for

    out = Path(output) if output is not None else Path(REPORT_FOLDER)
    opts = dict(options) if options else method_options(
        methods, Path(config) if config else None, list(sets or []), **(shortcuts or {})
    )
    check_inputs(traces, methods=opts, segment_options=segment_options,
                 segments_file=segments_file, inputs=inputs)  # before the model loads
    summary, files = run_methods(
        traces, scorer_for(model, progress), opts, out, segment_options=segment_options,
        segments_file=segments_file, inputs=inputs, overwrite=overwrite, progress=progress,
        timings=timings,
    )
    if not summary.main:
        return None
    result = compare_scores(files, out, traces=records(report.explorer_traces or traces),
                            **stats)
    result.run = summary
    return result
