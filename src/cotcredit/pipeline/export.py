"""Export per-segment scores as JSON Lines for process-reward training, evaluators and RL.

One line per trace of one method's scores, in a format for a named reader (``--format``; fields:
docs/commands/export.md): ``processbench`` (label: the first step whose score is not above
``threshold``), ``openrlhf-prm`` (a placeholder and a +/- label per step), ``step-rewards``
(dense per-step rewards with token spans, as verl's ``token_level_scores``) and ``jsonl`` (every
column; a method's declared columns always, so its records share keys). The label formats
leave out traces with a NaN score and report them.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cotcredit.data.trace import FieldNames
from cotcredit.errors import UserError
from cotcredit.options import option

if TYPE_CHECKING:  # numpy and pandas load with the scores (keeps `--help` fast)
    import pandas as pd

__all__ = ["EXPORT_FORMATS", "ExportResult", "export_scores"]

EXPORT_FORMATS = ("processbench", "openrlhf-prm", "step-rewards", "jsonl")
LABEL_FORMATS = ("processbench", "openrlhf-prm")  # labels from scores: NaN traces left out
REMOVED_FORMATS = {"trl-stepwise": "TRL no longer has PRMTrainer"}
DEFAULT_PLACEHOLDER = "ки"  # Math-Shepherd's step tag, as OpenRLHF's PRM examples use it
_REQUIRED = ("trace_id", "segment", "method", "score", "text")
# Columns that describe the record, not a segment; everything else goes into each segment.
_RECORD_COLUMNS = ("trace_id", "method", "run_id")
_SEGMENT_FIRST = (
    "segment",
    "text",
    "score",
    "char_start",
    "char_end",
    "token_start",
    "token_end",
    "n_tokens",
)


@dataclass
class ExportResult:
    """What ``export_scores`` wrote: the file, the method, lines written, traces left out."""

    path: Path
    format: str
    method: str
    n_written: int
    skipped_nan: list[str] = field(default_factory=list)


def _json_value(value: Any) -> Any:
    """A JSON-safe Python value: numpy scalars unwrapped, NaN/inf and missing values as None."""
    import numpy as np
    import pandas as pd

    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.ndarray):
        return [_json_value(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _declared_columns(method: str) -> dict[str, str]:
    """The columns the method's spec declares, with their types; empty for an unknown method."""
    from cotcredit.methods import label_to_method, registry

    owner = label_to_method(method)
    return dict(registry()[owner].columns) if owner else {}


def _choose_method(scores: pd.DataFrame, method: str | None) -> str:
    import pandas as pd

    methods = sorted(pd.unique(scores["method"].astype(str)))
    if method is None:
        if len(methods) == 1:
            return methods[0]
        raise UserError(
            f"the scores hold {len(methods)} methods ({', '.join(methods)}); "
            "choose one with --method"
        )
    if method not in methods:
        raise UserError(
            f"method {method!r} is not in the scores (they hold: {', '.join(methods)}); "
            "choose one with --method"
        )
    return method


def _check_format(format: str) -> None:
    if format in REMOVED_FORMATS:
        raise UserError(
            f"export format {format!r} is gone ({REMOVED_FORMATS[format]}); use "
            f"{', '.join(f for f in EXPORT_FORMATS if f != 'jsonl')} or jsonl"
        )
    if format not in EXPORT_FORMATS:
        raise UserError(
            f"unknown export format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}"
        )


def _first_wrong(labels: list[bool]) -> int:
    return next((k for k, ok in enumerate(labels) if not ok), -1)


def _spans(group, start: str, end: str) -> list | None:
    if start not in group or end not in group or group[[start, end]].isna().any(axis=None):
        return None
    return [[int(a), int(b)] for a, b in zip(group[start], group[end])]


