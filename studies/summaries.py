"""The tracked summary of a study folder's `cotcredit compare` report: comparison.md.

The report folder (report.html, figures, Parquet tables) is regenerated and not tracked; its
numbers are kept in comparison.md, a few kilobytes of Markdown:

- report/report.md without its figures and per-trace credit strips;
- the rollout equivalence table (worth n rollouts, the ceiling) from
  report/rollout_equivalence.parquet when report.md does not already hold it;
- seconds per trace by method, median and mean, from the score tables' `cost_seconds` (the
  report's cost table gives means only; the studies quote medians: a shared machine makes a
  few traces slow);
- Monte Carlo's rollouts (boundaries, rollouts, the share cut off) from rollouts.parquet;
- how often RREDCoT's value g exceeds 1 (probability space), from its tables.

    python -m studies.summaries FOLDER [TABLE ...]     # redraw one folder's comparison.md
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd


def report_text(report_md: Path) -> str:
    """report.md without image lines and without the credit strips section."""
    lines, skipping = [], False
    for line in report_md.read_text().splitlines():
        if line.startswith("## "):
            skipping = line.strip() == "## Credit strips"
        if skipping or line.startswith("!["):
            continue
        lines.append(line)
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.strip() + "\n"


def _rollouts(n: float) -> str:
    return "> 12" if math.isinf(n) else ("< 1" if n < 1 else f"{n:.1f}")


def equivalence_markdown(path: Path) -> str:
    """The method rows and ceiling rows of rollout_equivalence.parquet as Markdown."""
    eq = pd.read_parquet(path)
    top = eq[eq.kind == "mc_curve"].rollouts.max()
    rows = ["| method | agreement with held-out [95% CI] | worth n rollouts [95% CI] | traces |",
            "|---|---|---|---|"]
    for r in eq[eq.kind == "equivalence"].itertuples():
        worth = [_rollouts(x).replace("> 12", f"> {top:g}") for x in
                 (r.rollouts, r.rollouts_low, r.rollouts_high)]
        rows.append(f"| {r.method} | {r.value:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] | "
                    f"{worth[0]} [{worth[1]}, {worth[2]}] | {r.n} |")
    rows += ["", "| n | MC(n) agreement [95% CI] | traces |", "|---|---|---|"]
    rows += [f"| {r.rollouts:g} | {r.value:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] | {r.n} |"
             for r in eq[eq.kind == "mc_curve"].itertuples()]
    rows += ["", "| Monte Carlo with | ceiling [95% CI] | traces |", "|---|---|---|"]
    rows += [f"| {r.rollouts:g} rollouts per boundary | {r.value:.3f} [{r.ci_low:.3f}, "
             f"{r.ci_high:.3f}] | {r.n} |" for r in eq[eq.kind == "ceiling"].itertuples()]
    return "\n".join(rows) + "\n"


def score_frames(folder: Path, tables: list[str]) -> dict[tuple[str, str], pd.DataFrame]:
    """Every (table, method)'s rows of the given score tables."""
    frames = {}
    for name in tables:
        if (folder / name).exists():
            for method, g in pd.read_parquet(folder / name).groupby("method"):
                frames[name, str(method)] = g
    return frames


def seconds_markdown(frames: dict[tuple[str, str], pd.DataFrame]) -> str:
    """Seconds per trace by table and method (`cost_seconds` is a per-trace figure repeated on
    each of the trace's rows)."""
    rows = ["| table | method | traces | median s / trace | mean s / trace |",
            "|---|---|---|---|---|"]
    for (table, method), df in frames.items():
        if "cost_seconds" not in df:
            continue
        per = df.groupby("trace_id").cost_seconds.first().dropna()
        if len(per):
            rows.append(f"| {table} | {method} | {len(per)} | {per.median():.3g} | "
                        f"{per.mean():.3g} |")
    return "\n".join(rows) + "\n"


def rollouts_markdown(path: Path) -> str:
    """How many boundaries and rollouts Monte Carlo ran, and how many were cut off."""
    r = pd.read_parquet(path, columns=["trace_id", "boundary", "correct", "truncated"])
    boundaries = r.groupby(["trace_id", "boundary"]).ngroups
    return (f"{r.trace_id.nunique()} traces, {boundaries:,} boundaries, {len(r):,} rollouts "
            f"({len(r) / boundaries:.0f} per boundary); {r.truncated.mean():.1%} cut off at the "
            f"token limit (counted wrong); {r.correct.mean():.1%} reach the right answer.\n")


def values_markdown(frames: dict[tuple[str, str], pd.DataFrame]) -> str:
    """Boundary values g of each RREDCoT table (probability space) above 1: g_0 and the value
    after every segment, the last included (where no reference step remains, v̂ = R̂)."""
    rows = ["| method | boundaries | g > 1 | g > 1 before the last boundary | largest g |",
            "|---|---|---|---|---|"]
    for (_, method), df in frames.items():
        if "g_after" not in df or (df.get("space", "prob") != "prob").any():
            continue
        df = df.sort_values(["trace_id", "segment"])
        last = df.segment == df.groupby("trace_id").segment.transform("max")
        first = df.groupby("trace_id").g_before.first().to_numpy(float)
        g = np.concatenate([first, df.g_after.to_numpy(float)])
        inner = np.concatenate([first, df.g_after[~last].to_numpy(float)])
        g, inner = g[np.isfinite(g)], inner[np.isfinite(inner)]
        rows.append(f"| {method} | {len(g)} | {int((g > 1).sum())} | {int((inner > 1).sum())} "
                    f"| {g.max():.3f} |")
    return "\n".join(rows) + "\n"


def write_comparison(folder: Path, tables: list[str], rollouts: str = "rollouts.parquet") -> Path:
    """folder/comparison.md from folder/report/ and the score tables named in `tables`."""
    report = folder / "report"
    parts = [report_text(report / "report.md")] if (report / "report.md").exists() else []
    equivalence = report / "rollout_equivalence.parquet"
    if equivalence.exists() and "worth n rollouts" not in "".join(parts):
        parts.append("## Rollout equivalence (rollout_equivalence.parquet)\n\n"
                     + equivalence_markdown(equivalence))
    frames = score_frames(folder, tables)
    parts.append("## Seconds per trace (the score tables' cost_seconds)\n\n"
                 + seconds_markdown(frames))
    if (folder / rollouts).exists():
        parts.append("## Monte Carlo rollouts\n\n" + rollouts_markdown(folder / rollouts))
    values = values_markdown(frames)
    if values.count("\n") > 2:
        parts.append("## RREDCoT's values g above 1\n\n" + values)
    out = folder / "comparison.md"
    out.write_text("\n".join(parts))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("tables", nargs="*", help="score tables in FOLDER (default: every *.parquet "
                    "but segments and rollouts)")
    args = ap.parse_args(argv)
    tables = args.tables or sorted(
        p.name for p in args.folder.glob("*.parquet")
        if p.name not in ("segments.parquet", "rollouts.parquet"))
    print(write_comparison(args.folder, tables))


if __name__ == "__main__":
    main()
