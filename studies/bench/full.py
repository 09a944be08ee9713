"""The benchmark's full run, version 2 (PROTOCOL.md): every table from seeds, the compact tables
and the leaderboard.

    python -m studies.bench.full                 # every step (hours on 2 cores; each resumes)
    python -m studies.bench.full run             # unique, multipath, forecast, long, groups
    python -m studies.bench.full hops            # hops: the lookup study's tables (hops.py)
    python -m studies.bench.full tables          # the compact tables, from the run's tables
    python -m studies.bench.full leaderboard     # the leaderboard, from the compact tables
    python -m studies.bench.full publish --runs RUN... --hops HOPS   # tables + leaderboard

`publish` is the step that makes the published leaderboard from whatever a run has finished
(the two steps below in one command; rerun it when the run finishes more): each regime's
held-out split is read from the first folder of `--runs` holding it, and only the tables that
score every one of its traces are read. A regime whose held-out split lacks a row (not yet
scored, or scored on part of its traces) is marked ‡ on the leaderboard, which lists the rows
it lacks; a regime with no held-out split yet is listed as pending; a development split the
run has not finished (no `metrics.csv`) is left out, so each row's baseline is chosen on the
held-out split there and the leaderboard says so. The version-2 run, for instance:

    python -m studies.bench.full publish --runs /work/runs/bench /work/runs/bench-groups \
        --hops /work/runs/bench-hops

1. `run`: `cotcredit.bench.run_bench` at the full size (`cotcredit.bench.sizes`) on the organism
   regimes and `groups`, with the value variants (`value_variants.yaml`), into `--run`
   (default `studies/bench/run`, ignored): the traces (sampled from seed 0 into `--cache`),
   one segment per line, every method, Monte Carlo with every rollout saved;
2. `hops`: `hops.py` into `<run>/hops`;
3. `tables`: each regime's splits as compact tables (`cotcredit.bench.compact`) in
   `studies/bench/tables/` (tracked): the held-out splits with every row's credits, the
   development splits with what the choice of baselines reads; `trace_sets.json`, the trace
   sets' counts; `--runs` takes the run folders to read, the first holding a regime wins;
4. `leaderboard`: every metric of every split from the compact tables (`split_metrics`), each
   row paired with its baseline, into the run folder (leaderboard.md/.csv/.json,
   comparisons.md/.csv, results.csv: every statistic), and leaderboard.md, leaderboard.csv,
   comparisons.md and leaderboard.png into `studies/bench/` (tracked; the tracked size is
   bounded, and comparisons.md holds what comparisons.csv does).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "value_variants.yaml"
TABLES = HERE / "tables"
ORGANISMS = ("unique", "multipath", "forecast", "long", "groups")
SPLITS = ("dev", "test")
#: The tables a split folder holds besides the methods'.
NOT_METHODS = ("segments.parquet", "rollouts.parquet")
#: The leaderboard's files tracked beside this script (the figure too).
TRACKED = ("leaderboard.md", "leaderboard.csv", "comparisons.md")


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def run_step(run: Path, cache: Path | None, regimes: list[str]) -> int:
    """Step 1: the bench on the organism regimes and groups."""
    from cotcredit.bench import run_bench

    result = run_bench(",".join(regimes), None, size="full", threads=1, output=run,
                       cache=cache, config=str(CONFIG), reports=False, log=say)
    for line in result.failures:
        say(f"failed: {line}")
    return 1 if result.failures else 0


def split_folder(runs: list[Path], regime: str, split: str) -> Path | None:
    """The first run folder's split of ``regime`` (None: no run holds it)."""
    return next((r / regime / split for r in runs
                 if (r / regime / split / "segments.parquet").exists()), None)