def _step_record(format: str, tid: str, prompt: str, group, texts: list[str], score,
                 threshold: float, placeholder: str, outcome: float | None) -> dict[str, Any]:
    """One trace's line in a step format."""
    labels = [bool(s > threshold) for s in score]
    if format == "processbench":
        return {"id": tid, "problem": prompt, "steps": [t.strip() for t in texts],
                "label": _first_wrong(labels),
                "final_answer_correct": None if outcome is None else bool(outcome >= 0.5)}
    if format == "openrlhf-prm":
        bad = next((k for k, t in enumerate(texts) if placeholder in t), None)
        if bad is not None:
            raise UserError(f"trace {tid!r}: step {bad} holds the placeholder {placeholder!r}; "
                            "choose another --placeholder")
        steps = "\n".join(f"{t.strip()} {placeholder}" for t in texts)
        return {"input": f"{prompt}\n{steps}", "label": ["+" if ok else "-" for ok in labels]}
    return {"id": tid, "prompt": prompt, "steps": [t.strip() for t in texts],
            "rewards": [_json_value(float(s)) for s in score],
            "token_spans": _spans(group, "token_start", "token_end"),
            "char_spans": _spans(group, "char_start", "char_end")}


def export_scores(
    scores: pd.DataFrame,
    prompts: Mapping[str, str],
    out: Path,
    *,
    format: str = "jsonl",
    threshold: float = 0.0,
    method: str | None = None,
    outcomes: Mapping[str, float | None] | None = None,
    placeholder: str = DEFAULT_PLACEHOLDER,
) -> ExportResult:
    """Write one JSON line per trace of ``method``'s scores to ``out`` (module docstring).

    Args:
        scores: a tidy score table (one row per trace, segment and method).
        prompts: trace id -> prompt text; every exported trace needs one.
        out: the JSON Lines file to write (replaced atomically; parent folders created).
        format: one of ``EXPORT_FORMATS``.
        threshold: step labels are ``score > threshold`` (``processbench``, ``openrlhf-prm``).
        method: the method to export; required when the table holds several.
        outcomes: trace id -> the trace's own outcome ζ (``processbench``'s
            ``final_answer_correct``; else the table's ``outcome`` column is used).
        placeholder: ``openrlhf-prm``'s step tag.

    Returns:
        An ``ExportResult``; ``skipped_nan`` lists the traces a label format left out because a
        score was NaN.
    """
    import numpy as np
    import pandas as pd

    _check_format(format)
    if format == "openrlhf-prm" and not placeholder.strip():
        raise UserError("--placeholder must be a non-blank string")
    missing = [c for c in _REQUIRED if c not in scores.columns]
    if missing:
        raise UserError(f"the score table lacks column(s) {', '.join(missing)}")
    if scores.empty:
        raise UserError("the score table is empty; there is nothing to export")
    chosen = _choose_method(scores, method)
    rows = scores.loc[scores["method"].astype(str) == chosen].copy()
    rows["trace_id"] = rows["trace_id"].astype(str)
    if rows.duplicated(["trace_id", "segment"]).any():
        dup = rows.loc[rows.duplicated(["trace_id", "segment"])].iloc[0]
        raise UserError(
            f"trace {dup['trace_id']!r}: segment {int(dup['segment'])} of {chosen!r} appears "
            "more than once; remove the duplicated rows"
        )
    trace_ids = [str(t) for t in pd.unique(rows["trace_id"])]
    no_prompt = [t for t in trace_ids if t not in prompts]
    if no_prompt:
        shown = ", ".join(repr(t) for t in no_prompt[:5])
        more = f" and {len(no_prompt) - 5} more" if len(no_prompt) > 5 else ""
        raise UserError(
            f"no prompt for {len(no_prompt)} trace(s) ({shown}{more}); "
            "pass the traces file the scores were computed from"
        )

    # Segment-level columns: the standard ones first, then the method's own columns: those its
    # spec declares (even when all null, so every record of a method has one shape) and any
    # other non-empty one. Columns of other methods sharing the table are null on these rows.
    declared = _declared_columns(chosen)
    extra = [
        c
        for c in rows.columns
        if c not in _RECORD_COLUMNS
        and c not in _SEGMENT_FIRST
        and (c in declared or rows[c].notna().any())
    ]
    for c in extra:
        # An int column shared with other methods' rows was read back as float (NaN there).
        values = rows[c].dropna()
        if declared.get(c) == "int64" and rows[c].dtype.kind == "f" and (values % 1 == 0).all():
            rows[c] = rows[c].astype("Int64")
    seg_cols = [c for c in _SEGMENT_FIRST if c in rows.columns] + extra

    lines: list[str] = []
    skipped: list[str] = []
    rows = rows.sort_values(["trace_id", "segment"], kind="stable")
    groups = dict(iter(rows.groupby("trace_id", sort=False)))
    for tid in trace_ids:
        group = groups[tid]
        texts = group["text"].fillna("").astype(str).tolist()
        score = group["score"].to_numpy(dtype="float64")
        if format in LABEL_FORMATS and not np.isfinite(score).all():
            skipped.append(tid)
            continue
        if format != "jsonl":
            known = (outcomes or {}).get(tid)
            if known is None and "outcome" in group and group["outcome"].notna().any():
                known = float(group["outcome"].dropna().iloc[0])
            record: dict[str, Any] = _step_record(format, tid, prompts[tid], group, texts, score,
                                                  threshold, placeholder, known)
        else:
            run_ids = group["run_id"].dropna().unique() if "run_id" in group else []
            record = {
                "trace_id": tid,
                "run_id": _json_value(run_ids[0]) if len(run_ids) == 1 else None,
                "method": chosen,
                "prompt": prompts[tid],
                "segments": [
                    {c: _json_value(v) for c, v in zip(seg_cols, values, strict=True)}
                    for values in group[seg_cols].itertuples(index=False, name=None)
                ],
            }
        lines.append(json.dumps(record, ensure_ascii=False, allow_nan=False))

    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{out}: cannot write ({' '.join(str(exc).split())})") from None
    return ExportResult(
        path=out, format=format, method=chosen, n_written=len(lines), skipped_nan=skipped
    )


