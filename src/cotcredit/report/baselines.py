"""The cheap baselines: the rows every method must beat.

With a handful of segments per trace, where a segment sits and whether the trace ended right
already say much of what Monte Carlo says about it; the first line that departs from the
reference solution, or the line where the model itself was least sure, say much of where the
first error is. Each baseline is added to the score table as rows of its own (``method`` = the
baseline's name) and so appears in every table, figure and LaTeX output, marked as a baseline,
with paired differences like any method's. One score per segment serves every analysis (MC
tracking, top-1, localization); what it means for each is said below.

Text-free:

* ``position``: a segment's credit is the mean *reference-method* credit at the same relative
  position among the *other* traces with the same outcome (leave one trace out, so a trace's
  own reference credits never enter its baseline). Relative position binning: with B = the most
  common number of segments per trace, segment k of a trace with K segments falls in bin
  ``min(B − 1, floor((k + 0.5) · B / K))``; when every trace has K segments, bin = k. Outcome:
  the ``outcome`` column of any table's rows (``cotcredit.report.credit.trace_outcomes``);
  traces without one form their own group, and without any outcome all traces form one group.
  A cell with no other trace falls back to the same bin over all outcomes (still leaving the
  trace out), then to 0.
* ``position-length``: as ``position``, but the cell is the segment's index among the traces
  with the same number of segments K (position conditioned on the length): the
  leave-one-trace-out mean reference credit at (k, K) among the other traces with the same
  outcome; where no other trace has that (k, K) and outcome, the same (k, K) over all outcomes;
  where no other trace has K segments, ``position``'s value.
* ``uniform``: the trace's outcome ζ spread evenly, ζ / K on each of its K segments (NaN where
  the outcome is unknown). It is constant within a trace, so it orders nothing: its per-trace
  correlations are 0 and its top-1 and localization are chance (see ``cotcredit.report.stats``).
* ``random``: K uniform draws per trace from a generator seeded by the trace id and ``seed``
  (the same trace gets the same draws in any table): the negative control. Its correlations
  with any reference average 0, its localization is chance.

Reading the trace (cheap: no credit method, at most the segmentation's one forward pass):

* ``refdiff``: −1 on the segment holding the first reasoning line that departs from the
  reference solution (``cotcredit.data.first_departure``), 0 on every other segment. It
  reads the solution, so it needs the traces (their ``solution``): NaN on a trace without
  one. On a trace that never departs inside its reasoning it is 0 everywhere, so it orders
  nothing there (as ``uniform``: correlation 0, top-1 at chance). For MC tracking its score is the same
  indicator: on a departing trace, how far below the other segments the reference puts the
  departing one (a Spearman with two distinct values on one side), 0 where it never departs.
  Where the reference solution is the only valid path it localizes every first error; where
  several are valid it blames the correct alternatives (the false blame the benchmark counts).
* ``refdiff-solutions``: the same over every listed solution (the ``solution`` and the
  ``solutions`` list): −1 on the first line where the prefix leaves every one of them (the
  latest of the departures from each; none when the trace follows one throughout).
* ``refdiff-siblings``: the same over the listed solutions and every other right-answer
  response to the same problem among the traces given (``problem_id``, else the prompt;
  right: ``correct``/``outcome``/``reward`` ≥ 0.5), the trace itself never among them. All of
  them: RREDCoT's v̂ with ``references: siblings`` reads at most ``max_references`` (8), the
  listed ones first, so where 8 solutions are listed it reads no sibling.
* ``entropy``: minus the segment's mean token entropy under the model, the ``mean_entropy``
  column the segmentation pass writes on every row (the first value any row of the segment
  carries): the line where the model was least sure gets the lowest credit, for localization
  and MC tracking alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from cotcredit.data.trace import first_departure
from cotcredit.errors import UserError
from cotcredit.options import comma_list
from cotcredit.report.credit import trace_outcomes

#: The string comparisons with known paths: baseline -> the paths it reads
#: (``departures_from_traces``' ``references``).
REFDIFF = {"refdiff": "solution", "refdiff-solutions": "solutions", "refdiff-siblings": "siblings"}
#: The baselines ``baseline_scores`` knows.
BASELINES = ("position", "position-length", "uniform", *REFDIFF, "entropy", "random")
#: The column the ``entropy`` baseline reads (written by the segmentation pass).
ENTROPY_COLUMN = "mean_entropy"
#: Why ``refdiff`` cannot run on score tables alone.
REFDIFF_NEEDS_TRACES = ("--baselines refdiff: needs the traces' reference solutions (and, for "
                        "refdiff-siblings, the other responses); name the traces file of the "
                        "tables (compare --explorer-traces FILE), or run compare on the traces "
                        "file")
_KEEP = ("trace_id", "segment", "char_start", "char_end", "text")


def parse_baselines(baselines: str | Sequence[str]) -> list[str]:
    """Baseline names from ``"position,uniform"`` or a list (``""``/``"none"``: none)."""
    names = [n for n in comma_list(baselines) if n != "none"]
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise UserError(
            f"--baselines: unknown baseline {unknown[0]!r} (known: {', '.join(BASELINES)}, none)"
        )
    return names


def position_bins(n_segments: np.ndarray, segment_rank: np.ndarray, n_bins: int) -> np.ndarray:
    """Relative-position bin of each segment (see the module docstring)."""
    return np.minimum(n_bins - 1, ((segment_rank + 0.5) * n_bins // n_segments).astype("int64"))


def _segmentation(scores: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """One row per (trace, segment) with its span and text, from any method's rows, sorted by
    trace and segment; with each segment's rank in its trace and its trace's segment count in
    columns ``rank`` and ``k``. Also returns each score row's position in it and the sorted
    (trace, segment) keys (integer work: a table of 100,000 traces hashes no strings here)."""
    codes, _ = pd.factorize(scores["trace_id"], sort=True)
    segment = scores["segment"].to_numpy(dtype="int64")
    width = int(segment.max()) + 1 if len(segment) else 1
    key = codes.astype("int64") * width + segment
    keys, first, row_to_seg = np.unique(key, return_index=True, return_inverse=True)
    seg = scores[list(_KEEP)].iloc[first].reset_index(drop=True)  # columns first: no wide copy
    code = keys // width
    starts = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    sizes = np.diff(np.r_[starts, len(code)])
    group = np.repeat(np.arange(len(starts)), sizes)
    seg["rank"] = np.arange(len(code)) - starts[group]
    seg["k"] = sizes[group]
    seg["code"] = group
    return seg, row_to_seg, keys


def position_baseline(scores: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Rows of the ``position`` baseline for every trace in ``scores`` (see module docstring)."""
    seg, row_to_seg, _ = _segmentation(scores)
    if seg.empty:
        return seg.assign(method="position", score=np.nan)
    k = seg["k"].to_numpy()
    n_bins = int(pd.Series(k[seg["rank"].to_numpy() == 0]).mode().max())
    bins = position_bins(k, seg["rank"].to_numpy(), n_bins)
    value = _other_traces_mean(scores, reference, seg, row_to_seg, bins, n_bins, 0.0)
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "position"
    out["score"] = value
    out["position_bin"] = bins
    return out