def renamed(where: Path) -> dict[str, str]:
    """The relabelling of a split's tables: ``RENAMED`` where they were written before the row
    labels were renamed (its ``rredcot`` table is the one-reference estimator, or it holds a
    ``rredcot-siblings`` table), else none."""
    from cotcredit.bench.variants import RENAMED
    from cotcredit.store import io

    if (where / "rredcot-siblings.parquet").exists():
        return dict(RENAMED)
    if (where / "rredcot.parquet").exists():
        options = io.read_metadata(where / "rredcot.parquet").get("methods", {}).get("rredcot")
        if (options or {}).get("references") == "solution":
            return dict(RENAMED)
    return {}


def complete_tables(tables, ids: set[str], rename: dict[str, str] | None = None):
    """The entries of ``tables`` (a path, or a path and the row labels to read from it) that
    score every trace of ``ids``, each reduced to its complete labels, and label -> "k of n
    traces" for the labels that score only part of them."""
    from cotcredit.store import io

    rename = rename or {}
    done, partial = [], {}
    for entry in tables:
        path, wanted = entry if isinstance(entry, tuple) else (entry, None)
        found = io.read_table(path, ["trace_id", "method"]).to_pandas()
        found = found.loc[found["method"].isin(wanted)] if wanted is not None else found
        cover = {str(m): set(g.astype(str)) & ids for m, g in found.groupby("method")["trace_id"]}
        whole = [m for m, c in cover.items() if len(c) == len(ids)]
        partial |= {rename.get(m, m): f"{len(c)} of {len(ids)} traces"
                    for m, c in cover.items() if len(c) < len(ids)}
        if len(whole) == len(cover) and wanted is None:
            done.append(path)
        elif whole:
            done.append((path, whole))
    return done, partial


def pending_note(expected, present, partial: dict[str, str]) -> str:
    """What a held-out split lacks of the rows ``expected`` ("" when nothing)."""
    absent = [m for m in expected if m not in present and m not in partial]
    parts = []
    if absent:
        parts.append("not yet scored: " + ", ".join(absent))
    if partial:
        parts.append("scored on part of the traces, left out: " + ", ".join(
            f"{m} ({why})" for m, why in partial.items()))
    return "; ".join(parts)


def read_organism(where: Path, expected=None):
    """A bench split's ``SplitData`` (None: no row scores every trace yet), its records and
    what it lacks of the rows ``expected`` (``pending_note``; every table is read when
    ``expected`` is None). Tables written before the row labels were renamed are relabelled
    (``renamed``)."""
    from cotcredit.bench.splits import read_records, read_split

    tables = sorted(p for p in where.glob("*.parquet") if p.name not in NOT_METHODS)
    rename = renamed(where)
    records = read_records(where / "traces.jsonl")
    note = ""
    if expected is not None:
        tables, partial = complete_tables(tables, {str(r["id"]) for r in records}, rename)
        if not tables:
            return None, records, pending_note(expected, set(), partial)
        data = read_split(where, tables, records, rename=rename)
        note = pending_note(expected, set(data.row_labels()), partial)
    else:
        data = read_split(where, tables, records, rename=rename)
    return data, records, note


def expected_rows() -> list[str]:
    """The rows every organism regime's held-out split scores: each method and variant, Monte
    Carlo (its budgets follow from its rollouts)."""
    methods, _ = row_reads()
    return [m for m in methods if not m.startswith("mc-")] + ["mc"]