@dataclass(frozen=True)
class ExportOptions:
    """What `cotcredit export` writes."""

    format: str = option(
        "jsonl", choices=EXPORT_FORMATS,
        help="processbench: ProcessBench steps and first wrong step; openrlhf-prm: OpenRLHF's "
        "process-reward dataset (input with step placeholders, +/- labels); step-rewards: "
        "per-step rewards with token spans (dense RL rewards); jsonl: every column.",
    )
    threshold: float = option(0.0, help="Step labels: a step is right when score > threshold.")
    placeholder: str = option(DEFAULT_PLACEHOLDER, help="openrlhf-prm: the step tag.")
    method: str | None = option(None, help="Method to export when the table holds several.")


def export(
    scores: str | Path,
    output: str | Path = "prm.jsonl",
    *,
    traces: str | Path | None = None,
    options: ExportOptions | None = None,
    fields: FieldNames = FieldNames(),
) -> ExportResult:
    """`cotcredit export`: one method's segment credits from a score table, with each trace's
    prompt read from `traces` (the file the scores were computed from; lines that do not parse
    are passed over)."""
    from cotcredit.data.traces import iter_traces
    from cotcredit.pipeline.scores import load_scores

    options = options or ExportOptions()
    _check_format(options.format)
    if traces is None:
        raise UserError("export: pass --traces traces.jsonl (the prompts are read from it)")
    read = [t for t in iter_traces(traces, fields, on_error="skip", require_answer=False)
            if not isinstance(t, UserError)]
    table = load_scores([scores])
    return export_scores(table, {t.id: t.prompt for t in read}, Path(output),
                         format=options.format, threshold=options.threshold,
                         method=options.method, outcomes={t.id: t.outcome for t in read},
                         placeholder=options.placeholder)
