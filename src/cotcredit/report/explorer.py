"""The trace explorer: one self-contained HTML page to browse scored traces and read their credit.

The page (what it shows: docs/guides/explorer.md) needs no server: the data is a JSON island of
column arrays, texts once, and the code is inlined from ``explorer_assets/``; the browser draws,
Python only arranges data. Credit is the report's definition (`report.credit`) rounded to
``digits``; ρ is Spearman with the reference method, min ρ the lowest over pairs of methods; hit
is the per-trace top-1 of `report.localization`.

A page over a few tens of megabytes opens slowly, so at most ``max_traces`` traces and about
``max_bytes`` bytes are kept: traces with a labelled error first, then by ascending min ρ (the
strongest disagreement first), ties in table order.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cotcredit.methods import method_order
from cotcredit.pipeline.scores import normalize
from cotcredit.report.baselines import BASELINES
from cotcredit.report.credit import CREDITS, trace_outcomes, value_credit, value_methods
from cotcredit.report.localization import ERROR_FIELD
from cotcredit.report.stats import rowwise, wide
from cotcredit.store.io import write_atomic
from cotcredit.version import __version__

#: The explorer's file name in a report folder.
EXPLORER_FILE = "explorer.html"
#: Default size budget of the page: ~20 MB opens in a few seconds.
MAX_BYTES = 20_000_000
#: Version of the JSON island's layout.
DATA_FORMAT = 1
_DATA_ID = "explorer-data"
_ISLAND = re.compile(
    rf'<script type="application/json" id="{_DATA_ID}">(.*?)</script>', re.DOTALL
)
# Curve names of the value columns (``cotcredit.report.credit.VALUE_COLUMNS``).
_CURVE_LABELS = {"g_before": "g_k = R̂_k + v̂_k", "value_before": "V_k (Monte Carlo value)"}
_CURVE_SYMBOLS = {"g_before": "g", "value_before": "V"}
# Bytes per trace besides texts and per-segment data (id, counts, statistics): for the budget.
_TRACE_BYTES = 64
_PAGE_BYTES = 64_000  # the page's code, styles and fixed data


@dataclass
class ExplorerFile:
    """What ``write_explorer`` wrote."""

    path: Path
    n_traces: int  # traces in the tables
    kept: int  # traces in the page
    n_bytes: int  # size of the file
    limit: str | None = None  # what capped the page ("max_traces=...", "max_bytes=..."), or None

    @property
    def note(self) -> str | None:
        """One line for the terminal when the cap was hit (None otherwise)."""
        if self.limit is None:
            return None
        return (f"explorer: {self.kept:,} of {self.n_traces:,} traces kept ({self.limit}): "
                "traces with a labelled error first, then the strongest disagreement "
                "between methods")


def _fields(record: Any) -> tuple[str, str | None, str | None, float | None]:
    """(id, prompt, response, outcome) of a trace object (``Trace``) or a dict record."""
    get = record.get if isinstance(record, Mapping) else (lambda k: getattr(record, k, None))
    outcome = get("outcome")
    return str(get("id")), get("prompt"), get("response"), outcome


def _encode(obj: Any, digits: int) -> str:
    """JSON of the page's data. Float arrays are written at ``digits`` significant digits by
    string formatting: about twice as fast as rounding to floats and ``json.dumps`` at dataset
    scale (a million credits), the same numbers when read back."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind != "f":
            return json.dumps(obj.tolist())
        text = ",".join(map(f"{{:.{digits}g}}".format, obj.tolist()))
        return "[" + text.replace("-inf", "null").replace("inf", "null").replace(
            "nan", "null") + "]"
    if isinstance(obj, Mapping):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{_encode(v, digits)}"
                              for k, v in obj.items()) + "}"
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class _Layout:
    """The segmentation of the rows (one row per trace and segment, traces in table order,
    segments in order) and where each row of ``rows`` falls in it; integer work throughout
    (a table of 100,000 traces hashes its strings once)."""

    def __init__(self, rows: pd.DataFrame, error_field: str):
        codes, ids = pd.factorize(rows["trace_id"])
        segment = rows["segment"].to_numpy(dtype="int64")
        width = int(segment.max()) - int(segment.min()) + 1 if len(segment) else 1
        key = codes.astype("int64") * width + (segment - (segment.min() if len(segment) else 0))
        keys, first_row = np.unique(key, return_index=True)
        self.ids = pd.Index(ids.astype(str))
        self.pos = np.searchsorted(keys, key)  # each row's place in the segmentation
        self.trace = codes[first_row]  # trace code of each segment
        self.n_segments = np.bincount(self.trace, minlength=len(self.ids))
        self.first = np.r_[0, np.cumsum(self.n_segments)]
        self.rank = np.arange(len(keys)) - self.first[self.trace]
        self.index = segment[first_row]
        self.char_start = rows["char_start"].to_numpy(dtype="int64")[first_row]
        self.char_end = rows["char_end"].to_numpy(dtype="int64")[first_row]
        self.text = rows["text"].iloc[first_row].to_numpy(dtype=object)
        self.error = (pd.to_numeric(rows[error_field], errors="coerce").to_numpy(
            dtype="float64")[first_row] if error_field in rows.columns else None)

    def column(self, rows: pd.DataFrame, method: np.ndarray, column: str) -> np.ndarray:
        """``column`` of the rows selected by ``method`` (a mask), one value per segment."""
        out = np.full(len(self.trace), np.nan)
        if column in rows.columns:
            values = pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype="float64")
            out[self.pos[method]] = values[method]
        return out

    def errors(self) -> tuple[np.ndarray, np.ndarray]:
        """Each trace's error offset and error segment rank (−1: no error; NaN: unknown, or
        the offset is in no segment, e.g. after the reasoning)."""
        n = len(self.ids)
        offset, where = np.full(n, np.nan), np.full(n, np.nan)
        if self.error is None:
            return offset, where
        offset[self.n_segments > 0] = self.error[self.first[:-1][self.n_segments > 0]]
        where[offset == -1] = -1
        e = offset[self.trace]
        inside = (self.char_start <= e) & (e < self.char_end)
        where[self.trace[inside]] = self.rank[inside]
        return offset, where


