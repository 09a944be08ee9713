"""The training log: ``metrics.jsonl`` (one JSON line per logged step) and reward-curve plots.

Each line holds, first, the figures a researcher compares between runs, under fixed names::

    step, epoch, reward, reward_std, accuracy, kl, loss, step_seconds, rredcot_seconds

``reward``/``reward_std`` are TRL's (mean reward of the completions of the step, mean of the
per-group standard deviations), ``accuracy`` the mean of the correctness reward
(``rewards/correct/mean``), ``kl`` TRL's KL to the reference model (null when ``beta`` is 0: TRL
then has no reference model), ``step_seconds`` the wall time of one optimizer step (generation,
RREDCoT scoring, forward/backward, optimizer; not checkpoint saving) and ``rredcot_seconds`` the
part of it spent computing segment rewards, both averaged over the steps since the previous
line. Then every other value TRL logged, under TRL's names (``learning_rate``, ``grad_norm``,
``entropy``, ``completions/mean_length``, ``frac_reward_zero_std``, ``rredcot/*``...).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path

from transformers import TrainerCallback

METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "reward_curve.png"
ACCURACY_KEY = "rewards/correct/mean"  # the reward function is named `correct`

_RENAMED = {
    "reward": "reward",
    "reward_std": "reward_std",
    ACCURACY_KEY: "accuracy",
    "kl": "kl",
    "loss": "loss",
}


def _plain(value):
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger(TrainerCallback):
    """Appends one line to ``path`` per training log of the trainer (main process only).

    Set ``trainer`` after building the trainer so ``rredcot_seconds`` can be read from its
    ``rredcot_seconds_total`` (0 for a trainer without one).
    """

    def __init__(self, path: str | Path, trainer=None):
        self.path = Path(path)
        self.trainer = trainer
        self._t0: float | None = None
        self._r0 = 0.0
        self._seconds = self._rredcot = 0.0
        self._steps = 0

    def _rredcot_total(self) -> float:
        return float(getattr(self.trainer, "rredcot_seconds_total", 0.0) or 0.0)

    def on_step_begin(self, args, state, control, **kwargs):
        """Start timing a step."""
        self._t0 = time.perf_counter()
        self._r0 = self._rredcot_total()

    def on_step_end(self, args, state, control, **kwargs):
        """Stop timing a step."""
        if self._t0 is not None:
            self._seconds += time.perf_counter() - self._t0
            self._rredcot += self._rredcot_total() - self._r0
            self._steps += 1
            self._t0 = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Append the logged metrics of a step to metrics.jsonl (main process)."""
        logs = dict(logs or {})
        if "train_runtime" in logs or not ("loss" in logs or "reward" in logs):
            return  # the end-of-training summary, or an evaluation log
        n = max(self._steps, 1)
        record = {
            "step": state.global_step,
            "epoch": _plain(logs.pop("epoch", state.epoch)),
            **{new: _plain(logs.pop(old, None)) for old, new in _RENAMED.items()},
            "step_seconds": self._seconds / n if self._steps else None,
            "rredcot_seconds": self._rredcot / n if self._steps else None,
        }
        record.update({k: _plain(v) for k, v in logs.items()})
        self._seconds = self._rredcot = 0.0
        self._steps = 0
        if state.is_world_process_zero:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")


def read_metrics(path: str | Path) -> list[dict]:
    """The lines of a ``metrics.jsonl`` (a half-written last line is ignored)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def truncate_metrics(path: str | Path, last_step: int) -> None:
    """Drop lines after ``last_step`` (a run resumed from that checkpoint logs them again)."""
    path = Path(path)
    if not path.exists():
        return
    keep = [r for r in read_metrics(path) if int(r.get("step", 0)) <= last_step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in keep), encoding="utf-8")
    tmp.replace(path)


def moving_average(values: list[float], window: int) -> list[float]:
    """The trailing mean of the last `window` values (fewer at the start) at each position."""
    out, total, queue = [], 0.0, []
    for v in values:
        queue.append(v)
        total += v
        if len(queue) > window:
            total -= queue.pop(0)
        out.append(total / len(queue))
    return out


def _draw(ax, rows: list[dict], label: str, eval_result: Mapping | None = None) -> None:
    rows = [r for r in rows if r.get("reward") is not None]
    steps = [r["step"] for r in rows]
    reward = [float(r["reward"]) for r in rows]
    std = [float(r.get("reward_std") or 0.0) for r in rows]
    if steps:
        ax.plot(steps, reward, color="tab:blue", alpha=0.35, marker=".", lw=1, label="reward")
        ax.fill_between(
            steps,
            [m - s for m, s in zip(reward, std)],
            [m + s for m, s in zip(reward, std)],
            color="tab:blue",
            alpha=0.08,
        )
    window = max(1, len(steps) // 10)
    if steps and window > 1:
        ax.plot(
            steps,
            moving_average(reward, window),
            color="tab:blue",
            lw=2,
            label=f"moving average ({window} steps)",
        )
    if eval_result:
        for when, style in (("before", ":"), ("after", "--")):
            acc = (eval_result.get(when) or {}).get("accuracy")
            if acc is not None:
                ax.axhline(acc, color="tab:red", ls=style, lw=1, label=f"eval accuracy {when}")
    ax.set_title(label)
    ax.set_xlabel("step")
    ax.set_ylabel("reward (correct = 1)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")


def plot_reward_curve(
    metrics: str | Path, out: str | Path, title: str = "", eval_result: Mapping | None = None
) -> Path:
    """A PNG of the per-step mean reward (± std band, moving average) of one run."""
    label = title or str(Path(metrics).parent.name)
    return plot_reward_curves({label: metrics}, out, {label: eval_result})


def plot_reward_curves(runs: Mapping[str, str | Path], out: str | Path,
                       eval_results: Mapping[str, Mapping | None] | None = None) -> Path:
    """Reward curves of several runs side by side (one panel each, shared y axis), e.g.
    ``{"grpo": "runs/grpo/metrics.jsonl", "rredcot": "runs/rredcot/metrics.jsonl"}``. A run's
    eval accuracy before/after (``eval_results[label]``, else the ``eval.json`` next to its
    metrics) adds lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs) + 1, 4.2), sharey=True,
                             squeeze=False)
    for ax, (label, path) in zip(axes[0], runs.items()):
        eval_path = Path(path).with_name("eval.json")
        if eval_results is not None and label in eval_results:
            eval_result = eval_results[label]
        else:
            eval_result = json.loads(eval_path.read_text()) if eval_path.exists() else None
        _draw(ax, read_metrics(path), label, eval_result)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
