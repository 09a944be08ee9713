"""GPU readiness check: cotcredit measured at real model sizes in one short, time-boxed run.

    python benchmarks/gpu_check --json gpu_check.json                # CUDA, real shapes, ~9 min
    python benchmarks/gpu_check --device cpu --small --json out.json # CPU, tiny shapes (CI)
    python benchmarks/gpu_check --parts agreement,speed --budget 200

Models are built with random weights from transformers configs at real shapes (SmolLM2-135M,
Qwen2.5-1.5B, Qwen2.5-7B, a Gemma-3-1B-like hybrid sliding-window model) with a byte-level BPE
tokenizer trained in milliseconds on a few sentences and padded with filler tokens to the
model's real vocabulary, so the output head costs what it really costs. Speed, memory and
packed-vs-naive agreement do not depend on trained weights; nothing is downloaded. `--small`
builds tiny twins of the same families (same code paths) for a CPU run of seconds.

Parts (`--parts`, in this order; each has a deadline, the run a global one `--budget`; a part
past its deadline is stopped, recorded as "skipped: time" with what it finished, and the next
part runs):

- agreement: RREDCoT's R̂ and v̂ (one reference, and four: v̂'s mixture over several valid
  paths) and leave-one-out coalition values scored with packed probes on the trace's KV cache vs
  one plain forward of the model per probe (the reference), in float32 and bfloat16 from the
  same weights; bfloat16 is also compared with the float32 reference.
- speed: `redistribute` (R̂; R̂ + v̂; R̂ + v̂ over four references) vs one plain forward of the
  model (`model(input_ids)`, logits at every position) at 1k, 8k and 32k tokens with K = 16 and
  64 segments; naive (one forward per probe; timed on a sample of probes and scaled to all of
  them) vs packed; peak GPU memory of each measurement.
- generation: batched transformers `generate` throughput for rollouts (completions/s and
  tokens/s at a few batch sizes).
- mc: Monte Carlo rollouts as `mc-baseline` samples them vs plain batched `generate` on the same
  rows (benchmarks/bench_rollouts.py's two sides), tokens/s; whether a rollout's samples stay the
  same across repeats and at half the batch size.
- bench: `cotcredit bench` at its quick size on the regimes with shipped checkpoints (unique,
  multipath, forecast, long), traces sampled on the device: seconds per regime and per method
  (needs math-verify and pydantic; skipped with a note when missing).
- train: one GRPO step in each advantage mode (grpo, rredcot) on a random model of the small
  real shape, then one `cotcredit.train` step per credit source (grpo, oracle, mc, rredcot,
  shuffled) and advantage form (reweight, segment-rewards) on the `unique` checkpoint (needs
  trl and datasets; skipped with a note when they are missing).

One file per part (`agreement.py`, `speed.py`, `generation.py`, `mc.py`, `bench.py`,
`train.py`), beside the model shapes and plans (`shapes.py`), the tokenizer and traces
(`traces.py`), time boxes and timing (`timing.py`), the run (`run.py`) and the table
(`table.py`). `python -m benchmarks.gpu_check` from the repository root runs it too.

Prints one table and writes every figure as JSON (`--json`) with the device name, torch and
transformers versions and the date. Exit status 1 when an agreement check fails or a part
raises; timeouts and skips are not failures.

Travels light: only the standard library, torch, transformers, tokenizers and cotcredit are
imported at the top (cotcredit itself needs numpy, pandas, pyarrow, pyyaml); rich, trl,
datasets, math-verify and pydantic are imported inside the parts that use them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if (ROOT / "src" / "cotcredit").is_dir():  # run from a checkout: use its source, installed or not
    sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