def _trace_statistics(credited: pd.DataFrame, methods: list[str], reference: str | None,
                      ids: pd.Index, error_rank: np.ndarray, min_segments: int
                      ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Per trace (in ``ids`` order): ρ of each method with the reference, each method's hit on
    the error segment, and the lowest pairwise ρ."""
    n = len(ids)
    rho = {m: np.full(n, np.nan) for m in methods if reference in methods and m != reference}
    hit = {m: np.full(n, np.nan) for m in methods}
    low = np.full(n, np.nan)
    data = wide(credited, {m: (m, "score") for m in methods})
    at = ids.get_indexer(pd.Index(data.trace_ids.astype(str)))
    for g in data.groups:
        out = at[g.traces]
        names = [m for m in methods if m in g.values]
        ok = {m: g.present[m] & np.isfinite(g.values[m]).all(axis=1) for m in names}
        if g.k >= min_segments:
            ranks = {m: g.ranks(m) for m in names}
            pairwise = []
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    r = rowwise("spearman", g.values[a], g.values[b], (ranks[a], ranks[b]))
                    r[~(ok[a] & ok[b])] = np.nan
                    pairwise.append(r)
                    if b == reference and a in rho:
                        rho[a][out] = r
                    elif a == reference and b in rho:
                        rho[b][out] = r
            if pairwise:
                stack = np.vstack(pairwise)
                defined = np.isfinite(stack).any(axis=0)
                low[out[defined]] = np.nanmin(stack[:, defined], axis=0)
        e = error_rank[out]
        has = np.isfinite(e) & (e >= 0)
        for m in names:
            use = has & ok[m]
            if not use.any():
                continue
            x = g.values[m][use]
            lowest = x == x.min(axis=1, keepdims=True)
            mine = lowest[np.arange(len(x)), e[use].astype("int64")]
            hit[m][out[use]] = mine / lowest.sum(axis=1)
    return rho, hit, low


def _spans_match(response: str, start: np.ndarray, end: np.ndarray, parts: np.ndarray) -> bool:
    """Whether each segment's text is its span of ``response`` (one comparison when the
    segments are contiguous, as a segmentation makes them)."""
    if len(parts) and (start[1:] == end[:-1]).all():
        return response[start[0]:end[-1]] == "".join(parts)
    return all(response[s:e] == p for s, e, p in zip(start, end, parts, strict=True))


def _texts(layout: _Layout, traces: Mapping[str, Any]) -> tuple[
        list[str], list[int], list[int], np.ndarray, list[str]]:
    """Each trace's text and prompt (index into the prompt list, −1 none), whether it was
    rebuilt from its segments, each segment's start in that text, and the prompts."""
    start = layout.char_start.copy()
    end, parts_all, first = layout.char_end, layout.text, layout.first
    prompts: dict[str, int] = {}
    texts, prompt_index, rebuilt = [], [], []
    for t, tid in enumerate(layout.ids):
        a, b = first[t], first[t + 1]
        parts = parts_all[a:b]
        record = traces.get(tid)
        _, prompt, response, _ = _fields(record) if record is not None else ("", None, None, None)
        fits = isinstance(response, str) and _spans_match(response, start[a:b], end[a:b], parts)
        if fits:
            texts.append(response)
        else:  # no record, or one that does not match the tables: the segments, end to end
            texts.append("".join(parts))
            start[a:b] = np.r_[0, np.cumsum([len(p) for p in parts])[:-1]]
        rebuilt.append(0 if fits else 1)
        prompt_index.append(prompts.setdefault(prompt, len(prompts))
                            if isinstance(prompt, str) else -1)
    return texts, prompt_index, rebuilt, start, list(prompts)


