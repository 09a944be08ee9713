"""The study of credit that tracks value below Monte Carlo's price (PROTOCOL.md).

    python -m studies.value_cost.run_study dev multipath            # every dev grid of a regime
    python -m studies.value_cost.run_study dev multipath --parts allocation,head
    python -m studies.value_cost.run_study choose                   # chosen.json (dev only)
    python -m studies.value_cost.run_study test multipath           # every configuration, test
    python -m studies.value_cost.run_study report                   # frontier, comparisons, figures

Reads the bench's version-2 run (BENCH, read only); writes result rows to OUT/<regime>/<split>/
(`common` says what a result row is) and the tracked summaries to this folder. One process at
a time, one thread (`OMP_NUM_THREADS=1 nice -n 10`).
"""

from __future__ import annotations

import argparse
import json
import time

import pandas as pd

from .common import HERE, REGIMES, load_split, read_results, write_results

PARTS = ("reference", "allocation", "horizon", "head")
CAPS = {"quarter": 0.25, "tenth": 0.10}
#: The approaches a configuration is chosen for, by the prefix of its name.
APPROACHES = {"allocation": "auto-", "horizon": "horizon-", "head": "head-mc-"}
CONTROL = "head-outcome-"  # the cheap control: its best configuration on dev, no cap


def run_parts(regime: str, split: str, parts: list[str], configs: dict | None = None) -> None:
    """Compute the result rows of `parts` on one split (`configs`: part -> config names to run,
    default every one)."""
    from . import allocation, live

    s = load_split(regime, split)
    traces = len(s.mc_order)
    for part in parts:
        t0 = time.perf_counter()
        wanted = (configs or {}).get(part)
        if part == "reference":
            out = allocation.reference_curve(s)
        elif part == "allocation":
            grid = allocation.grid()
            out = allocation.allocation_results(
                s, [g for g in grid if wanted is None or g[0] in wanted])
        elif part == "horizon":
            grid = live.horizon_grid()
            out = live.horizon_results(s, traces, [g for g in grid if wanted is None
                                                   or g[0] in wanted])
        elif part == "head":
            out = live.head_results(s)
        else:
            raise SystemExit(f"unknown part {part!r} (known: {', '.join(PARTS)})")
        write_results(out, regime, split, part)
        print(f"{regime} {split} {part}: {out['config'].nunique()} configurations, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)


def summary(frame: pd.DataFrame, traces: set[str] | None = None) -> pd.DataFrame:
    """Per configuration: mean tokens (forward + generated) and rates, on `traces`."""
    if traces is not None:
        frame = frame[frame["trace_id"].isin(traces)]
    g = frame.groupby("config")
    out = g[["forward", "generated", "loc", "dep", "ws"]].mean()
    out["tokens"] = out["forward"] + out["generated"]
    out["traces"] = g.size()
    return out


def choose() -> dict:
    """Per regime, approach and cap: the configuration with the highest dev localization among
    those whose mean tokens per trace are under the cap (ties to the cheaper); the outcome head
    by dev localization alone. Written to chosen.json."""
    chosen: dict = {}
    for regime in REGIMES:
        ref = read_results(regime, "dev", "reference")
        if ref is None:
            continue
        pool = set(ref["trace_id"])
        mc16 = summary(ref, pool).loc["mc-16", "tokens"]
        parts = [read_results(regime, "dev", p) for p in ("allocation", "horizon", "head")]
        every = pd.concat([p for p in parts if p is not None], ignore_index=True)
        table = pd.concat([summary(every[~every["config"].str.startswith("head-")], pool),
                           summary(every[every["config"].str.startswith("head-")])])
        entry = {"mc16_tokens": float(mc16), "choices": {}}
        for approach, prefix in APPROACHES.items():
            mine = table[table.index.str.startswith(prefix)]
            for cap, share in CAPS.items():
                under = mine[mine["tokens"] <= share * mc16]
                if under.empty:
                    entry["choices"][f"{approach}/{cap}"] = None
                    continue
                best = under.sort_values(["loc", "tokens"], ascending=[False, True]).iloc[0]
                entry["choices"][f"{approach}/{cap}"] = {
                    "config": best.name, "dev_loc": float(best["loc"]),
                    "dev_tokens": float(best["tokens"])}
        control = table[table.index.str.startswith(CONTROL)]
        if len(control):
            best = control.sort_values(["loc", "tokens"], ascending=[False, True]).iloc[0]
            entry["choices"]["control"] = {"config": best.name, "dev_loc": float(best["loc"]),
                                           "dev_tokens": float(best["tokens"])}
        chosen[regime] = entry
    (HERE / "chosen.json").write_text(json.dumps(chosen, indent=1) + "\n")
    return chosen


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=("dev", "test", "choose", "report"))
    ap.add_argument("regimes", nargs="*", default=list(REGIMES))
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--configs", default=None,
                    help="JSON file: part -> config names to run (default: every one)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.step == "choose":
        print(json.dumps(choose(), indent=1))
        return
    if args.step == "report":
        from .report import write_report

        write_report(args.regimes)
        return
    configs = json.loads(open(args.configs).read()) if args.configs else None
    for regime in args.regimes:
        run_parts(regime, args.step, [p for p in args.parts.split(",") if p], configs)


if __name__ == "__main__":
    main()
