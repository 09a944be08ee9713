"""Does a rerun of a study reproduce the study's tables?

Used by the study scripts' `--reproduce N`: they rerun their first N traces into a fresh folder
and call `compare_runs(reference, rerun)`, which matches the two folders trace by trace:

- traces: the same response text for the same trace id (sampling is keyed per prompt and seed,
  so a subset reproduces the full run's first traces);
- segments: the same character spans;
- forward and gradient methods: the same score for every segment up to float32 rounding
  (`np.isclose` with `RTOL`, `ATOL`: another CPU, thread count or batch shape changes the
  order of float32 sums). Gradient methods get `GRADIENT_RTOL`: a backward pass and a sum
  over interpolation steps accumulate more rounding. That tolerance was set after a check of
  the organism study on another machine than the one that wrote its tables found integrated
  gradients within 5.8e-4 relative (2 of 195 segments beyond 1e-4), every forward method
  within 1e-4;
- Monte Carlo: each boundary's success fraction compared with a two-proportion z-test; on the
  same machine the rollouts are the same and every value is equal, on another one the values
  must differ no more than sampling error allows (|z| > 3 at about 0.3% of boundaries).

Only traces whose responses are identical are compared downstream: on another machine (other
CPU, torch build or GPU) floating-point differences can change a sampled token, and from there
the trace is another trace. The verdict says how many that was.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

RTOL, ATOL = 1e-4, 1e-5  # a score difference within float32 rounding (np.isclose)
GRADIENT_RTOL = 1e-3  # gradient methods: backward passes, sums over steps (see above)
Z_LIMIT = 3.0  # Monte Carlo: a boundary beyond this many standard errors counts as a miss
MC_MISS_RATE = 0.01  # ... and more than this share of misses fails the check (expected 0.3%)


@dataclass
class Check:
    """One table's verdict: `status` is "exact", "within tolerance", "within sampling error"
    or "different"."""

    table: str
    status: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.status != "different"


@dataclass
class Reproduction:
    """Every table's verdict for one study folder."""

    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def lines(self) -> list[str]:
        return [f"{c.table}: {c.status.upper()} ({c.detail})" for c in self.checks]


def _responses(path: Path) -> dict[str, str]:
    if not path.exists():  # a tracked copy is kept gzipped
        path = path.with_name(path.name + ".gz")
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path)) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {r["id"]: r["response"] for r in rows}


def compare_runs(reference: Path, rerun: Path, tables: tuple[str, ...]) -> Reproduction:
    """Compare the rerun folder's traces, segments and score `tables` with the reference run's
    on the traces both hold (see the module docstring for the rules)."""
    result = Reproduction()
    ref, new = _responses(reference / "raw_traces.jsonl"), _responses(rerun / "raw_traces.jsonl")
    missing = [t for t in new if t not in ref]
    same = sorted(t for t in new if t in ref and ref[t] == new[t])
    status = "exact" if len(same) == len(new) and not missing else "different"
    result.checks.append(Check("traces", status, f"{len(same)} of {len(new)} responses identical"
                               + (f"; {len(missing)} not in the reference run" if missing else "")))
    seg_ref = pd.read_parquet(reference / "segments.parquet")
    seg_new = pd.read_parquet(rerun / "segments.parquet")
    key = ["trace_id", "segment"]
    spans = seg_new[seg_new.trace_id.isin(same)].merge(
        seg_ref[seg_ref.trace_id.isin(same)], on=key, how="outer", suffixes=("_new", "_ref"),
        indicator=True)
    moved = ((spans._merge != "both") | (spans.char_start_new != spans.char_start_ref)
             | (spans.char_end_new != spans.char_end_ref)).sum()
    result.checks.append(Check("segments", "exact" if moved == 0 else "different",
                               f"{len(spans) - moved} of {len(spans)} segments identical"))
    for table in tables:
        if not (rerun / table).exists():
            continue
        a = pd.read_parquet(reference / table)
        b = pd.read_parquet(rerun / table)
        a, b = a[a.trace_id.isin(same)], b[b.trace_id.isin(same)]
        for method, nb in b.groupby("method"):
            result.checks.append(_compare_method(f"{table} {method}", a[a.method == method], nb))
    return result


def _compare_method(name: str, ref: pd.DataFrame, new: pd.DataFrame) -> Check:
    key = ["trace_id", "segment"]
    m = new.merge(ref, on=key, how="left", suffixes=("", "_ref"))
    absent = int(m["score_ref"].isna().sum() - (m["score"].isna() & m["score_ref"].isna()).sum())
    if absent:
        return Check(name, "different", f"{absent} of {len(m)} segments not in the reference table")
    if "n_rollouts" in m:  # Monte Carlo: a sampling estimate per boundary
        return _compare_mc(name, m)
    nan_mismatch = int((m["score"].isna() != m["score_ref"].isna()).sum())
    if nan_mismatch:
        return Check(name, "different", f"{nan_mismatch} segments scored in one run only")
    both = m["score"].notna()
    new, ref = m.loc[both, "score"].to_numpy(float), m.loc[both, "score_ref"].to_numpy(float)
    gap = np.abs(new - ref)
    rtol = GRADIENT_RTOL if name.split()[-1].startswith("gradient") else RTOL
    far = int((~np.isclose(new, ref, rtol=rtol, atol=ATOL)).sum())
    status = ("exact" if not gap.any() else "within tolerance" if not far else "different")
    rel = float((gap / np.maximum(np.abs(ref), ATOL)).max()) if len(gap) else 0.0
    return Check(name, status, f"{len(m)} segments, max |difference| "
                               f"{float(gap.max()) if len(gap) else 0.0:.2e}, relative {rel:.1e}"
                               + (f"; {far} beyond rtol {rtol:g}" if far else ""))


def _compare_mc(name: str, m: pd.DataFrame) -> Check:
    n1, n2 = m["n_rollouts"].to_numpy(float), m["n_rollouts_ref"].to_numpy(float)
    p1 = m["n_correct"].to_numpy(float) / np.maximum(n1, 1)
    p2 = m["n_correct_ref"].to_numpy(float) / np.maximum(n2, 1)
    equal = int(((m["n_correct"] == m["n_correct_ref"])
                 & (m["n_rollouts"] == m["n_rollouts_ref"])).sum())
    if equal == len(m):
        return Check(name, "exact", f"{len(m)} boundaries, every success count equal")
    pooled = (p1 * n1 + p2 * n2) / np.maximum(n1 + n2, 1)
    se = np.sqrt(pooled * (1 - pooled) * (1 / np.maximum(n1, 1) + 1 / np.maximum(n2, 1)))
    z = np.where(se > 0, np.abs(p1 - p2) / np.where(se > 0, se, 1), np.where(p1 == p2, 0, np.inf))
    misses = int((z > Z_LIMIT).sum())
    status = "within sampling error" if misses <= MC_MISS_RATE * len(m) else "different"
    return Check(name, status, f"{equal} of {len(m)} boundaries equal; {misses} beyond "
                               f"{Z_LIMIT:g} standard errors")