def _keep_order(error_rank: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Trace positions in the order the cap keeps them: labelled errors, then ascending min ρ."""
    erroneous = ~(np.isfinite(error_rank) & (error_rank >= 0))
    disagreement = np.where(np.isfinite(low), low, np.inf)
    return np.lexsort((np.arange(len(low)), disagreement, erroneous))


def explorer_data(
    scores: pd.DataFrame,
    traces: Iterable[Any] | Mapping[str, Any] | None = None,
    *,
    methods: Sequence[str] | None = None,
    reference: str = "mc",
    credit: str = "differences",
    error_field: str = ERROR_FIELD,
    min_segments: int = 3,
    digits: int = 3,
    max_traces: int | None = None,
    max_bytes: int | None = MAX_BYTES,
    title: str = "cotcredit trace explorer",
) -> dict[str, Any]:
    """The page's data from score rows (see ``write_explorer``): lists, and float arrays
    (NaN: missing) that the page holds at ``digits`` significant digits."""
    if credit not in CREDITS:
        raise ValueError(f"credit must be one of {', '.join(CREDITS)}, got {credit!r}")
    rows = normalize(scores, "explorer")
    if "score_as_written" in rows.columns:  # rows already credited: start from the tables'
        rows = rows.assign(score=rows["score_as_written"]).drop(columns="score_as_written")
    present = method_order(pd.unique(rows["method"]))
    chosen = [m for m in present if m not in BASELINES] if methods is None else [
        m for m in methods if m in present]
    rows = rows.loc[rows["method"].isin(chosen)].reset_index(drop=True)
    credited = value_credit(rows, credit)
    ref = reference if reference in chosen else None

    layout = _Layout(rows, error_field)
    ids, n_seg, first = layout.ids, layout.n_segments, layout.first
    n_traces = len(ids)
    offset, error_rank = layout.errors()
    rho, hit, low = _trace_statistics(credited, chosen, ref, ids, error_rank, min_segments)
    method_codes = pd.Categorical(rows["method"], categories=chosen).codes
    mask = {m: method_codes == i for i, m in enumerate(chosen)}
    score = {m: layout.column(credited, mask[m], "score") for m in chosen}
    curves = {m: cols for m, cols in value_methods(rows).items() if m in chosen}

    outcome = trace_outcomes(rows).reindex(ids).to_numpy(dtype="float64", copy=True)
    lookup: dict[str, Any] = {}
    if traces is not None:
        wanted = set(ids)
        pairs = ((str(k), r) for k, r in traces.items()) if isinstance(traces, Mapping) else (
            (_fields(r)[0], r) for r in traces)
        lookup = {i: r for i, r in pairs if i in wanted}
        for t, tid in enumerate(ids):
            given = _fields(lookup[tid])[3] if tid in lookup else None
            if not math.isfinite(outcome[t]) and given is not None:
                outcome[t] = float(given)
    texts, prompt_index, rebuilt, start, prompts = _texts(layout, lookup)

    # The cap: bytes estimated from the JSON of the texts and a per-segment cost.
    order = _keep_order(error_rank, low)
    limit = None
    if max_traces is not None and max_traces < n_traces:
        order, limit = order[:max_traces], f"max_traces={max_traces:,}"
    if max_bytes is not None:
        per_segment = 12 + (digits + 5) * (len(chosen) + 2 * len(curves))
        cost = np.array([len(json.dumps(texts[t], ensure_ascii=False)) + _TRACE_BYTES
                         + per_segment * n_seg[t] for t in order], dtype="int64")
        seen: set[int] = set()
        for i, t in enumerate(order):  # a prompt costs its bytes once
            p = prompt_index[t]
            if p >= 0 and p not in seen:
                seen.add(p)
                cost[i] += len(json.dumps(prompts[p], ensure_ascii=False))
        fit = int(np.searchsorted(np.cumsum(cost), max_bytes - _PAGE_BYTES, side="right"))
        if fit < len(order):
            order, limit = order[:max(fit, 1)], f"max_bytes={max_bytes:,}"
    kept = np.sort(order)  # the page lists them in table order
    in_kept = np.zeros(n_traces, dtype=bool)
    in_kept[kept] = True
    seg_rows = np.flatnonzero(in_kept[layout.trace])
    used_prompts = sorted({prompt_index[t] for t in kept if prompt_index[t] >= 0})
    new_prompt = {p: i for i, p in enumerate(used_prompts)}

    error_at = np.full(n_traces, np.nan)  # the error's offset in the displayed text
    for t in np.flatnonzero(np.isfinite(error_rank) & (error_rank >= 0)):
        r = first[t] + int(error_rank[t])
        error_at[t] = start[r] + offset[t] - layout.char_start[r]

    def ints(values: np.ndarray) -> list[int | None]:
        return [int(v) if math.isfinite(v) else None for v in values.tolist()]

    data: dict[str, Any] = {
        "format": DATA_FORMAT,
        "title": title,
        "generator": f"cotcredit {__version__}",
        "methods": chosen,
        "reference": ref,
        "credit": credit,
        # What each method's shading shows: `credit` applies to value-based methods only.
        "credit_of": {m: credit if m in curves and credit != "score" else "score as written"
                      for m in chosen},
        "digits": digits,
        "min_segments": min_segments,
        "error_field": error_field,
        "cap": {"total": n_traces, "kept": len(kept), "limit": limit,
                "rule": "traces with a labelled error first, then by ascending min ρ "
                        "(strongest disagreement first), ties in table order"},
        "prompts": [prompts[p] for p in used_prompts],
        "trace": {
            "id": ids.to_numpy()[kept].tolist(),
            "outcome": outcome[kept],
            "n_segments": n_seg[kept],
            "prompt": [new_prompt.get(prompt_index[t], -1) for t in kept],
            "text": [texts[t] for t in kept],
            "rebuilt": [rebuilt[t] for t in kept],
            error_field: ints(offset[kept]),
            "error_segment": ints(error_rank[kept]),
            "error_at": ints(error_at[kept]),
            "rho": {m: v[kept] for m, v in rho.items()},
            "hit": {m: v[kept] for m, v in hit.items()},
            "min_rho": low[kept],
        },
        "segment": {
            "start": start[seg_rows],
            "len": (layout.char_end - layout.char_start)[seg_rows],
            "score": {m: v[seg_rows] for m, v in score.items()},
        },
        "curve": {},
    }
    if not (layout.index == layout.rank).all():
        data["segment"]["index"] = layout.index[seg_rows]  # only when not numbered 0..K-1
    for m, (before, after) in curves.items():
        curve = {"label": _CURVE_LABELS.get(before, after), "columns": [before, after],
                 "symbol": _CURVE_SYMBOLS.get(before, after),
                 "v0": layout.column(rows, mask[m], before)[first[kept]],
                 "v": layout.column(rows, mask[m], after)[seg_rows]}
        err = layout.column(rows, mask[m], "stderr")[seg_rows]
        if np.isfinite(err).any():
            curve["stderr"] = err
        data["curve"][m] = curve
    return data


def _asset(name: str) -> str:
    return (resources.files("cotcredit.report") / "explorer_assets" / name).read_text("utf-8")


def render_explorer(data: Mapping[str, Any]) -> str:
    """The page: markup, styles, the data as a JSON island and the page's code, all inline.

    Every ``<`` in the data is written as the JSON escape ``\\u003c``, so no text (a trace
    holding ``</script>`` or ``<!--``) can end the island or change how it is parsed; the
    island is script data, where ``&`` and ``>`` mean nothing."""
    island = _encode(data, int(data.get("digits", 3)))
    island = island.replace("<", "\\u003c")
    script, style = _asset("explorer.js"), _asset("explorer.css")
    if "</script" in script.lower() or "</style" in style.lower():
        raise RuntimeError("explorer assets must not close their own element")
    title = html.escape(str(data.get("title", "")))
    body = _asset("explorer.html").replace("{{title}}", title)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>\n{style}</style>\n</head>\n<body>\n{body}"
        f'<script type="application/json" id="{_DATA_ID}">{island}</script>\n'
        f"<script>\n{script}</script>\n</body>\n</html>\n"
    )


def read_explorer_data(page: str | Path) -> dict[str, Any]:
    """The data of an explorer page (a path or the page's text), as ``explorer_data`` built it."""
    text = page if isinstance(page, str) and "<html" in page[:200] else Path(page).read_text(
        "utf-8")
    found = _ISLAND.search(text)
    if found is None:
        raise ValueError("not a cotcredit explorer page (no data island)")
    return json.loads(found.group(1))


def write_explorer(
    scores: pd.DataFrame,
    traces: Iterable[Any] | Mapping[str, Any] | None,
    path: str | Path,
    **options: Any,
) -> ExplorerFile:
    """Write the trace explorer, one self-contained HTML file.

    Args:
        scores: score rows of one or more methods on one segmentation (``load_scores``), as
            the tables hold them; baseline rows (position, uniform) are left out unless named
            in ``methods``.
        traces: the traces' records (``Trace`` objects, dicts with id/prompt/response/outcome,
            or a mapping id -> record) for the prompts and full texts; None: texts rebuilt
            from the segments.
        path: the file to write (``report/explorer.html`` in a report folder).
        options: ``explorer_data``'s: methods (default: every method in the rows),
            reference ("mc"), credit ("differences"), error_field ("error_char"),
            min_segments (3), digits (3), max_traces (None: no count cap), max_bytes
            (``MAX_BYTES``; None: no size cap), title.

    Returns:
        The file, its size and whether the cap was hit (``ExplorerFile.note``).
    """
    data = explorer_data(scores, traces, **options)
    page = render_explorer(data).encode("utf-8", "backslashreplace")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, page)
    cap = data["cap"]
    return ExplorerFile(path, cap["total"], cap["kept"], len(page), cap["limit"])
