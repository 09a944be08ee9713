"""A made-up known-truth regime's score rows and labels (no model needed)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from cotcredit.bench.metrics import labels_frame


def synthetic_regime(n_traces: int = 60, seed: int = 0, ks=(3, 4, 5, 4)):
    """Score rows, labels and departures of a made-up regime: one line per segment.

    Every trace has K lines ``step i`` (the reference's lines) with, by its kind, a wrong line
    (``oops i``) or a valid alternative line (``alt i``) at a random index; methods:
    ``oracle`` (lowest credit on the first wrong line), ``noisy`` (random), ``rredcot`` and
    ``mc`` (values: g/V columns, MC with rollout counts)."""
    rng = np.random.default_rng(seed)
    rows, labels, deps = [], [], {}
    kinds = ("wrong", "wrong", "repaired", "departs", "follows")
    for t in range(n_traces):
        k = int(ks[t % len(ks)])
        kind = kinds[t % len(kinds)]
        at = int(rng.integers(0, k))
        lines = [f"step {i}\n" for i in range(k)]
        if kind in ("wrong", "repaired"):
            lines[at] = f"oops {at}\n"
        elif kind == "departs":
            lines[at] = f"alt {at}\n"
        starts = np.r_[0, np.cumsum([len(x) for x in lines])]
        tid = f"t{t:03d}"
        error = int(starts[at]) if kind in ("wrong", "repaired") else -1
        departure = int(starts[at]) if kind in ("wrong", "repaired", "departs") else -1
        correct = kind != "wrong"
        labels.append({"id": tid, "correct": correct, "error_char": error,
                       "departure_char": departure, "valid_departure": kind == "departs"})
        deps[tid] = departure
        v = np.clip(np.r_[0.5, 0.5 + np.cumsum(rng.normal(0, 0.2, k))], 0.02, 0.98)
        if kind == "wrong":
            v[at + 1:] = np.minimum(v[at + 1:], 0.1)
        n_roll = 16
        c = rng.binomial(n_roll, v)
        vh = c / n_roll
        g = np.clip(v + rng.normal(0, 0.15, k + 1), 0, 1)
        oracle = rng.random(k)
        if error >= 0:
            oracle[at] = -1.0
        noisy = rng.normal(size=k)
        ent = rng.random(k)
        for s in range(k):
            base = {"trace_id": tid, "segment": s, "char_start": int(starts[s]),
                    "char_end": int(starts[s + 1]), "text": lines[s], "mean_entropy": ent[s],
                    "error_char": error}
            rows.append({**base, "method": "oracle", "score": oracle[s]})
            rows.append({**base, "method": "noisy", "score": noisy[s]})
            rows.append({**base, "method": "rredcot", "score": g[s + 1] - g[s],
                         "g_before": g[s], "g_after": g[s + 1], "outcome": float(correct),
                         "cost_seconds": 0.5, "cost_forward_tokens": 100.0})
            rows.append({**base, "method": "mc", "score": vh[s + 1] - vh[s],
                         "value_before": vh[s], "value_after": vh[s + 1],
                         "n_rollouts": n_roll, "n_correct": int(c[s + 1]),
                         "cost_seconds": 5.0, "cost_forward_tokens": 300.0,
                         "cost_generated_tokens": 2000.0})
    return pd.DataFrame(rows), labels_frame(labels), pd.Series(deps, dtype="int64")


def per_trace(scores: pd.DataFrame, method: str) -> dict[str, pd.DataFrame]:
    """One method's rows, per trace, in segment order."""
    own = scores.loc[scores["method"] == method].sort_values(["trace_id", "segment"])
    return {tid: g for tid, g in own.groupby("trace_id")}
