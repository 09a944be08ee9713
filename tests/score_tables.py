"""Synthetic score tables, shaped like the ones the methods write (no model needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def trace_rows(
    trace_id: str, scores_by_method: dict[str, list[float]], texts: list[str] | None = None
) -> list[dict]:
    """Rows of one trace: every method on the same segmentation, texts 'seg k of <id>. '."""
    n = len(next(iter(scores_by_method.values())))
    texts = texts or [f"seg {k} of {trace_id}. " for k in range(n)]
    rows = []
    for method, scores in scores_by_method.items():
        assert len(scores) == n
        pos = 0
        for k, (score, text) in enumerate(zip(scores, texts, strict=True)):
            rows.append(
                {
                    "run_id": f"run-{method}",
                    "trace_id": trace_id,
                    "segment": k,
                    "method": method,
                    "score": float(score),
                    "char_start": pos,
                    "char_end": pos + len(text),
                    "token_start": 2 * k,
                    "token_end": 2 * k + 2,
                    "n_tokens": 2,
                    "text": text,
                }
            )
            pos += len(text)
    return rows


def random_scores(
    n_traces: int,
    methods: dict[str, float],
    *,
    seed: int = 0,
    min_len: int = 4,
    max_len: int = 12,
    prefix: str = "t",
) -> pd.DataFrame:
    """Traces whose methods are a shared signal plus method-specific noise (method -> noise sd)."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    for t in range(n_traces):
        n = int(rng.integers(min_len, max_len + 1))
        signal = rng.normal(size=n)
        rows += trace_rows(
            f"{prefix}{t}",
            {m: list(signal + sd * rng.normal(size=n)) for m, sd in methods.items()},
        )
    return pd.DataFrame(rows)


def write_table(df: pd.DataFrame, path: Path, *, run_id: str | None = None) -> Path:
    """Write rows as a Parquet score table (optionally under another run id)."""
    df = df.copy()
    if run_id is not None:
        df["run_id"] = run_id
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(path, index=False)
    return path


def split_halves(df: pd.DataFrame, method: str = "mc", *, noise: float = 0.5, seed: int = 0):
    """Give ``method``'s rows ``score_half_a`` / ``score_half_b``: its score plus independent
    noise each, score = their mean (as Monte Carlo credits from two halves of the rollouts)."""
    rng = np.random.default_rng(seed)
    df = df.copy()
    rows = df["method"] == method
    n = int(rows.sum())
    df["score_half_a"] = np.nan
    df["score_half_b"] = np.nan
    half_a = df.loc[rows, "score"].to_numpy() + noise * rng.normal(size=n)
    half_b = df.loc[rows, "score"].to_numpy() + noise * rng.normal(size=n)
    df.loc[rows, "score_half_a"] = half_a
    df.loc[rows, "score_half_b"] = half_b
    df.loc[rows, "score"] = (half_a + half_b) / 2
    return df


def add_costs(df: pd.DataFrame, costs: dict[str, tuple[float, float, float]], *, seed: int = 0):
    """Per-trace cost columns (seconds, forward tokens, generated tokens), repeated on each of a
    trace's rows: the method's base cost times a random factor per trace."""
    rng = np.random.default_rng(seed)
    df = df.copy()
    for col in ("cost_seconds", "cost_forward_tokens", "cost_generated_tokens"):
        df[col] = np.nan
    for (method, _tid), idx in df.groupby(["method", "trace_id"]).groups.items():
        if method not in costs:
            continue
        factor = float(rng.uniform(0.5, 1.5))
        seconds, forward, generated = costs[method]
        df.loc[idx, "cost_seconds"] = seconds * factor
        df.loc[idx, "cost_forward_tokens"] = round(forward * factor)
        df.loc[idx, "cost_generated_tokens"] = round(generated * factor)
    return df
