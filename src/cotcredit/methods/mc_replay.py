"""Monte Carlo replayed on saved rollouts: what a run with other options would have returned and
spent, without sampling again.

Rollout j of boundary k is drawn from the stream of (seed, trace, token offset of k, j), whatever
else a run asks for (`cotcredit.lm.sampling`). So a run of `mc` with the same model, seed and
sampling settings that takes at most the saved number of rollouts from each boundary (fixed N,
or `--rollouts auto` with any budget, first round and prior) draws exactly saved rollouts:
`replay` runs its schedule with a draw that reads them (`mc_adaptive.run_rounds`, the code the
live run uses), builds its rows with the live run's code (`mc.rollout_rows`) and counts what the
live run would spend. tests/methods/test_mc_replay.py checks rows and cost against live runs.

Cost, as the transformers backend counts it (`HFGenerator`): each generator call prefills its
longest state once (the others are prefixes of it) and feeds every row's last prompt token once:
prompt_len + b_max − 1 + rows forward tokens, then the generated tokens. A prior's own cost (its
probes and the trace pass it reads) is given, as the live run measures it.

Not replayable: truncated rollouts (`--horizon`: their forced values are not saved with the
rollouts of plain Monte Carlo) and a run that would take more than the saved rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cotcredit.methods.mc import McOptions, Rollout, rollout_rows, scored_boundaries
from cotcredit.methods.mc_adaptive import adaptive_draws, generate_calls


@dataclass
class SavedTrace:
    """One trace's saved rollouts: `rollouts[k]` those of boundary index k in sample order,
    `tokens[k]` the boundary's reasoning tokens b_k, `prompt_len` the rendered prompt's tokens."""

    trace_id: str
    tokens: list[int]
    rollouts: dict[int, list[Rollout]]
    prompt_len: int

    @property
    def n_segments(self) -> int:
        return len(self.tokens) - 1


@dataclass
class Replay:
    """What a run would have returned (`rows`, as `mc` writes them, without the pipeline's
    columns) and spent (forward and generated tokens), and the rollouts it took."""

    rows: list[dict]
    forward_tokens: int
    generated_tokens: int
    taken: list[Rollout] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.forward_tokens + self.generated_tokens


def prompt_len_of_fixed_run(forward_tokens: int, rollouts: int, last_token: int) -> int:
    """The prompt length of a trace from a fixed-N `mc` run's cost on it (one generator call:
    forward = prompt_len + b_K − 1 + rollouts)."""
    return forward_tokens - rollouts - last_token + 1


def replay(saved: SavedTrace, options: McOptions, prior: list[float] | None = None,
           prior_tokens: int = 0) -> Replay:
    """Replay `options` (fixed or `--rollouts auto`) on one trace's saved rollouts. `prior`: the
    credit per segment of `options.prior` (`mc_prior.prior_credits`), `prior_tokens` what it
    cost (counted in forward tokens)."""
    if options.truncates:
        raise ValueError("truncated rollouts (--horizon) cannot be replayed from plain ones")
    K = saved.n_segments
    which = scored_boundaries(K, options.max_boundaries)
    calls: list[tuple[int, list[int]]] = []  # (count, boundary indices) of each generator call
    taken: list[Rollout] = []

    def take(requests: dict[int, tuple[int, int]]) -> list[Rollout]:
        got = []
        for (first, count), ks in generate_calls(requests):
            calls.append((count, ks))
            for k in ks:
                pool = saved.rollouts[k]
                if first + count > len(pool):
                    raise ValueError(f"{saved.trace_id}: boundary {k} needs rollouts up to "
                                     f"{first + count}, {len(pool)} saved")
                got += pool[first:first + count]
        taken.extend(got)
        return got

    if options.adaptive:
        adaptive_draws(options, which, prior, take)
    else:
        take({k: (0, options.rollouts) for k in which})
    taken.sort(key=lambda r: (r.boundary, r.sample))
    prefill = sum(saved.prompt_len + max(saved.tokens[k] for k in ks) - 1 + count * len(ks)
                  for count, ks in calls)
    generated = sum(r.n_tokens for r in taken)
    rows = rollout_rows(K, which, taken, options.truncated)
    return Replay(rows, prefill + prior_tokens, generated, taken)
