"""Part bench: `cotcredit bench` on the regimes with shipped checkpoints, traces sampled on the
device: seconds per regime and per method."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.gpu_check.timing import Deadline, measure

if TYPE_CHECKING:
    from benchmarks.gpu_check.run import RunContext


def part_bench(ctx: RunContext, deadline: Deadline, result: dict) -> None:
    """`cotcredit bench` at the plan's size on the regimes with shipped checkpoints (hops needs
    the embedded model, which is not carried), one regime at a time, traces sampled on the
    device into a fresh cache; reports (figures) off. Wall seconds per regime and its headline
    figures from the leaderboard."""
    try:
        import math_verify  # noqa: F401  (grading)
        import pydantic  # noqa: F401  (the bench's variant options)
    except ImportError as e:
        result["status"] = f"skipped: {e.name} is not installed"
        result["notes"].append("needs math-verify and pydantic: carry their wheels (README)")
        return
    from cotcredit.bench.run import run_bench
    from cotcredit.bench.sizes import BenchSize

    ctx.release()
    plan = ctx.plan
    size = plan.bench_size
    if not isinstance(size, str):
        problems, samples, n = size
        size = BenchSize(problems=problems, samples=samples, rollouts=n, n_boot=50, splits=2)
    with tempfile.TemporaryDirectory(prefix="gpu_check_bench") as tmp:
        for regime in plan.bench_regimes:
            deadline.check()
            lines: list[str] = []
            m: dict = {}
            with measure(ctx.device, m):
                res = run_bench(regime, output=Path(tmp) / regime, size=size,
                                cache=str(Path(tmp) / "cache"), reports=False, log=lines.append)
            row = {"regime": regime, "seconds": m["seconds"], "peak_gib": m["extra_gib"],
                   "failures": res.failures, "log_lines": len(lines), "methods": {}}
            for r in res.leaderboard.to_dict(orient="records"):
                row["methods"][r["method"]] = {
                    k: (None if isinstance(r[k], float) and not math.isfinite(r[k]) else r[k])
                    for k in ("kind", "loc_top1", "mc_spearman", "seconds", "forward_tokens",
                              "generated_tokens")}
            result["rows"].append(row)
            ctx.checkpoint()
    result["notes"].append(f"size {plan.bench_size}; methods: the size's default and mc")
