"""``run_bench``: every method, Monte Carlo and the cheap baselines on every regime, and the
leaderboard (what ``cotcredit bench`` does).

Per regime (its model loaded once) and split (``dev``, ``test``), in ``<output>/<regime>/<split>/``:

1. the labelled traces (``traces.jsonl``, copied there): the first problems of the regime's
   cached set (``regime_traces``: sampled from a seed on first use, extended and resumed like
   any ``cotcredit generate`` output), or of a set shipped with the package when it is large
   enough;
2. one segment per reasoning line (the checker's unit): ``segments.parquet``;
3. each method and named variant on that segmentation: ``<label>.parquet``; Monte Carlo with
   the size's rollouts per boundary, every rollout saved (``rollouts.parquet``: the ceiling);
   the expensive methods on the first traces only where the size caps them;
4. the metrics (``cotcredit.bench.metrics``): ``metrics.csv``.

Then per regime a ``cotcredit compare`` report of the held-out split (``<regime>/report/``) and
a trace explorer (``<regime>/explorer.html``), and over all regimes the leaderboard
(``cotcredit.bench.leaderboard``): ``leaderboard.md``, ``.csv``, ``.json``, ``results.csv``,
and the run's record ``bench.json``. Every step writes per trace and skips what it finished,
so an interrupted bench continues where it stopped. A method that fails on a regime is recorded
in one line (``BenchResult.failures``) and the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cotcredit.bench.labelled import LabelledTraces
from cotcredit.bench.sizes import SIZE_METHODS, BenchSize, bench_size, size_label
from cotcredit.bench.traces import cached_lines, check_cached, default_folder
from cotcredit.bench.variants import (
    REFERENCE,
    MethodRun,
    method_runs,
    read_variants,
    reads,
    regime_options,
    with_sets,
)
from cotcredit.errors import UserError
from cotcredit.options import option
from cotcredit.store import io
from cotcredit.store.claims import claim

SPLITS = ("dev", "test")
SEGMENTS_FILE = "segments.parquet"
ROLLOUTS_FILE = "rollouts.parquet"
EXPLORER_FILE = "explorer.html"
EMBEDDED = "embedded"  # what ``Regime.model()`` says for the embedded default model


@dataclass(frozen=True)
class BenchOptions:
    """What a bench runs and how (the options of ``cotcredit bench``)."""

    regimes: str | None = option(
        None, help="Comma-separated regimes [default: every regime whose model is there: "
        "unique, multipath, forecast, long, hops].")
    methods: str | None = option(
        None, help="Comma-separated methods and variants (mc always runs) [default: quick: "
        "rredcot,rredcot-rhat,loo; full: every registered method and variant].")
    size: str = option("quick", choices=("quick", "full"),
                       help="quick: a smoke test in minutes; full: the protocol's sizes (hours).")
    config: str | None = option(
        None, help="YAML/TOML/JSON file of named variants: {label: {method: rredcot, value: "
        "rhat}} (or a method's own options under its name).")
    cache: str | None = option(
        None, help="Folder of the regimes' labelled traces [default: $COTCREDIT_CACHE/bench, "
        "~/.cache/cotcredit/bench].")
    seed: int = option(0, help="Seed of the traces, Monte Carlo and the random baseline.")
    threads: int | None = option(
        None, help="torch CPU threads during the run [default: torch's]; 1 on a busy machine.")
    generate: bool = option(
        True, flag="--generate/--no-generate",
        help="Sample the traces a split lacks (--no-generate: a missing trace is an error).")
    overwrite: bool = option(
        False, help="Replace tables written with other options instead of refusing them.")
    reports: bool = option(
        True, flag="--reports/--no-reports",
        help="Write each regime's compare report and trace explorer (figures: the slow part "
        "of a quick run).")
    traces: str | None = option(
        None, help="Your own labelled traces as the regime (steps with a label, or an "
        "error_char field; --format processbench, ...), scored with --model (instead of "
        "--regimes).")
    split_field: str | None = option(
        None, help="With --traces: the field whose values (dev, test) split the traces "
        "[default: half the problems (problem_id, else the prompt) each].")
    sets: tuple[str, ...] = option(
        (), flag="--set", help="METHOD.OPTION=VALUE, repeatable (e.g. --set mc.rollouts=8); "
        "METHOD: a method or a variant's label.")


@dataclass
class BenchResult:
    """What ``run_bench`` did.

    Attributes:
        leaderboard: one row per regime and row label (``LEADERBOARD_COLUMNS``).
        results: every statistic of every regime and split (``RESULT_COLUMNS``).
        files: the leaderboard files (markdown, csv, json, results).
        failures: one line per method that failed on a regime (its results are missing).
        regimes: per regime: description, counts, best baselines, notes.
        seconds: wall time.
    """

    leaderboard: Any
    results: Any
    files: dict[str, Path] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    regimes: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0


def resolve_regimes(regimes: str | Sequence[Any] | None) -> list[Any]:
    """Regime objects from names (``"unique,hops"``), objects, or None (all, in order)."""
    from cotcredit.bench.regimes import REGIMES, get_regime

    if regimes is None:
        return list(REGIMES.values())
    items = regimes.split(",") if isinstance(regimes, str) else list(regimes)
    out = [get_regime(i.strip()) if isinstance(i, str) else i for i in items
           if not isinstance(i, str) or i.strip()]
    if not out:
        raise UserError("--regimes: name at least one regime")
    return out


def run_bench(
    regimes: str | Sequence[Any] | None = None,
    methods: str | Sequence[str] | None = None,
    *,
    output: str | Path = "bench",
    options: BenchOptions | None = None,
    model: Any = None,
    inputs: Any = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    **fields: Any,
) -> BenchResult:
    """Benchmark ``methods`` on ``regimes`` and write the leaderboard into ``output``.

    Args:
        regimes: names (comma-separated or a list) or regime objects (a ``Regime`` of one's
            own); None: ``options.regimes``, else every regime.
        methods: registered method names and variant labels; None: ``options.methods``, else
            the size's (``SIZE_METHODS``: quick runs rredcot, rredcot-rhat and loo; full every
            registered method and variant). Monte Carlo always runs: MC tracking's reference.
        output: the bench folder (resumed when it holds an earlier run with the same options).
        options: ``BenchOptions`` (defaults when None); ``fields`` override them by name, e.g.
            ``size="full"``, ``threads=1``; ``size`` may also be a ``BenchSize``.
        model: with ``traces`` (your own labelled traces as the regime,
            ``cotcredit.bench.labelled``): the model, a ``ModelOptions`` or a model name
            (None: the embedded model); inputs: the ``FieldOptions`` they are read with.
        progress: progress bars on the terminal.
        log: called with one line per step (default: silent).

    Returns the ``BenchResult``; methods that failed are in ``failures`` (the CLI exits
    nonzero when there are any, after writing everything else). Bad names, options and (with
    ``generate=False``) missing traces are ``UserError``s before any work.
    """
    from cotcredit.bench.leaderboard import leaderboard, write_leaderboard
    from cotcredit.bench.metrics import BASELINES
    from cotcredit.bench.splits import BUDGETS

    opts = dataclasses.replace(options or BenchOptions(), **fields)
    if opts.traces is not None:
        regimes = [_labelled(opts, regimes if regimes is not None else opts.regimes, model,
                             inputs)]
    elif model is not None or inputs is not None:
        raise UserError("--model and the field options apply to --traces (a regime brings "
                        "its own model)")
    bench = _Bench.start(regimes if regimes is not None else opts.regimes,
                         methods if methods is not None else opts.methods, opts, Path(output),
                         progress, log)
    parts = []
    with _torch_threads(opts.threads):
        for regime in bench.regimes:
            table = bench.run_regime(regime)
            if table is not None:
                parts.append(table)
    import pandas as pd

    results = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["regime", "split", "metric", "method", "statistic", "value", "ci_low",
                 "ci_high", "n"])
    labels = [lab for run in bench.runs if run.method != REFERENCE for lab in run.labels()]
    labels += [f"{REFERENCE}-{n}" for n in BUDGETS]  # Monte Carlo's smaller budgets
    reads = bench.reads()
    board = leaderboard(results, labels, BASELINES, REFERENCE, reads)
    files = write_leaderboard(board, results, bench.out, bench.facts, reads, BASELINES)
    seconds = time.perf_counter() - bench.t0
    record = {"regimes": [r.name for r in bench.regimes], "methods": [r.label for r in bench.runs],
              "size": opts.size if isinstance(opts.size, str) else dataclasses.asdict(opts.size),
              "seed": opts.seed, "seconds": round(seconds, 1), "failures": bench.failures}
    io.write_atomic(bench.out / "bench.json", json.dumps(record, indent=1, default=str) + "\n")
    return BenchResult(board, results, files, bench.failures, bench.facts, seconds)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """torch's CPU threads set to ``threads`` for the block (None: unchanged). On 2 busy
    cores, 2 threads made Monte Carlo 40 times slower than 1 (oversubscription)."""
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass
class _Bench:
    """One bench run: what it runs, where, and the failures and facts it collects."""

    regimes: list[Any]
    runs: list[MethodRun]
    opts: BenchOptions
    out: Path
    cache: Path
    progress: bool
    say: Callable[[str], None]
    t0: float
    failures: list[str] = field(default_factory=list)
    facts: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def start(cls, regimes, methods, opts: BenchOptions, out: Path, progress: bool,
              log: Callable[[str], None] | None) -> _Bench:
        """Everything checked before any model loads: names, size, options, the cache."""
        t0 = time.perf_counter()
        chosen = resolve_regimes(regimes)
        # every regime by default: those without a model are left out and named (a regime
        # named on purpose without one is a failure line, the others go on)
        absent = {} if regimes is not None else {
            r.name: why for r in chosen if (why := missing_model(r)) is not None}
        chosen = [r for r in chosen if r.name not in absent]
        if not chosen:
            raise UserError("no regime has a model to run: " + "; ".join(
                f"{n}: {why}" for n, why in absent.items()))
        for r in chosen:
            bench_size(opts.size, r.name)  # an unknown size
        if opts.threads is not None and opts.threads < 1:
            raise UserError(f"--threads must be at least 1, got {opts.threads}")
        if methods is None and isinstance(opts.size, str):
            methods = SIZE_METHODS.get(opts.size)
        runs = method_runs(methods, with_sets(read_variants(opts.config), opts.sets))
        if out.exists() and not out.is_dir():
            raise UserError(f"{out}: exists and is not a folder")
        root = Path(opts.cache).expanduser() if opts.cache is not None else default_folder()
        bench = cls(chosen, runs, opts, out, root / size_label(opts.size), progress,
                    log or (lambda line: None), t0)
        for r in resolve_regimes(None) if absent else ():
            if r.name in absent:
                bench.facts[r.name] = {"description": r.description, "missing": absent[r.name]}
                bench.say(f"{r.name}: left out ({absent[r.name]})")
        if not opts.generate:
            for r in chosen:
                if isinstance(r, LabelledTraces):
                    continue
                for split in SPLITS:
                    if bench.shipped(r, split) is None:
                        check_cached(r, split, bench.size(r), bench.cache)
        return bench

    def size(self, regime: Any) -> BenchSize:
        return bench_size(self.opts.size, regime.name)

    def reads(self) -> dict[str, str]:
        """What each method row reads (``cotcredit.bench.pairing``)."""
        return {lab: reads(run) for run in self.runs for lab in run.labels()}

    # ------------------------------------------------------------------------- a regime

    def run_regime(self, regime: Any):
        """One regime's splits, metrics and reports; its stacked metrics (None: none)."""
        import pandas as pd

        from cotcredit.bench.metrics import BASELINES
        from cotcredit.bench.pairing import best_baselines, best_facts
        from cotcredit.distributed import processes

        name = regime.name
        facts = self.facts.setdefault(name, {
            "description": getattr(regime, "description", ""),
            "hypothesis": getattr(regime, "hypothesis", ""),
            "size": dataclasses.asdict(self.size(regime)), "notes": []})
        why = missing_model(regime)
        if why is not None:
            self.failures.append(f"{name}: cannot run: {why}")
            return None
        wheres = {split: self.out / name / split for split in SPLITS}
        try:
            scorer = self._scorer(regime)
            traces = {}
            for split, where in wheres.items():
                with claim(where, "traces"):  # another process may be sampling them
                    traces[split] = self.traces(regime, split, scorer)
        except Exception as exc:  # noqa: BLE001 - a broken regime must not lose the others
            self.failures.append(f"{name}: could not prepare the regime ({_one_line(exc)})")
            return None
        # Every split's tables first, leaving those another process holds to it; then each
        # split's metrics, once that process has let go of them.
        scored = {split: self.score(regime, traces[split], where, scorer, self.runs, False)
                  for split, where in wheres.items()}
        tables = []
        for split, where in wheres.items():
            left = [run for run in self.runs if run.label in scored[split]
                    and scored[split][run.label] is None]
            if left:
                self.say(f"{name} {split}: waiting for {', '.join(r.label for r in left)} "
                         "(another process)")
                scored[split] |= self.score(regime, traces[split], where, scorer, left, True)
            done = {lab: table for lab, table in scored[split].items() if table is not None}
            metrics = self.metrics(regime, traces[split], where, done)
            if metrics is not None:
                tables.append(metrics.assign(regime=name, split=split))
        if self.opts.reports and processes().main:  # launched: the main process writes them
            try:
                with claim(self.out / name, "report", wait=False) as mine:
                    if mine:  # else another process writes them
                        self.report(regime, traces["test"])
            except Exception as exc:  # noqa: BLE001 - the leaderboard does not need it
                self.failures.append(f"{name}: the compare report or explorer failed "
                                     f"({_one_line(exc)})")
        if not tables:
            return None
        stacked = pd.concat(tables, ignore_index=True)
        facts["best"] = best_facts(best_baselines(stacked, BASELINES))
        if getattr(regime, "string_labels", ""):
            facts["string_labels"] = regime.string_labels
        return stacked

    def _scorer(self, regime: Any):
        from cotcredit.lm.loading import ModelOptions
        from cotcredit.pipeline.api import scorer_for

        location = regime.model()
        self.say(f"{regime.name}: loading model")
        given = getattr(regime, "model_options", None)  # a user's traces: their model
        return scorer_for(given if given is not None else ModelOptions(
            model=None if location == EMBEDDED else str(location)))

    def shipped(self, regime: Any, split: str) -> list[str] | None:
        """The split's traces from a set shipped with the package, when it has enough (one
        sample per problem: its first lines)."""
        from cotcredit.bench.traces import shipped_traces

        size = self.size(regime)
        path = shipped_traces(regime.name, split) if size.samples == 1 else None
        if path is None:
            return None
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        n = size.problems_for(split)
        return lines[:n] if len(lines) >= n else None

    def cached(self, regime: Any, split: str) -> list[str] | None:
        """The split's traces from the cache, when it holds every one of them (a larger set
        cached there is read, never rewritten: it may serve other work)."""
        lines, missing = cached_lines(regime, split, self.size(regime), self.cache)
        return None if missing else lines

    def traces(self, regime: Any, split: str, scorer: Any) -> Path:
        """The split's labelled traces (shipped, cached, or sampled into the cache where
        missing), copied into the bench folder (``<regime>/<split>/traces.jsonl``): the file
        its tables, metrics and reports were made from."""
        from cotcredit.bench.traces import regime_traces

        local = self.out / regime.name / split / "traces.jsonl"
        if isinstance(regime, LabelledTraces):
            self.say(f"{regime.name} {split}: {len(regime.records[split])} labelled traces")
            return regime.write(split, local)
        size = self.size(regime)
        lines, source = self.shipped(regime, split), "shipped"
        if lines is None:
            lines, source = self.cached(regime, split), "cached"
        if lines is None:
            problems = size.problems_for(split)
            self.say(f"{regime.name} {split}: sampling traces ({problems} problems x "
                     f"{size.samples} samples)")
            regime_traces(regime, split, problems, size.samples, self.cache,
                          seed=self.opts.seed, model=scorer)
            lines, source = self.cached(regime, split), "sampled"
            if lines is None:
                raise RuntimeError(f"{self.cache / regime.name / split}: the sampled traces "
                                   "do not cover the split")
        self.say(f"{regime.name} {split}: {len(lines)} {source} traces")
        text = "".join(ln + "\n" for ln in lines)
        if not local.exists() or local.read_text(encoding="utf-8") != text:
            local.parent.mkdir(parents=True, exist_ok=True)
            io.write_atomic(local, text)
        return local

    # ------------------------------------------------------------------------- a split

    def score(self, regime: Any, traces: Path, where: Path, scorer: Any,
              runs: Sequence[MethodRun], wait: bool) -> dict[str, Path | None]:
        """Segmentation, then ``runs`` on it: label -> table of each method that ran, None
        for one another process holds (with ``wait``: after it lets go, resumed here: a
        no-op when that process finished it). Failed methods are left out."""
        from cotcredit.pipeline.run import SEGMENTS
        from cotcredit.segmentation import SegmentOptions

        size, split = self.size(regime), where.name
        common = {"keep_rows": False, "progress": self.progress}
        segments = where / SEGMENTS_FILE
        with claim(where, "segments"):
            self.say(f"{regime.name} {split}: segmentation (one segment per step or line)")
            self._analysis(traces, scorer, segment_options=SegmentOptions(segments="lines"),
                           outputs={SEGMENTS: segments}, **common)
        done: dict[str, Path | None] = {}
        for run in runs:
            cap = size.traces_for(split, run.method)
            if cap == 0:
                continue
            with claim(where, run.label, wait) as mine:
                if not mine:
                    self.say(f"{regime.name} {split}: {run.label} is being scored by another "
                             "process; on to the next")
                    done[run.label] = None
                    continue
                if self._score_one(regime, run, traces, where, scorer, cap, segments, common):
                    done[run.label] = where / f"{run.label}.parquet"
        return done

    def _analysis(self, *args: Any, **kwargs: Any) -> None:
        """``run_analysis``, resuming a table of this run; ``--overwrite`` replaces only a table
        of another run (what it promises), so a sibling process's fresh table is never redone."""
        from cotcredit.pipeline.run import run_analysis
        from cotcredit.store.tables import OtherRunTable

        try:
            run_analysis(*args, **kwargs)
        except OtherRunTable:
            if not self.opts.overwrite:
                raise
            run_analysis(*args, overwrite=True, **kwargs)

    def _score_one(self, regime: Any, run: MethodRun, traces: Path, where: Path, scorer: Any,
                   cap: int | None, segments: Path, common: dict) -> bool:
        """One method on one split (resumed per trace); False when it failed."""
        from cotcredit.pipeline.run import InputOptions

        size, split = self.size(regime), where.name
        table = where / f"{run.label}.parquet"
        rollouts = where / ROLLOUTS_FILE if run.method == REFERENCE else None
        try:
            options = regime_options(run, regime.exit_string, regime.sampling, size.rollouts,
                                     self.opts.seed, rollouts)
            self.say(f"{regime.name} {split}: {run.label}")
            self._analysis(traces, scorer, methods={run.method: options}, segments_file=segments,
                         inputs=InputOptions(max_traces=cap),
                         outputs=dict.fromkeys(run.labels(), table), timings=True,
                         rename=run.rename() or None, **common)
        except Exception as exc:  # noqa: BLE001 - one method failing keeps the others
            self.failures.append(f"{regime.name}: {run.label} failed on the {split} split "
                                 f"({_one_line(exc)})")
            (where / f"{run.label}.error.txt").write_text(traceback.format_exc())
            return False
        return True

    def metrics(self, regime: Any, traces: Path, where: Path, scored: dict[str, Path]):
        """The split's metrics from its tables (``metrics.csv``); None without tables."""
        from cotcredit.bench.splits import (
            read_records,
            read_split,
            sibling_note,
            split_facts,
            split_metrics,
        )

        if not scored:
            return None
        size = self.size(regime)
        records = read_records(traces)
        data = read_split(where, list(dict.fromkeys(scored.values())), records)
        m = split_metrics(data, n_boot=size.n_boot, seed=self.opts.seed, splits=size.splits)
        io.write_atomic(where / "metrics.csv", m.table.to_csv(index=False))
        if where.name == "test":
            facts = self.facts[regime.name]
            facts |= split_facts(m, data.labels)
            notes = [*facts["notes"], *m.notes, sibling_note(records),
                     *getattr(regime, "notes", [])]
            facts["notes"] = [n for n in dict.fromkeys(notes) if n]
        return m.table

    def report(self, regime: Any, traces: Path) -> None:
        """``cotcredit compare``'s report of the held-out split with every cheap baseline
        (``<regime>/report``; its text-free ones fitted to Monte Carlo) and the trace explorer
        with ``refdiff`` and ``entropy`` beside the methods
        (``<regime>/explorer.html``); skipped when newer than every table (a resumed bench)."""
        from cotcredit.bench.metrics import BASELINES
        from cotcredit.report.compare import compare_scores

        folder = self.out / regime.name
        test = folder / "test"
        tables = [test / f"{r.label}.parquet" for r in self.runs
                  if (test / f"{r.label}.parquet").exists()]
        if not tables:
            return
        report, explorer = folder / "report", folder / EXPLORER_FILE
        newest = max(f.stat().st_mtime for t in tables for f in io.files_of(t))
        if all(p.exists() and p.stat().st_mtime > newest for p in (report / "report.md",
                                                                   explorer)):
            return
        size = self.size(regime)
        self.say(f"{regime.name}: compare report and explorer")
        try:
            compare_scores(tables, report, n_boot=size.n_boot, seed=self.opts.seed,
                           baselines=",".join(BASELINES), traces=_records(traces),
                           splits=size.splits, explorer=False)
        except UserError as exc:
            self.facts[regime.name]["notes"].append(f"compare report not written: {exc}")
        _write_explorer(tables, traces, explorer, self.opts.seed)


