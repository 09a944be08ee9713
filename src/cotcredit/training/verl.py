"""RREDCoT segment credit in verl: the advantage estimator ``rredcot`` and what feeds it.

verl's GRPO gives every token of a completion the completion's group-normalised score. The
estimator ``rredcot`` (registered in verl's registry: ``algorithm.adv_estimator=rredcot``)
computes verl's own GRPO advantage ``A`` (``core_algos.compute_grpo_outcome_advantage`` with
``algorithm.norm_adv_by_std_in_grpo``) and moves it between a completion's reasoning segments by
their RREDCoT rewards, exactly as ``cotcredit train`` does (``token_advantages``): each
completion's total Σ_t a_t = A · n stays verl's, no token changes sign, ``strength: 0`` returns
verl's GRPO advantages unchanged, and completions without credit keep plain GRPO.

verl calls an estimator with ``token_level_rewards``, ``response_mask``, ``index`` (group ids)
and ``config`` only, so the credit reaches it from the trainer: the trainer asks the actor's
worker group to score the batch (``verl_workers``: each worker scores its data-parallel share
with the actor's *current* weights, as verl computes log-probs), then hands the credit to the
estimator for the advantage computation that follows (``credit_handed_to_estimator``). The
estimator checks that the credit belongs to the batch it is given (rows, group ids, response
lengths) and says what to do when none was handed over.

Options: the section ``algorithm.rredcot`` (``credit_options``): ``segments``, ``strength``,
``floor``, ``score_with`` (``actor``: the current weights; ``reference``: the starting weights),
``dtype``, ``max_batch_tokens``; every other key is an RREDCoT option (``value``, ``space``,
``forcing.exit_string``...; defaults as ``cotcredit train``: R̂, rewards summing to ζ − g_0).
The outcome ζ a completion's rewards redistribute is its verl score (the sum of its
``token_level_scores``, before any KL penalty); the reference answer is
``reward_model["ground_truth"]``, the optional reference solution ``extra_info["solution"]``.
The trainers are in ``verl_trainers``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from cotcredit.errors import UserError
from cotcredit.extras import require
from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.options import build_options, check_choices, option
from cotcredit.training.advantages import DEFAULT_FLOOR, DEFAULT_STRENGTH
from cotcredit.training.online import ONLINE_OPTIONS, token_advantages

require("the verl integration", "verl")  # one line naming the install, not a traceback
from verl.trainer.ppo import core_algos  # noqa: E402

__all__ = [
    "ESTIMATOR", "CreditOptions", "credit_handed_to_estimator", "credit_options",
    "compute_rredcot_advantage", "rows_to_score",
]

ESTIMATOR = "rredcot"
# Per-completion fields between the trainer and the workers.
SCORE = "rredcot_score"  # bool: score this completion (its GRPO advantage is not 0)
OUTCOME = "rredcot_outcome"  # float: ζ, the completion's verl score
REWARDS = "rredcot_rewards"  # list of segment rewards ([] when not scored)
SPANS = "rredcot_spans"  # list of [start, end) token spans relative to the response
OPTIONS = "rredcot_options"  # the algorithm.rredcot section, as a plain dict


@dataclass(frozen=True)
class CreditOptions:
    """``algorithm.rredcot``: how verl's trainer gets segment credit (keys not named here are
    RREDCoT options)."""

    segments: int | str = option(8, help="Target segments per completion, or 'lines'.")
    strength: float = option(DEFAULT_STRENGTH, help="β of the token weights; 0: verl's GRPO.")
    floor: float = option(DEFAULT_FLOOR, help="Share of the plain advantage every token keeps.")
    score_with: str = option(
        "actor", choices=("actor", "reference"),
        help="actor: the actor's current weights; reference: the starting weights "
        "(actor_rollout_ref.model.path).",
    )
    dtype: str = option(
        "auto", choices=("auto", "bfloat16", "float16", "float32"),
        help="Weights of the scoring copy; auto: bfloat16 on a GPU, float32 on a CPU.",
    )
    max_batch_tokens: int = option(16384, help="Padded tokens per shared forward pass.")
    rredcot: RredcotOptions = option(default_factory=lambda: ONLINE_OPTIONS,
                                     help="RREDCoT options.")


def credit_options(section: Mapping | None) -> CreditOptions:
    """``CreditOptions`` from the ``algorithm.rredcot`` mapping (an RREDCoT option may be named
    bare, ``value: both``, or dotted, ``forcing.exit_string``); unknown keys are an error."""
    own = {f.name for f in dataclasses.fields(CreditOptions)}
    mapping = {}
    for key, value in dict(section or {}).items():
        key = str(key)
        head = key.split(".", 1)[0]
        mapping[key if head in own or "." not in key else f"rredcot.{key}"] = value
    options = build_options(CreditOptions, mapping, where="algorithm.rredcot")
    try:
        check_choices(options)
        options.rredcot.validate()
    except UserError as e:
        raise UserError(f"algorithm.rredcot: {e}") from None
    return options


def _grpo(scores: torch.Tensor, response_mask: torch.Tensor, index, norm_by_std: bool,
          epsilon: float = 1e-6, config=None) -> torch.Tensor:
    return core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=scores, response_mask=response_mask, index=index, epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_by_std, config=config,
    )[0]


def _row_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A per completion, read where GRPO wrote it (its first response token), bit for bit."""
    first = response_mask.long().argmax(dim=1, keepdim=True)
    return advantages.gather(1, first)[:, 0]


