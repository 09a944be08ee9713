"""Plot the reward curves of the example GRPO and RREDCoT runs side by side.

    cotcredit train examples/train/config_grpo.yaml
    cotcredit train examples/train/config_rredcot.yaml
    python examples/train/plot_curves.py            # -> runs/train-curves.png

Any runs can be compared: `python examples/train/plot_curves.py runs/a runs/b -o ab.png` (each a
training output_dir holding metrics.jsonl; its eval.json adds the eval accuracy before/after).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cotcredit.training.metrics import plot_reward_curves, read_metrics

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "runs",
        nargs="*",
        type=Path,
        default=[ROOT / "runs" / "train-grpo", ROOT / "runs" / "train-rredcot"],
        help="training output folders (default: the two example runs)",
    )
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "runs" / "train-curves.png")
    args = parser.parse_args()
    runs = {}
    for folder in args.runs:
        metrics = folder / "metrics.jsonl"
        if not metrics.is_file():
            raise SystemExit(f"error: {metrics}: no such file (run `cotcredit train` first)")
        label = folder.name
        config = folder / "config.yaml"
        if config.is_file():
            mode = next(
                (
                    line.split(":", 1)[1].strip()
                    for line in config.read_text().splitlines()
                    if line.startswith("advantage:")
                ),
                "",
            )
            label = f"{folder.name} ({mode})" if mode and mode not in folder.name else label
        runs[label] = metrics
        rows = read_metrics(metrics)
        rewards = [r["reward"] for r in rows if r.get("reward") is not None]
        evaluation = folder / "eval.json"
        line = f"{label}: {len(rows)} steps, mean reward {sum(rewards) / max(len(rewards), 1):.3f}"
        if evaluation.is_file():
            e = json.loads(evaluation.read_text())
            if e.get("after"):
                line += (
                    f", eval accuracy {e['before']['accuracy']:.3f} -> {e['after']['accuracy']:.3f}"
                )
        print(line)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    print(plot_reward_curves(runs, args.output))


if __name__ == "__main__":
    main()
