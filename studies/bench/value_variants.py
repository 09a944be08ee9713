"""Every v̂ variant of the value-estimate study as a bench row (`value_variants.yaml`), and which
of them repeat another's computation on a regime's traces.

The full run scores the variants on every organism regime through the bench itself
(`cotcredit bench --config studies/bench/value_variants.yaml`; `full.py`). `hops` is scored
from the lookup study's traces and segmentation with the embedded model (`hops.py`, which calls
`score_split`). They are shown, never used to choose: nothing is decided from these rows.

Identical computations are scored once there. Where every trace lists one reference (`hops`),
"several references" (`references: solutions`) is the one reference, so `rredcot-multi`,
`-multi-matched` and `-multi-suffixes` are the same probes as `rredcot-drop`, `-matched` and
`-suffixes`; where no problem has a second response, `siblings` is the listed reference too, so
`rredcot-matched` is `rredcot` (the method's default). These rows are shown under both labels
(`alias_rows`), and the leaderboard's notes say so.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "value_variants.yaml"
#: label -> the label whose probes it repeats when every trace lists one reference.
ONE_REFERENCE_SAME = {"rredcot-multi": "rredcot-drop", "rredcot-multi-matched": "rredcot-matched",
                      "rredcot-multi-suffixes": "rredcot-suffixes"}
#: ... and when, moreover, no problem has a second response (siblings = the listed reference).
NO_SIBLINGS_SAME = {"rredcot-matched": "rredcot"}


def say(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def variants() -> dict[str, dict]:
    """The study's variants as bench rows (label -> options of `rredcot`), the default's and
    the one-reference estimator's too."""
    from cotcredit.bench.variants import read_variants

    found = read_variants(CONFIG)
    return {k: {o: v for o, v in found[k].items() if o != "method"}
            for k in ("rredcot", "rredcot-one-reference", *_config_labels())}


def _config_labels() -> list[str]:
    from cotcredit.options import read_config

    return [str(k) for k in read_config(CONFIG)]


def same_as(records: list[dict]) -> dict[str, str]:
    """label -> the label it computes exactly, for these traces (see the module docstring)."""
    one = all(len({t.strip() for t in [r.get("solution"), *(r.get("solutions") or [])] if t})
              <= 1 for r in records)
    if not one:
        return {}
    problems = Counter(r.get("problem_id", r["id"]) for r in records)
    return {**ONE_REFERENCE_SAME,
            **(NO_SIBLINGS_SAME if max(problems.values()) == 1 else {})}


def alias_rows(scores: pd.DataFrame, records: list[dict]) -> pd.DataFrame:
    """`scores` plus the rows of each label that repeats another's computation (`same_as`),
    copied under its own label, where only the other was scored."""
    same = same_as(records)
    while True:  # an alias of an alias (multi-matched = matched = siblings) resolves too
        have = set(scores["method"].unique())
        extra = [scores[scores["method"] == src].assign(method=label)
                 for label, src in same.items() if src in have and label not in have]
        if not extra:
            return scores
        scores = pd.concat([scores, *extra], ignore_index=True)


def alias_note(scored: set[str], records: list[dict]) -> str:
    """What the leaderboard says of the rows ``alias_rows`` copies where only the other label
    of the pair was ``scored`` ("" when none)."""
    same = same_as(records)
    shown = dict(same)
    for label in same:  # resolve chains to the label that was scored
        while shown[label] in same and shown[label] not in scored:
            shown[label] = same[shown[label]]
    copied = {label: src for label, src in shown.items() if src in scored and label not in scored}
    if not copied:
        return ""
    return ("The same computation under two labels here (one reference, one sample per "
            "problem: studies/bench/value_variants.py): " + ", ".join(
                f"{label} is {src}" for label, src in copied.items()) + ".")


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def score_split(traces: Path, segments: Path, out: Path, model, exit_string: str,
                labels: list[str]) -> None:
    """Each variant of `labels` not repeated by another on `traces`, into `out/<label>.parquet`
    (resumable per trace)."""
    from cotcredit.methods import get_method
    from cotcredit.options import build_options
    from cotcredit.pipeline.api import score

    records = _read(traces)
    skip = same_as(records)
    spec = get_method("rredcot")
    found = variants()
    for label in labels:
        if label in skip:
            say(f"  {label}: the same computation as {skip[label]} here (shown under both)")
            continue
        opts = build_options(spec.options_type, {**found[label], "exit_string": exit_string},
                             label)
        t0 = time.perf_counter()
        score(traces, out / f"{label}.parquet", methods={"rredcot": opts},
              segments_file=segments, model=model, label=label, timings=True)
        say(f"  {label}: {time.perf_counter() - t0:.0f} s")
