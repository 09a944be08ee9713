"""The run: parse the options, give each part its share of the budget under a deadline, record
what it measured (a broken or late part is a finding, and the next part runs), write the JSON
and print the table."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import tokenizers
import torch
import transformers
from transformers import PreTrainedTokenizerFast

import benchmarks.gpu_check as package
import cotcredit
from benchmarks.gpu_check import ROOT
from benchmarks.gpu_check.agreement import part_agreement
from benchmarks.gpu_check.bench import part_bench
from benchmarks.gpu_check.generation import part_generation
from benchmarks.gpu_check.mc import part_mc
from benchmarks.gpu_check.shapes import (
    REAL,
    REAL_PLAN,
    SMALL,
    SMALL_PLAN,
    Plan,
    Shape,
    build_model,
    only_models,
    parse_ints,
    with_sizes,
)
from benchmarks.gpu_check.speed import part_speed
from benchmarks.gpu_check.table import markdown_table, print_table
from benchmarks.gpu_check.timing import GIB, Deadline, PartTimeout, free_memory
from benchmarks.gpu_check.traces import build_tokenizer
from benchmarks.gpu_check.train import part_train
from cotcredit.lm import Scorer

PARTS = ("agreement", "speed", "generation", "mc", "bench", "train")
# Share of the remaining global budget each part gets; time a part leaves unused flows on.
# Sized from the first H200 run (docs/guides/performance.md): agreement ~40 s a model, speed
# ~20 s a model and length, mc ~35 s a model, bench 20-45 s a regime, train ~10 s a step.
SHARES = {"agreement": 0.22, "speed": 0.28, "generation": 0.05, "mc": 0.12, "bench": 0.15,
          "train": 0.18}


@dataclass
class RunContext:
    args: argparse.Namespace
    device: torch.device
    plan: Plan
    shapes: dict[str, Shape]
    report: dict
    _tokenizers: dict = dataclasses.field(default_factory=dict)
    _scorers: dict = dataclasses.field(default_factory=dict)

    def tokenizer(self, vocab: int) -> PreTrainedTokenizerFast:
        if vocab not in self._tokenizers:
            self._tokenizers[vocab] = build_tokenizer(vocab)
        return self._tokenizers[vocab]

    def scorer(self, name: str, dtype: torch.dtype) -> Scorer:
        """A scorer on a random model of shape `name`, built once and kept until `release`."""
        key = (name, dtype)
        if key not in self._scorers:
            shape = self.shapes[name]
            model = build_model(shape, self.device, dtype)
            self._scorers[key] = Scorer(model, self.tokenizer(shape.vocab), name=name)
        return self._scorers[key]

    def release(self) -> None:
        self._scorers.clear()
        free_memory()

    def checkpoint(self) -> None:
        """Write the JSON so far: a run cut short keeps what it measured."""
        if self.args.json:
            write_json(self.args.json, self.report)


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def installed_versions(names) -> dict[str, str | None]:
    """Each distribution's version, None where it is not installed (nothing is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def metadata(device: torch.device, args, plan: Plan) -> dict:
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
        else (platform.processor() or platform.machine()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "cotcredit": cotcredit.__version__,
        "python": platform.python_version(),
        # the training and bench stack, where installed (carried as wheels on a GPU machine)
        "packages": installed_versions(("trl", "datasets", "accelerate", "pydantic",
                                        "math-verify", "pyarrow")),
        "threads": torch.get_num_threads(),
        "small": bool(args.small),
        "budget_s": args.budget,
        "argv": sys.argv[1:],
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta["device_memory_gib"] = props.total_memory / GIB
        meta["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    try:
        meta["git"] = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
            text=True, timeout=5,
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        meta["git"] = None
    return meta


RUNNERS = {"agreement": part_agreement, "speed": part_speed, "generation": part_generation,
           "mc": part_mc, "bench": part_bench, "train": part_train}


def run_parts(ctx: RunContext, parts: list[str]) -> None:
    start = time.monotonic()
    for i, part in enumerate(parts):
        left = ctx.args.budget - (time.monotonic() - start)
        share = SHARES[part] / sum(SHARES[p] for p in parts[i:])
        budget = max(0.0, left * share)
        result = {"status": "ok", "budget_s": round(budget, 1), "seconds": 0.0, "rows": [],
                  "notes": []}
        ctx.report["parts"][part] = result
        print(f"[gpu_check] {part}: budget {budget:.0f} s", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        if budget < 1.0:
            result["status"] = "skipped: time"
            continue
        deadline = Deadline(budget)
        try:
            with deadline:
                RUNNERS[part](ctx, deadline, result)
        except PartTimeout:
            result["status"] = "skipped: time"
        except KeyboardInterrupt:
            if not deadline.fired:
                raise
            result["status"] = "skipped: time"
        except Exception as e:  # a broken part is a finding: record it, run the next
            from cotcredit.errors import is_oom

            kind = "out of memory" if is_oom(e) else type(e).__name__
            first = (str(e).strip().splitlines() or [""])[0][:300]
            result["status"] = f"error: {kind}: {first}"
            result["traceback"] = traceback.format_exc(limit=12)
        result["seconds"] = round(time.monotonic() - t0, 2)
        if result["status"] == "skipped: time" and result["rows"]:
            result["notes"].append(f"stopped at its deadline after {len(result['rows'])} rows")
        free_memory()
        ctx.checkpoint()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=package.__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(package.__doc__.splitlines()[1:5]))
    ap.add_argument("--device", default="auto", help="auto (CUDA when available) | cuda | cpu")
    ap.add_argument("--small", action="store_true", help="tiny shapes and short traces (CPU, CI)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    ap.add_argument("--budget", type=float, default=None,
                    help="global deadline in seconds [default: 540, --small 60]")
    ap.add_argument("--json", type=Path, default=None, help="write every figure here")
    ap.add_argument("--markdown", type=Path, default=None,
                    help="also write the table as Markdown (for the README)")
    ap.add_argument("--models", default=None,
                    help="comma list: only these shapes (default: all of the plan; names: "
                    f"{', '.join([*REAL, *SMALL])})")
    ap.add_argument("--tokens", default=None,
                    help="comma list: trace lengths of the speed part instead of the plan's (the "
                    "first also sizes the agreement trace), e.g. 256 for a quick look")
    ap.add_argument("--segments", default=None,
                    help="comma list: segment counts K instead of the plan's (the first also for "
                    "agreement)")
    ap.add_argument("--regimes", default=None,
                    help="comma list: the bench part's regimes instead of the plan's")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"--parts: unknown {', '.join(unknown)} (choose from {', '.join(PARTS)})")
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            ap.error("--device cuda: CUDA is not available on this machine")
    if args.threads:
        torch.set_num_threads(args.threads)
    plan = SMALL_PLAN if args.small else REAL_PLAN
    shapes = SMALL if args.small else REAL
    if args.models:
        keep = [m.strip() for m in args.models.split(",") if m.strip()]
        bad = [m for m in keep if m not in shapes]
        if bad:
            ap.error(f"--models: unknown {', '.join(bad)} here (choose from {', '.join(shapes)})")
        plan = only_models(plan, keep)
    try:
        plan = with_sizes(plan, parse_ints(args.tokens), parse_ints(args.segments))
    except ValueError:
        ap.error("--tokens and --segments take comma lists of positive integers")
    if args.regimes:
        plan = dataclasses.replace(plan, bench_regimes=tuple(
            r.strip() for r in args.regimes.split(",") if r.strip()))
    if args.budget is None:
        args.budget = plan.budget
    if device.type == "cuda":
        # Full float32 matmuls: the float32 agreement check must not run in TF32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif not args.small:
        print("[gpu_check] real shapes on CPU take far longer than --budget allows; parts will "
              "stop at their deadlines (use --small)", file=sys.stderr)
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    report = {"meta": metadata(device, args, plan), "parts": {}}
    ctx = RunContext(args, device, plan, shapes, report)
    t0 = time.monotonic()
    run_parts(ctx, parts)
    report["meta"]["seconds"] = round(time.monotonic() - t0, 1)
    ctx.checkpoint()
    print_table(report)
    if args.markdown:
        args.markdown.write_text(markdown_table(report))
    if args.json:
        print(f"[gpu_check] wrote {args.json}", file=sys.stderr)
    broken = [p for p, r in report["parts"].items() if r["status"].startswith("error")]
    disagree = [r for r in report["parts"].get("agreement", {}).get("rows", [])
                if not r["fp32_ok"] or r.get("bf16_ok") is False]
    return 1 if broken or disagree else 0


if __name__ == "__main__":
    sys.exit(main())