def _other_traces_mean(scores: pd.DataFrame, reference: str, seg: pd.DataFrame,
                       row_to_seg: np.ndarray, cell: np.ndarray, n_cells: int,
                       fallback: float | np.ndarray) -> np.ndarray:
    """Per segment, the mean `reference` credit of the other traces' segments in its cell
    (`cell`, one of `n_cells`) whose trace has its outcome; without any, in its cell whatever
    the outcome; without any, `fallback`. Leave-one-trace-out, by counting."""
    zeta = seg["trace_id"].map(trace_outcomes(scores)).to_numpy(dtype="float64")
    # Unknown outcomes (NaN) form a group of their own.
    _, group = np.unique(np.where(np.isnan(zeta), -np.inf, zeta), return_inverse=True)
    credit = scores["score"].to_numpy(dtype="float64")
    use = (scores["method"] == reference).to_numpy() & np.isfinite(credit)
    val, has = np.zeros(len(seg)), np.zeros(len(seg))
    val[row_to_seg[use]] = credit[use]
    has[row_to_seg[use]] = 1.0
    trace = seg["code"].to_numpy()
    n_t = int(trace.max()) + 1

    def loto(c: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Sum and count of the reference credits in each segment's cell, minus its trace's."""
        own = trace * n + c
        return (np.bincount(c, val, n)[c] - np.bincount(own, val, n_t * n)[own],
                np.bincount(c, has, n)[c] - np.bincount(own, has, n_t * n)[own])

    s_same, n_same = loto(group * n_cells + cell, (int(group.max()) + 1) * n_cells)
    s_any, n_any = loto(cell, n_cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n_same > 0, s_same / n_same,
                        np.where(n_any > 0, s_any / n_any, fallback))


def uniform_baseline(scores: pd.DataFrame) -> pd.DataFrame:
    """Rows of the ``uniform`` baseline: ζ / K on every segment (NaN: outcome unknown)."""
    seg, _, _ = _segmentation(scores)
    zeta = seg["trace_id"].map(trace_outcomes(scores)).astype("float64")
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "uniform"
    out["score"] = (zeta / seg["k"]).to_numpy()
    return out


Departures = Mapping[str, pd.Series] | Mapping[str, int] | pd.Series


def departures_by_name(departures: Departures | None) -> dict[str, pd.Series]:
    """Baseline name -> trace id -> departure offset, from either that mapping or one Series
    (or trace id -> offset mapping): ``refdiff``'s alone."""
    if departures is None:
        return {}
    if isinstance(departures, pd.Series):
        return {"refdiff": departures}
    if departures and all(isinstance(v, (pd.Series, Mapping)) for v in departures.values()):
        return {str(k): pd.Series(v, dtype="int64") for k, v in departures.items()}
    return {"refdiff": pd.Series(departures, dtype="int64")}


def baseline_scores(
    scores: pd.DataFrame, baselines: Sequence[str], reference: str | None,
    *, departures: Departures | None = None, seed: int = 0,
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """``scores`` with the rows of ``baselines`` appended (``baseline_rows``)."""
    rows, added, notes = baseline_rows(scores, baselines, reference, departures=departures,
                                       seed=seed)
    return pd.concat([scores, rows], ignore_index=True), added, notes


def baseline_rows(
    scores: pd.DataFrame, baselines: Sequence[str], reference: str | None,
    *, departures: Departures | None = None, seed: int = 0,
) -> tuple[pd.DataFrame, list[str], list[str]]:
    """The rows of ``baselines`` for the traces of ``scores``.

    ``reference``: the method the text-free baselines are fitted to; ``departures``: per
    string comparison (``REFDIFF``), trace id -> departure offset
    (``departures_from_traces``), or one Series: ``refdiff``'s; ``seed``: of ``random``. Returns (rows, the baselines added, notes on those left out: ``position`` and
    ``position-length`` without the reference in the table). A score table already holding a
    row label of a baseline's name is refused (the report would mix them up), and so is
    ``refdiff`` without departures or ``entropy`` without the entropy column (one line each,
    naming the fix).
    """
    labels = {str(m) for m in pd.unique(scores["method"])}
    clash = sorted(set(baselines) & labels)
    if clash:
        raise UserError(
            f"method label {clash[0]!r} is a baseline's name; relabel those rows (--label) or "
            "leave the baseline out (--baselines)"
        )
    parts, added, notes = [], [], []
    for name in baselines:
        if name in ("position", "position-length"):
            if reference is None or reference not in labels:
                notes.append(f"{name} baseline omitted: the reference {reference!r} is not in "
                             "the table")
                continue
            fit = position_baseline if name == "position" else position_length_baseline
            parts.append(fit(scores, reference))
        elif name in REFDIFF:
            found = departures_by_name(departures)
            if departures is None:
                raise UserError(REFDIFF_NEEDS_TRACES)
            if not len(found.get(name, ())):
                raise UserError(
                    f"--baselines {name}: no trace has a reference solution (field solution or "
                    f"reference_solution; --solution-field names another); leave {name} out"
                )
            parts.append(refdiff_baseline(scores, found[name], name))
        elif name == "entropy":
            parts.append(entropy_baseline(scores))
        elif name == "random":
            parts.append(random_baseline(scores, seed))
        else:
            parts.append(uniform_baseline(scores))
        added.append(name)
    empty = pd.DataFrame(columns=[*_KEEP, "method", "score"])
    rows = pd.concat(parts, ignore_index=True) if parts else empty
    return rows, added, notes


# ----------------------------------------------------------------------------- position-length


def position_length_baseline(scores: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Rows of the ``position-length`` baseline for every trace in ``scores`` (see the module
    docstring)."""
    seg, row_to_seg, _ = _segmentation(scores)
    if seg.empty:
        return seg.assign(method="position-length", score=np.nan)
    coarse = position_baseline(scores, reference)["score"].to_numpy()
    k, rank = seg["k"].to_numpy(), seg["rank"].to_numpy()
    width = int(k.max())
    cell = (k - 1) * width + rank  # one cell per (K, index)
    n_cells = width * width
    value = _other_traces_mean(scores, reference, seg, row_to_seg, cell, n_cells, coarse)
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "position-length"
    out["score"] = value
    return out


# ----------------------------------------------------------------------------- refdiff


def _field(t: object, key: str) -> object:
    return t.get(key) if isinstance(t, Mapping) else getattr(t, key, None)


def _extra(t: object, key: str) -> object:
    """A field of a record dict, or of a ``Trace``'s extra fields."""
    if isinstance(t, Mapping):
        return t.get(key)
    return (getattr(t, "extra", None) or {}).get(key)


def _right(t: object) -> bool:
    """A right-answer response: its correct / outcome / reward field ≥ 0.5."""
    for key in ("correct", "outcome", "reward"):
        value = _field(t, key)
        if value is not None and not isinstance(value, (list, dict)):
            return float(value) >= 0.5
    return False


def _problem(t: object) -> str:
    """What groups responses to one problem: the ``problem_id`` field, else the prompt."""
    pid = _extra(t, "problem_id")
    return f"id:{pid}" if pid is not None else f"prompt:{_field(t, 'prompt')}"


def listed_solutions(t: object) -> list[str]:
    """The ``solution`` and every text of the ``solutions`` field (a list or one text)."""
    more = _extra(t, "solutions")
    more = [more] if isinstance(more, str) else list(more or [])
    return [x for x in [_field(t, "solution"), *more] if isinstance(x, str) and x.strip()]


def departure_from_all(response: str, references: Sequence[str]) -> int:
    """Where ``response`` leaves every one of ``references``: the latest of its departures
    from each (``first_departure``), −1 when it follows one of them throughout."""
    found = [first_departure(response, r) for r in references]
    return -1 if -1 in found else max(found)


def departures_from_traces(traces: Iterable, references: str = "solution") -> pd.Series:
    """Where each trace departs from its known paths (trace id -> offset; a trace without a
    solution is left out). ``references``: ``solution`` (its reference solution,
    ``first_departure``), ``solutions`` (also its ``solutions`` list) or ``siblings`` (also
    every other right-answer response to the same problem among ``traces``), the departure
    from several being where the trace leaves every one (``departure_from_all``).
    ``traces``: ``Trace`` records or dicts with id, response, solution (and solutions,
    problem_id or prompt, correct)."""
    if references not in REFDIFF.values():
        raise ValueError(f"references must be one of {', '.join(REFDIFF.values())}")
    traces = list(traces)
    right: dict[str, list[tuple[str, str]]] = {}
    if references == "siblings":
        for t in traces:
            if _right(t):
                right.setdefault(_problem(t), []).append((str(_field(t, "id")),
                                                          str(_field(t, "response"))))
    found = {}
    for t in traces:
        if not _field(t, "solution"):
            continue
        tid, response = str(_field(t, "id")), str(_field(t, "response"))
        if references == "solution":
            found[tid] = first_departure(response, str(_field(t, "solution")))
            continue
        paths = listed_solutions(t)
        if references == "siblings":
            paths += [r for other, r in right.get(_problem(t), []) if other != tid]
        found[tid] = departure_from_all(response, paths)
    return pd.Series(found, dtype="int64")


def refdiff_baseline(scores: pd.DataFrame, departures: Mapping[str, int] | pd.Series,
                     name: str = "refdiff") -> pd.DataFrame:
    """Rows of a string comparison (``refdiff`` or one of ``REFDIFF``, ``name``): −1 on the
    segment holding the trace's departure offset, 0 elsewhere; NaN on traces without one (no
    solution)."""
    seg, _, _ = _segmentation(scores)
    at = seg["trace_id"].map(pd.Series(departures, dtype="float64")).to_numpy(dtype="float64")
    inside = (seg["char_start"].to_numpy() <= at) & (at < seg["char_end"].to_numpy())
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = name
    out["score"] = np.where(np.isnan(at), np.nan, np.where(inside, -1.0, 0.0))
    return out


# ----------------------------------------------------------------------------- entropy, random


def entropy_baseline(scores: pd.DataFrame) -> pd.DataFrame:
    """Rows of the ``entropy`` baseline: minus each segment's mean token entropy (the first
    finite value any row of that segment carries; NaN when none does)."""
    if ENTROPY_COLUMN not in scores.columns:
        raise UserError(
            f"--baselines entropy: the score tables have no {ENTROPY_COLUMN!r} column (the "
            "segmentation pass writes it); rescore the traces with this version or leave "
            "entropy out"
        )
    seg, row_to_seg, _ = _segmentation(scores)
    ent = pd.to_numeric(scores[ENTROPY_COLUMN], errors="coerce").to_numpy(dtype="float64")
    value = np.full(len(seg), np.nan)
    rows = np.flatnonzero(np.isfinite(ent))[::-1]  # written last to first: the first wins
    value[row_to_seg[rows]] = ent[rows]
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "entropy"
    out["score"] = -value
    return out


def _trace_seed(trace_id: str, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{trace_id}".encode()).digest()[:8], "little")


def random_baseline(scores: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Rows of the ``random`` baseline: K uniform draws per trace from a generator seeded by the
    trace id and ``seed``."""
    seg, _, _ = _segmentation(scores)
    value = np.empty(len(seg))
    for idx in seg.groupby("code").indices.values():
        rng = np.random.default_rng(_trace_seed(str(seg["trace_id"].iloc[idx[0]]), seed))
        value[idx] = rng.random(len(idx))
    out = seg.loc[:, list(_KEEP)].copy()
    out["method"] = "random"
    out["score"] = value
    return out