def _labelled(opts: BenchOptions, regimes: Any, model: Any, inputs: Any) -> LabelledTraces:
    """The ``--traces`` regime, its labels checked (before any model loads)."""
    from cotcredit.data.trace import FieldOptions
    from cotcredit.lm.loading import ModelOptions

    if regimes is not None:
        raise UserError("--traces and --regimes: give one or the other")
    if isinstance(model, str) or model is None:
        model = ModelOptions(model=model)
    path = Path(opts.traces).expanduser()
    if not path.exists():
        raise UserError(f"--traces: {path}: no such file")
    regime = LabelledTraces(path, model, inputs or FieldOptions(), opts.split_field)
    regime.read()
    return regime


def missing_model(regime: Any) -> str | None:
    """Why ``regime`` cannot run here (its ``unavailable`` text, or its checkpoint folder has
    no model), or None when it can."""
    why = getattr(regime, "unavailable", "")
    if why:
        return why
    location = str(regime.model())
    # a model id of the hub or the embedded model is not a folder to look for
    if location != EMBEDDED and Path(location).is_absolute() and not (
            Path(location) / "config.json").exists():
        return f"no checkpoint at {location}"
    return None


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, UserError) else f"{type(exc).__name__}: {text}"


def _write_explorer(tables: list[Path], traces: Path, path: Path, seed: int) -> None:
    """The explorer of the held-out split: every method, refdiff and entropy beside them."""
    import pandas as pd

    from cotcredit.bench.metrics import metric_baselines
    from cotcredit.bench.splits import trace_departures
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report.explorer import write_explorer

    scores = load_scores(tables)
    records = _records(traces)
    extra, _ = metric_baselines(scores, ("refdiff", "refdiff-siblings", "entropy"), REFERENCE,
                                departures=trace_departures(records), seed=seed)
    methods = list(dict.fromkeys([*scores["method"], *extra["method"]]))
    write_explorer(pd.concat([scores, extra], ignore_index=True),
                   {str(r["id"]): r for r in records}, path, methods=methods,
                   reference=REFERENCE)