def rows_to_score(token_level_scores: torch.Tensor, response_mask: torch.Tensor, index,
                  norm_adv_by_std_in_grpo: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Which completions to score and their outcomes ζ: (``SCORE`` (B,) bool, ``OUTCOME`` (B,)
    float64). A completion whose GRPO advantage is 0 (its group tied) or that has no response
    token has nothing to redistribute, and scoring is the expensive part."""
    plain = _row_advantages(
        _grpo(token_level_scores, response_mask, index, norm_adv_by_std_in_grpo), response_mask
    )
    score = (plain != 0) & (response_mask.sum(dim=1) > 0)
    return score, token_level_scores.sum(dim=1).to(torch.float64)


@dataclass
class _Credit:
    index: list[str]
    lengths: list[int]
    rewards: list[Sequence[float] | None]
    spans: list[Sequence[tuple[int, int]] | None]
    strength: float
    floor: float


_HANDED: list[_Credit] = []  # the credit of the advantage computation running now


@contextlib.contextmanager
def credit_handed_to_estimator(
    index: Sequence, response_mask: torch.Tensor, rewards: Sequence, spans: Sequence,
    options: CreditOptions,
) -> Iterator[None]:
    """Within the block, the estimator ``rredcot`` uses this credit (one row per completion, in
    the order of the batch whose advantages are computed: ``index`` its group ids,
    ``response_mask`` its (B, T) mask; a row's ``rewards``/``spans`` empty or None: plain GRPO)."""
    lengths = response_mask.sum(dim=1).tolist()
    _HANDED.append(_Credit(
        [str(u) for u in index], [int(n) for n in lengths],
        [list(r) if r is not None and len(r) else None for r in rewards],
        [[tuple(s) for s in sp] if sp is not None and len(sp) else None for sp in spans],
        options.strength, options.floor,
    ))
    try:
        yield
    finally:
        _HANDED.pop()


@core_algos.register_adv_est(ESTIMATOR)
def compute_rredcot_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config=None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``rredcot``: verl's GRPO advantage, reweighted per token by the
    segment credit handed to it for this batch (see the module doc). Returns (advantages,
    returns), both (bs, response_length), as verl's GRPO does."""
    if not _HANDED:
        raise ValueError(
            "adv_estimator 'rredcot': no segment credit was handed over for this batch; train "
            "with cotcredit.training.verl_trainers (python -m cotcredit.training.verl_trainers), "
            "or compute the advantage inside credit_handed_to_estimator(...)"
        )
    credit = _HANDED[-1]
    ids = [str(u) for u in index]
    lengths = [int(n) for n in response_mask.sum(dim=1).tolist()]
    if ids != credit.index or lengths != credit.lengths:
        raise ValueError(
            f"adv_estimator 'rredcot': the segment credit is for another batch ({len(credit.index)}"
            f" rows) than the one given ({len(ids)} rows, or other group ids / response lengths)"
        )
    norm = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    grpo = _grpo(token_level_rewards, response_mask, index, norm, epsilon, config)
    plain = _row_advantages(grpo, response_mask)
    advantages = token_advantages(
        plain, credit.rewards, credit.spans, response_mask,
        strength=credit.strength, floor=credit.floor,
    )
    return advantages, advantages


def credit_metrics(rewards: Sequence, n_rows: int) -> dict[str, float]:
    """``rredcot/scored_fraction`` and ``rredcot/segments_mean`` of a batch's credit."""
    scored = [r for r in rewards if r is not None and len(r)]
    return {
        "rredcot/scored_fraction": len(scored) / max(n_rows, 1),
        "rredcot/segments_mean": float(np.mean([len(r) for r in scored])) if scored else 0.0,
    }


def options_dict(section) -> dict:
    """The ``algorithm.rredcot`` section as a plain dict (what travels to the workers)."""
    if section is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(section, DictConfig):
            return dict(OmegaConf.to_container(section, resolve=True))
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    return dict(section)
