"""Monte Carlo rollout values: the unbiased (and expensive) reference RREDCoT approximates.

State s_k = prompt + reasoning tokens [:b_k], with b_0 = 0 (the bare prompt) and b_K the end of
the reasoning (segment k covers tokens b_(k-1)..b_k). From each scored state the model samples
N completions c_(k,1..N) ~ π(· | s_k) (temperature, top-p, max new tokens, seed). Completion i is
graded on what it states: its final answer is extracted from reasoning[:b_k] + decode(c_(k,i))
but must end inside the completion (a sentence "so the answer is | 12" cut by the boundary
counts; a \boxed{} or answer statement wholly inside the prefix does not), and is checked against
the reference answer Y* with math-verify (`grading.grade_completion(..., prefix=)`; no answer =
wrong).

    n_k      = N                     (truncated="wrong": cut-off completions count as wrong)
             = N − n_truncated_k     (truncated="drop":  they are left out)
    V_k      = n_correct_k / n_k     (n_correct_k: correct completions that were not cut off)
    stderr_k = sqrt(V_k (1 − V_k) / n_k)
    credit_k = V_k − V_(k−1)         (segment k = 1..K)  ⇒  Σ_k credit_k = V_K − V_0
    V_k^A, V_k^B                     V_k from the even-indexed samples (0, 2, 4, ...) and from
                                     the odd-indexed ones (1, 3, 5, ...) of boundary k alone
    score_half_a = V_k^A − V_(k−1)^A,  score_half_b = V_k^B − V_(k−1)^B

The two half scores are independent estimates of the same credits from disjoint rollouts. Their
correlation across segments, r_AB, shows MC's own noise at N/2 rollouts. It is not a ceiling for
other methods' agreement with `score` (a mean of per-trace rank correlations over a few segments
is no reliability coefficient to step up): `compare` simulates the ceiling and rollout
equivalence from the saved rollouts instead (cotcredit.report.rollouts). They use the same
truncation policy and interpolation as `score`; a half with no usable rollout (N = 1, or all cut
off under "drop") has value NaN, so its scores are NaN. With N even and truncated="wrong",
(score_half_a + score_half_b) / 2 = score exactly.

A boundary whose rollouts were all cut off under "drop" has no value (score NaN, `score_note`).

`max_boundaries` = M < K + 1 scores M evenly spaced boundaries (b-index round(i·K/(M−1)), 0 and
K among them); V in between is linear in the boundary index, so a span's credit V_b − V_a is
spread evenly over its segments, whose rows say `interpolated` = True (stderr NaN, counts 0).

Adaptive mode (`rollouts="auto"`, `--rollouts auto`): rollouts in rounds, a first round from
every scored boundary, then more only from boundaries whose value is not resolved to
`precision` and where a binary search for the first drop in value asks, within `rollout_budget`
rollouts per boundary on average; the estimator, the stopping rule and the budget are in
`cotcredit.methods.mc_adaptive`. Rollout j of a boundary is the fixed mode's rollout j (same
seed: same stream), n_rollouts varies by boundary, and everything above holds with N = n_k.
`--first-round ends` samples only the first and the last boundary first and bisects between
them (boundaries never sampled are interpolated, as with `max_boundaries`); `--prior` lets a
cheap credit say where the search looks first (`cotcredit.methods.mc_prior`).

Truncated rollouts (`--horizon N`, `--horizon-lines L`): each rollout generates at most N tokens
(or L lines); one cut there counts p(Y* | s_k ⊕ rollout ⊕ E) instead of 0/1, and V_k is the
mean of the rollouts' values (`cotcredit.methods.mc_horizon`; N = 0 is R̂). stderr is then
sqrt(mean((x − V_k)²) / n_k), which is the formula above for 0/1 values; n_correct counts the
rollouts that ended right.

Cost: all N·(K+1) rollouts of a trace go to the generator in one call (`cotcredit.lm.sampling`:
shared prefill per state, prefix caching under vLLM). The columns are the spec's (`SPEC`);
`save_rollouts` writes every completion to a Parquet file, per trace.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from cotcredit.data import grading
from cotcredit.errors import UserError
from cotcredit.lm.encoding import ForcingOptions, resolved
from cotcredit.lm.generation import Completion, SamplingSettings
from cotcredit.methods import MethodCommand, MethodRows, MethodSpec, TraceContext
from cotcredit.methods.mc_adaptive import DECISIONS, FIRST_ROUNDS, adaptive_draws, generate_calls
from cotcredit.methods.mc_horizon import cut_by_horizon, forced_values, generation_limits
from cotcredit.methods.mc_prior import (
    PRIORS,
    READS_TRACE_PASS,
    follows_paths,
    prior_credits,
    prior_references,
)
from cotcredit.options import option
from cotcredit.store import io

if TYPE_CHECKING:  # pyarrow loads with the first table (keeps `--help` fast)
    import pyarrow as pa

    from cotcredit.store.tables import TableWriter


@dataclass(frozen=True)
class McOptions(SamplingSettings):
    """Options of the Monte Carlo baseline."""

    # Per-sample random streams make results independent of the batch size; where rollouts are
    # saved does not change scores either. Neither blocks resuming a run.
    NEVER_IN_RUN_KEY: ClassVar[tuple[str, ...]] = ("batch_size", "save_rollouts", "vllm_args")
    # The adaptive mode's settings change nothing in the fixed mode (whose run keys they leave
    # as they were before the adaptive mode existed).
    ADAPTIVE_FIELDS: ClassVar[tuple[str, ...]] = ("rollout_budget", "precision", "round_rollouts",
                                                  "first_round", "decision", "prior")
    # Fields added after runs were keyed: left out of the key at their defaults, so those runs
    # keep their keys (answer forcing counts only where a horizon or a prior uses it).
    LATER_FIELDS: ClassVar[tuple[str, ...]] = ("first_round", "decision", "prior", "horizon",
                                               "horizon_lines")

    rollouts: int | str = option(
        8, short="-n",
        help="Completions N sampled from every boundary, or auto: in rounds, until each "
        "boundary's value is resolved (--precision) or the budget is spent (--rollout-budget).",
    )
    rollout_budget: int = option(
        16, help="--rollouts auto: rollouts per scored boundary on average (a trace takes at most "
        "budget x boundaries, one boundary at most 4 x budget).",
    )
    precision: float = option(
        0.2, help="--rollouts auto: a boundary is resolved when the 95% interval of its value is "
        "no wider than +-precision.",
    )
    round_rollouts: int = option(
        8, help="--rollouts auto: rollouts per boundary in each round (the first from every "
        "boundary).",
    )
    first_round: str = option(
        "all", choices=FIRST_ROUNDS,
        help="--rollouts auto: where the first round goes: all (every scored boundary) or ends "
        "(the first and the last; the search for the first drop bisects between them and "
        "boundaries never sampled are interpolated).",
    )
    decision: str = option(
        "interval", choices=DECISIONS,
        help="--rollouts auto: the search places a boundary above or below the drop by its 95% "
        "interval (interval) or by its estimate alone (point: for few rollouts a round).",
    )
    prior: str = option(
        "none", choices=PRIORS,
        help="--rollouts auto: a cheap credit that tells the search where a drop is likely: "
        "rhat (R̂), rredcot (R̂ + v̂), entropy (the model's), paths (where the trace leaves its "
        "listed solutions); none: the middle boundary.",
    )
    horizon: int | None = option(
        None,
        help="Truncated rollouts: at most this many tokens each; a rollout cut there counts "
        "the probability of the right answer forced after it (0: R̂) [default: no limit].",
    )
    horizon_lines: int | None = option(
        None,
        help="Truncated rollouts: at most this many lines each (hf backend), then valued as "
        "with --horizon.",
    )
    forcing: ForcingOptions = option(
        default_factory=ForcingOptions,
        help="Answer forcing (--horizon, --horizon-lines, --prior rhat/rredcot).",
    )
    truncated: str = option(
        "wrong", choices=("wrong", "drop"),
        help="Rollouts cut off by --max-new-tokens: wrong (count as wrong) or drop (leave out "
        "of V).",
    )
    max_boundaries: int | None = option(
        None,
        help="Score at most this many boundaries per trace (evenly spaced, incl. the prompt and "
        "the full reasoning); V is interpolated in between.",
    )
    save_rollouts: str | None = option(
        None,
        help="Parquet table receiving every rollout (trace, boundary, sample, text, answer, "
        "correct, truncated).",
    )

    def __post_init__(self) -> None:
        # `rollouts` is typed int | str for "auto": other text becomes a number or is refused
        # here, where the options are built (before any model is loaded).
        if isinstance(self.rollouts, str) and self.rollouts != "auto":
            try:
                object.__setattr__(self, "rollouts", int(self.rollouts))
            except ValueError:
                raise UserError(f"--rollouts must be a number or auto, got "
                                f"'{self.rollouts}'") from None

    @property
    def NOT_IN_RUN_KEY(self) -> tuple[str, ...]:  # noqa: N802 (the name the pipeline reads)
        """The fields that do not change results (left out of the run key)."""
        unused = () if self.adaptive else self.ADAPTIVE_FIELDS
        defaults = McOptions.__dataclass_fields__
        at_default = tuple(f for f in self.LATER_FIELDS if getattr(self, f) == defaults[f].default)
        forcing = () if self.forces_answers else ("forcing",)
        return tuple(dict.fromkeys(self.NEVER_IN_RUN_KEY + unused + at_default + forcing))

    @property
    def truncates(self) -> bool:
        """Whether rollouts stop at a horizon (`--horizon`, `--horizon-lines`)."""
        return self.horizon is not None or self.horizon_lines is not None

    @property
    def forces_answers(self) -> bool:
        """Whether the run forces answers (a horizon, or a prior that reads R̂)."""
        return self.truncates or (self.adaptive and self.prior in ("rhat", "rredcot"))

    @property
    def adaptive(self) -> bool:
        """Whether rollouts are taken in rounds (`--rollouts auto`)."""
        return self.rollouts == "auto"

    def validate(self) -> McOptions:
        """Check the options (a one-line UserError naming the flag); returns self."""
        if self.adaptive:
            if self.round_rollouts < 1:
                raise UserError(f"--round-rollouts must be at least 1, got {self.round_rollouts}")
            if self.rollout_budget < 1:
                raise UserError(f"--rollout-budget must be at least 1, got {self.rollout_budget}")
            if self.first_round == "all" and self.rollout_budget < self.round_rollouts:
                raise UserError(f"--rollout-budget ({self.rollout_budget}) must be at least "
                                f"--round-rollouts ({self.round_rollouts}): the first round "
                                "samples every boundary (or --first-round ends)")
            if not 0 < self.precision < 1:
                raise UserError(f"--precision must be in (0, 1), got {self.precision}")
            if self.backend != "hf":
                raise UserError("--rollouts auto needs --backend hf (vLLM draws a prompt's "
                                "samples from one stream, which a later round cannot continue)")
            if self.truncates:
                raise UserError("--horizon and --horizon-lines take a fixed --rollouts N, not "
                                "auto")
        elif self.rollouts < 1:
            raise UserError(f"--rollouts must be at least 1, got {self.rollouts}")
        if self.horizon is not None and self.horizon < 0:
            raise UserError(f"--horizon must be at least 0, got {self.horizon}")
        if self.horizon_lines is not None:
            if self.horizon_lines < 1:
                raise UserError(f"--horizon-lines must be at least 1, got {self.horizon_lines}")
            if self.backend != "hf":
                raise UserError("--horizon-lines needs --backend hf")
        self.check_sampling(self.round_rollouts if self.adaptive else self.rollouts)
        if self.max_boundaries is not None and self.max_boundaries < 2:
            raise UserError(f"--max-boundaries must be at least 2 (the prompt and the full "
                            f"reasoning), got {self.max_boundaries}")
        return self


@dataclass
class Rollout:
    """One graded completion from boundary `boundary` (index k of state s_k)."""

    boundary: int
    token: int  # reasoning tokens in the state (b_k)
    sample: int
    text: str  # generated text (the state's reasoning prefix is not repeated)
    n_tokens: int
    answer: str | None
    correct: bool
    truncated: bool
    # A rollout cut at the horizon: p(Y* | state ⊕ rollout ⊕ E) (None: it is graded 0/1).
    value: float | None = None

    @property
    def worth(self) -> float:
        """What it counts in V: its forced value, or 1/0 (a cut-off rollout counts 0)."""
        if self.value is not None:
            return self.value
        return 1.0 if self.correct and not self.truncated else 0.0


@dataclass
class BoundaryValue:
    """V_k from the rollouts of one scored boundary."""

    value: float
    stderr: float
    n_rollouts: int
    n_correct: int
    n_truncated: int


def scored_boundaries(K: int, max_boundaries: int | None) -> list[int]:
    """Indices 0..K of the boundaries to score: all, or M evenly spaced including 0 and K."""
    if max_boundaries is None or max_boundaries >= K + 1:
        return list(range(K + 1))
    M = max_boundaries
    return sorted({round(i * K / (M - 1)) for i in range(M)})


def sample_rollouts(ctx: TraceContext, options: McOptions,
                    requests: dict[int, tuple[int, int]]) -> list[Rollout]:
    """Sample and grade rollouts: `requests` maps a boundary index to (first sample, count), and
    samples first..first+count−1 of it are taken; one generator call per distinct (first, count)
    (one call in the fixed mode)."""
    enc, trace = ctx.encoded, ctx.trace
    bounds = ctx.segmentation.boundaries
    gen = ctx.generator(options.backend, options.engine_args())
    max_new, stop_lines = generation_limits(options.horizon, options.horizon_lines,
                                            options.max_new_tokens)
    rollouts, cut = [], []
    for (first, count), which in generate_calls(requests):
        prompts = [enc.prefix(bounds[k]) for k in which]
        # Keyed by trace and token offset: a state gets the same rollouts whatever else is scored.
        keys = [f"{trace.id}@{bounds[k]}" for k in which]
        sampling = replace(options.sampling(count), first_sample=first, max_new_tokens=max_new,
                           stop_lines=stop_lines)
        completions = (gen.generate(prompts, sampling, keys=keys) if max_new > 0 else
                       [[Completion([], "", "length")] * count for _ in which])  # --horizon 0
        for k, cs in zip(which, completions, strict=True):
            prefix_text = trace.response[: enc.token_starts[bounds[k]]]
            for j, c in enumerate(cs, start=first):
                if options.truncates and cut_by_horizon(c, options.horizon,
                                                        options.max_new_tokens):
                    rollouts.append(Rollout(k, bounds[k], j, c.text, len(c.token_ids), None,
                                            False, False))
                    cut.append((rollouts[-1], c.token_ids))
                    continue
                # Graded on what the rollout states, not on an answer in the prefix it continues.
                graded = grading.grade_completion(c.text, trace.answer, prefix=prefix_text)
                rollouts.append(Rollout(k, bounds[k], j, c.text, len(c.token_ids), graded.answer,
                                        bool(graded.correct), c.truncated))
    if cut:
        values = forced_values(ctx, options.forcing, [(r.token, ids, r.text) for r, ids in cut])
        for (r, _), v in zip(cut, values, strict=True):
            r.value = v
    return rollouts


def adaptive_rollouts(ctx: TraceContext, options: McOptions, which: list[int]) -> list[Rollout]:
    """The rollouts of `--rollouts auto` from the boundary indices `which`
    (`cotcredit.methods.mc_adaptive`), ordered by boundary and sample."""
    taken: list[Rollout] = []

    def sample(requests: dict[int, tuple[int, int]]) -> list[Rollout]:
        taken.extend(got := sample_rollouts(ctx, options, requests))
        return got

    adaptive_draws(options, which, prior_credits(ctx, options.prior, options.forcing), sample)
    return sorted(taken, key=lambda r: (r.boundary, r.sample))


def boundary_value(rollouts: list[Rollout], policy: str) -> BoundaryValue:
    """V_k, its standard error and counts under the truncation policy (the mean of the
    rollouts' worth: 1/0, or the forced value of a rollout cut at the horizon)."""
    n = len(rollouts)
    n_trunc = sum(r.truncated for r in rollouts)
    n_correct = sum(r.correct and not r.truncated for r in rollouts)
    used = [r for r in rollouts if not (policy == "drop" and r.truncated)]
    if not used:
        return BoundaryValue(math.nan, math.nan, n, n_correct, n_trunc)
    if all(r.value is None for r in used):  # 0/1 values: exactly the fixed mode's arithmetic
        v = n_correct / len(used)
        return BoundaryValue(v, math.sqrt(v * (1 - v) / len(used)), n, n_correct, n_trunc)
    x = [r.worth for r in used]
    v = math.fsum(x) / len(x)
    spread = math.fsum((xi - v) ** 2 for xi in x) / len(x)
    return BoundaryValue(v, math.sqrt(spread / len(x)), n, n_correct, n_trunc)


def interpolate(K: int, measured: dict[int, float]) -> list[float]:
    """V at every boundary 0..K: measured values, linear in the index in between."""
    ks = sorted(measured)
    values = [math.nan] * (K + 1)
    for a, b in zip(ks, ks[1:], strict=False):
        for k in range(a, b + 1):
            t = (k - a) / (b - a)
            values[k] = measured[a] if t == 0 else measured[b] if t == 1 else \
                measured[a] + t * (measured[b] - measured[a])
    if len(ks) == 1:
        values[ks[0]] = measured[ks[0]]
    return values


def run(ctx: TraceContext, options: McOptions) -> MethodRows:
    """MC rows for one trace: score = V_k − V_(k−1) per segment, with values and counts."""
    K = len(ctx.segmentation.segments)
    which = scored_boundaries(K, options.max_boundaries)
    if options.adaptive:
        rollouts = adaptive_rollouts(ctx, options, which)
    else:
        rollouts = sample_rollouts(ctx, options, {k: (0, options.rollouts) for k in which})
    forced = any(r.value is not None for r in rollouts)
    if forced or (options.adaptive and options.prior in READS_TRACE_PASS):
        # The forced answers and the prior read the trace's forward pass: Monte Carlo alone
        # would not run it, so it counts in this run's cost.
        ctx.extra_cost["cost_forward_tokens"] = len(ctx.forward.ids)
    if options.save_rollouts:
        save_rollouts(ctx, options, rollouts)
    n_trunc = sum(r.truncated for r in rollouts)
    if n_trunc:
        ctx.notes.append(f"some rollouts hit --max-new-tokens {options.max_new_tokens} (column "
                         f"n_truncated; they are counted {'as wrong' if options.truncated == 'wrong' else 'out (dropped)'})")
    rows = rollout_rows(K, which, rollouts, options.truncated)
    if any(not math.isfinite(r["score"]) for r in rows):
        # Every row of the trace gets the column, so the trace's rows share one schema.
        for r in rows:
            r["score_note"] = None if math.isfinite(r["score"]) else \
                "no value: every rollout of a boundary was cut off (--truncated drop)"
        ctx.notes.append("some boundaries had all rollouts cut off and no value (score NaN, "
                         "see score_note); raise --max-new-tokens")
    return {"mc": rows}


def rollout_rows(K: int, which: list[int], rollouts: list[Rollout], policy: str
                 ) -> list[dict]:
    """The rows of a trace of K segments from its rollouts (boundaries `which` scored; one that
    took no rollout is interpolated like the boundaries between scored ones). A replay of saved
    rollouts (`cotcredit.methods.mc_replay`) builds its rows here too."""
    by_k: dict[int, list[Rollout]] = {k: [] for k in which}
    for r in rollouts:
        by_k[r.boundary].append(r)
    stats = {k: boundary_value(by_k[k], policy) for k in which if by_k[k]}
    V = interpolate(K, {k: s.value for k, s in stats.items()})
    # Split halves by sample index: even samples (A) and odd samples (B) of every boundary.
    halves = [
        interpolate(K, {k: boundary_value([r for r in by_k[k] if r.sample % 2 == parity],
                                          policy).value for k in stats})
        for parity in (0, 1)
    ]
    rows = []
    for i in range(K):
        end = stats.get(i + 1)
        row = {
            "score": V[i + 1] - V[i],
            "score_half_a": halves[0][i + 1] - halves[0][i],
            "score_half_b": halves[1][i + 1] - halves[1][i],
            "value_before": V[i],
            "value_after": V[i + 1],
            "stderr": end.stderr if end else math.nan,
            "n_rollouts": end.n_rollouts if end else 0,
            "n_correct": end.n_correct if end else 0,
            "n_truncated": end.n_truncated if end else 0,
            "interpolated": end is None,
            "trace_rollouts": len(rollouts),
            "trace_truncated": sum(r.truncated for r in rollouts),
            "truncated_policy": policy,
        }
        rows.append(row)
    return rows


# ---- saving rollouts -------------------------------------------------------------------------
def rollout_schema(forced: bool = False) -> pa.Schema:
    """The columns of a rollouts table (`--save-rollouts`): one row per rollout; with `forced`
    (a horizon) also `value`, the forced value of a rollout cut there (null: graded 0/1)."""
    import pyarrow as pa

    return pa.schema([
        ("run_id", pa.string()), ("trace_id", pa.string()), ("boundary", pa.int64()),
        ("token", pa.int64()), ("sample", pa.int64()), ("text", pa.string()),
        ("n_tokens", pa.int64()), ("answer", pa.string()), ("correct", pa.bool_()),
        ("truncated", pa.bool_()), *([("value", pa.float64())] if forced else []),
    ])


# One writer per rollouts table and run (opened at its first trace, closed by `finish`): a
# writer reads what the table holds once, so opening one per trace would cost O(traces) each.
_WRITERS: dict[str, TableWriter] = {}


def rollouts_run_key(ctx: TraceContext, options: McOptions) -> str:
    """The run key of a rollouts table: the model and every mc option that changes rollouts."""
    from cotcredit.store.tables import run_key

    opts = {k: v for k, v in asdict(options).items() if k not in options.NOT_IN_RUN_KEY}
    return run_key({"model": ctx.scorer.run_identity(), "mc": opts, "table": "rollouts"})


def save_rollouts(ctx: TraceContext, options: McOptions, rollouts: list[Rollout]) -> None:
    """Append one trace's rollouts to the table `options.save_rollouts` (resumable)."""
    from cotcredit.store.tables import TableWriter
    from cotcredit.version import __version__

    key = rollouts_run_key(ctx, options)
    writer = _WRITERS.get(options.save_rollouts)
    if writer is None or writer.key != key:
        meta = {"run_id": key, "cotcredit_version": __version__, "table": "mc rollouts",
                "model": ctx.scorer.describe(),
                "mc": {k: v for k, v in asdict(options).items() if k != "save_rollouts"}}
        writer = TableWriter(Path(options.save_rollouts), meta,
                             schema=rollout_schema(options.truncates))
        _WRITERS[options.save_rollouts] = writer
    if ctx.trace.id in writer.done:  # resumed after the rollouts but before the scores were saved
        return
    drop = () if options.truncates else ("value",)
    writer.append([
        {"run_id": key, "trace_id": ctx.trace.id,
         **{k: v for k, v in asdict(r).items() if k not in drop}} for r in rollouts
    ])


def finish(options: McOptions) -> None:
    """Close (compact) the run's rollouts table."""
    writer = _WRITERS.pop(options.save_rollouts, None) if options.save_rollouts else None
    if writer is not None:
        writer.close()


def reserve(scorer, trace, options: McOptions) -> int:
    """Context kept free after the trace: the tokens a rollout may generate (and, with a
    horizon, the forced answer after it)."""
    forced = len(scorer.encode_text(trace.answer)) + 64 if options.truncates else 0
    return options.max_new_tokens + forced


def summary_table(run, label: str, options: McOptions):
    """What `cotcredit mc-baseline` prints after a run: traces, rollouts, how many were cut off
    and how they count, mean V_0 and V_K (a rich Table; None when no trace was scored)."""
    from rich.table import Table

    columns = ["trace_id", "segment", "value_before", "value_after", "trace_rollouts",
               "trace_truncated"]
    first, last = {}, {}
    for r in run.read_rows(label, columns=columns):
        first.setdefault(r["trace_id"], r)
        last[r["trace_id"]] = r
    if not first:
        return None
    n = sum(r["trace_rollouts"] for r in first.values())
    cut = sum(r["trace_truncated"] for r in first.values())
    table = Table(title="mc-baseline")
    for c in ("traces", "rollouts", "truncated", "policy", "mean V_0", "mean V_K"):
        table.add_column(c, justify="right")
    v0 = [r["value_before"] for r in first.values()]
    vk = [r["value_after"] for r in last.values()]
    table.add_row(str(len(first)), str(n), f"{cut} ({cut / n:.1%})" if n else "0",
                  options.truncated, f"{sum(v0) / len(v0):.3f}", f"{sum(vk) / len(vk):.3f}")
    return table


def remove_rollouts(options: McOptions) -> None:
    """With `overwrite`, the rollouts table (`save_rollouts`) is replaced too."""
    if options.save_rollouts and Path(options.save_rollouts).exists():
        io.remove_table(options.save_rollouts)


#: The page of `cotcredit mc-baseline` in the docs (made from the registry).
PAGE = """Monte Carlo rollout values: from every segment boundary, sample completions of the reasoning,
grade their answers, and credit each segment with the change in the fraction correct. The
estimator, its cost and when to trust it: [Monte Carlo](../methods/mc.md).

```
cotcredit mc-baseline traces.jsonl                                  # -> mc.parquet, 8 rollouts
cotcredit mc-baseline traces.jsonl -n 24 --max-new-tokens 256 --save-rollouts rollouts.parquet
cotcredit mc-baseline traces.jsonl --backend vllm --vllm-arg tensor_parallel_size=2
cotcredit mc-baseline traces.jsonl --rollouts auto --rollout-budget 16 --precision 0.2
```

Cut-off rollouts are counted (`n_truncated`) and count as wrong (`--truncated wrong`) or are
left out (`--truncated drop`). `score_half_a` and `score_half_b` are the same credit from the
even and the odd rollouts: `compare` correlates them to give MC's split-half reliability.
`--max-boundaries M` scores M evenly spaced boundaries and interpolates between them.
`--save-rollouts rollouts.parquet` keeps every completion; `compare` reads it for rollout
equivalence. After a run the command prints the rollouts, the truncated share and the mean
values at the first and last boundary (the [quickstart](../quickstart.md) shows one).
"""

MC_BASELINE = MethodCommand(
    name="mc-baseline",
    help="""Monte Carlo values: from every segment boundary sample N completions and grade them.

V_k = fraction of the N rollouts from state s_k (prompt + segments 1..k) whose final answer
matches the reference (math-verify), stderr = sqrt(V_k (1 - V_k) / N); the credit of segment
k is V_k - V_(k-1), so a trace's credits sum to V_K - V_0.""",
    default_output="mc.parquet",
    show="values",
    page=PAGE,
)

SPEC = MethodSpec(
    name="mc",
    options_type=McOptions,
    run=run,
    labels=lambda options: ["mc"],
    reserve=reserve,
    references=prior_references,  # the rredcot prior's v̂ follows them (room is kept for them)
    reads_siblings=follows_paths,
    description="Monte Carlo values V_k from N graded rollouts per boundary; credit V_k − V_(k−1)",
    columns={"score_half_a": "float64", "score_half_b": "float64", "value_before": "float64", "value_after": "float64", "stderr": "float64", "n_rollouts": "int64", "n_correct": "int64", "n_truncated": "int64", "interpolated": "bool", "trace_rollouts": "int64", "trace_truncated": "int64", "truncated_policy": "string", "score_note": "string"},
    order=1,
    command=MC_BASELINE,
    prepare=lambda scorer, o: (dataclasses.replace(o, forcing=resolved(scorer, o.forcing))
                               if o.forces_answers else o),
    finish=finish,
    # Rollouts start from the prefixes' own tokens, not the trace cache (a horizon or a prior
    # that reads the pass adds it: `run`).
    uses_trace_pass=False,
    shortcuts={"rollouts": "rollouts", "max_new_tokens": "max_new_tokens"},
    show=("value_before", "value_after", "stderr", "n_correct", "n_truncated", "score"),
    value_columns=("value_before", "value_after"),
    summary=summary_table,
    overwrite=remove_rollouts,
)