def tables_step(runs: list[Path], hops_out: Path | None, dest: Path = TABLES) -> None:
    """Step 3: the compact tables and the trace sets' counts."""
    from cotcredit.bench.compact import write_split
    from cotcredit.bench.splits import sibling_note
    from cotcredit.bench.traces import summarize
    from studies.bench import hops

    counts: dict = {}
    for regime in ORGANISMS:
        for split in SPLITS:
            where = split_folder(runs, regime, split)
            if where is not None and split == "dev" and not (where / "metrics.csv").exists():
                say(f"{regime} dev: not finished (no metrics.csv), left out")
                continue
            if where is None:
                say(f"{regime} {split}: no run holds it")
                continue
            test = split == "test"
            data, records, pending = read_organism(where, expected_rows() if test else None)
            if data is None:
                say(f"{regime} {split}: no row scores every trace yet ({pending}), left out")
                continue
            write_split(data, dest / regime / split, credits=test)
            counts.setdefault(regime, {})[split] = summarize(records)
            if test:
                _facts(dest / regime, [sibling_note(records)], pending)
            say(f"{regime} {split}: {len(records)} traces, {data.row_labels()}"
                + (f"; incomplete: {pending}" if pending else ""))
    if hops_out is not None and (hops_out / "lookup" / "segments.parquet").exists():
        data, records, pending, aliases = hops.read(hops_out, complete=True)
        write_split(data, dest / "hops" / "test")
        counts["hops"] = {"test": summarize(records)}
        _facts(dest / "hops", [hops.NOTE, aliases], pending)
        say(f"hops test: {len(records)} traces, {data.row_labels()}"
            + (f"; incomplete: {pending}" if pending else ""))
    (HERE / "trace_sets.json").write_text(json.dumps(counts, indent=1) + "\n")
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    say(f"compact tables: {size / 1e3:.0f} kB in {dest}")


def _facts(folder: Path, notes: list[str], pending: str = "") -> None:
    """The regime's notes (``notes.json``) and, when its held-out split lacks rows, what it
    lacks (``pending.json``; removed once nothing is)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "notes.json").write_text(json.dumps([n for n in notes if n], indent=1) + "\n")
    if pending:
        (folder / "pending.json").write_text(json.dumps(pending) + "\n")
    else:
        (folder / "pending.json").unlink(missing_ok=True)


def row_reads() -> tuple[list[str], dict[str, str]]:
    """The method rows in leaderboard order and what each reads (``cotcredit.bench.pairing``)."""
    from cotcredit.bench.splits import BUDGETS
    from cotcredit.bench.variants import method_runs, read_variants, reads

    runs = method_runs(None, read_variants(CONFIG))
    order = {"rredcot": 0, "rredcot-one-reference": 1, "rredcot-rhat": 2}
    runs = sorted(runs, key=lambda r: order.get(r.label, 3 if "-" not in r.label else 4))
    found = {lab: reads(r) for r in runs if r.method != "mc" for lab in r.labels()}
    found |= {f"mc-{n}": "none" for n in BUDGETS}
    return list(found), found


def regime_results(name: str, dest: Path = TABLES, n_boot: int = 2000):
    """Every metric of a regime's splits from its compact tables, and its facts (``n_boot``:
    0 computes every value without intervals)."""
    import pandas as pd

    from cotcredit.bench import REGIMES
    from cotcredit.bench.compact import read_split
    from cotcredit.bench.metrics import BASELINES
    from cotcredit.bench.pairing import best_baselines, best_facts
    from cotcredit.bench.splits import split_facts, split_metrics

    regime, parts, facts = REGIMES[name], [], {}
    for split in SPLITS:
        if not (dest / name / split / "traces.parquet").exists():
            continue
        data = read_split(dest / name / split)
        m = split_metrics(data, n_boot=n_boot)
        parts.append(m.table.assign(regime=name, split=split))
        if split == "test":
            notes = json.loads((dest / name / "notes.json").read_text())
            facts = {"description": regime.description, "hypothesis": regime.hypothesis,
                     **split_facts(m, data.labels), "notes": [*notes, *m.notes]}
            if (dest / name / "pending.json").exists():
                facts["pending"] = json.loads((dest / name / "pending.json").read_text())
            if regime.string_labels:
                facts["string_labels"] = regime.string_labels
    results = pd.concat(parts, ignore_index=True)
    facts["best"] = best_facts(best_baselines(results, BASELINES))
    return results, facts


def leaderboard_step(run: Path, dest: Path = TABLES, out: Path = HERE) -> None:
    """Step 4: the leaderboard, comparisons and figure from the compact tables."""
    import pandas as pd

    from cotcredit.bench import REGIMES
    from cotcredit.bench.leaderboard import leaderboard, write_leaderboard
    from cotcredit.bench.metrics import BASELINES

    parts, facts = [], {}
    for name in REGIMES:
        if (dest / name / "test" / "traces.parquet").exists():
            say(f"{name}: metrics from the compact tables")
            results, facts[name] = regime_results(name, dest)
            parts.append(results)
        else:
            facts[name] = {"missing": "pending: no finished held-out split when this "
                                      "leaderboard was made"}
    results = pd.concat(parts, ignore_index=True)
    methods, reads = row_reads()
    board = leaderboard(results, methods, BASELINES, "mc", reads)
    paths = write_leaderboard(board, results, run, facts, reads, BASELINES)
    for name in TRACKED:  # the rest (json, results, comparisons.csv) stays in the run folder
        shutil.copyfile(run / name, out / name)
    figure(board, out / "leaderboard.png")
    say(f"wrote {', '.join(str(p) for p in paths.values())}; tracked in {out}: "
        f"{', '.join(TRACKED)}, leaderboard.png")


def figure(board, path: Path) -> None:
    """Localization and MC tracking per regime and row, with intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = list(dict.fromkeys(board["regime"]))
    rows = list(dict.fromkeys(board["method"]))
    fig, axes = plt.subplots(2, 1, figsize=(12, 7.5))
    width = 0.85 / max(len(rows), 1)
    cmap = plt.get_cmap("tab20")
    for ax, (key, title) in zip(axes, (("loc_top1", "localization (top-1)"),
                                       ("mc_spearman", "MC tracking (Spearman)")), strict=True):
        for j, m in enumerate(rows):
            own = board.loc[board["method"] == m].set_index("regime").reindex(regimes)
            x = [i + (j - len(rows) / 2 + 0.5) * width for i in range(len(regimes))]
            y = own[key].to_numpy(dtype=float)
            err = [y - own[f"{key}_low"].to_numpy(dtype=float),
                   own[f"{key}_high"].to_numpy(dtype=float) - y]
            base = own["kind"].eq("baseline").any()
            ax.errorbar(x, y, yerr=err, fmt="s" if base else "o", ms=3, lw=0.8,
                        color=cmap(j % 20), label=m + (" (baseline)" if base else ""))
        ax.set_xticks(range(len(regimes)), regimes)
        ax.set_title(title + "; held-out, 95% intervals by problem")
        ax.axhline(0, color="0.7", lw=0.8)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=6, ncol=2, loc="center left", bbox_to_anchor=(1.0, 0.0))
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", nargs="?", default="all",
                    choices=("all", "run", "hops", "tables", "leaderboard", "publish"))
    ap.add_argument("--run", type=Path, default=HERE / "run", help="the bench folder")
    ap.add_argument("--runs", type=Path, nargs="*", default=None,
                    help="tables: the run folders to read [default: --run]")
    ap.add_argument("--hops", type=Path, default=None, help="hops' folder [default: RUN/hops]")
    ap.add_argument("--cache", type=Path, default=None,
                    help="the trace cache [default: $COTCREDIT_CACHE/bench]")
    ap.add_argument("--regimes", default=",".join(ORGANISMS), help="run: comma-separated")
    args = ap.parse_args(argv)
    hops_out = args.hops or args.run / "hops"
    code = 0
    if args.step in ("all", "run"):
        say(f"bench --size full on {args.regimes} into {args.run}")
        code = run_step(args.run, args.cache, args.regimes.split(","))
    if args.step in ("all", "hops"):
        from studies.bench import hops

        say(f"hops into {hops_out}")
        hops.score(hops_out)
    if args.step in ("all", "tables", "publish"):
        tables_step(args.runs or [args.run], hops_out)
    if args.step in ("all", "leaderboard", "publish"):
        leaderboard_step(args.run)
    return code


if __name__ == "__main__":
    sys.exit(main())
