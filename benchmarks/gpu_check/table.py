"""The table of a report: printed (rich when installed) and as Markdown."""

from __future__ import annotations

import math
import os


def fmt(x, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x == 0 or not math.isfinite(x):
            return str(x)
        return f"{x:.{digits}g}" if abs(x) < 100 else f"{x:.0f}"
    return str(x)


def gib(x) -> str:
    return "-" if x is None else f"{x:.2f} GiB"


def table_rows(report: dict) -> list[tuple[str, str, str, str, str]]:
    """(part, model, setting, figures, status) for every row of every part."""
    out = []
    for part, res in report["parts"].items():
        status = res["status"]
        for r in res["rows"]:
            if part == "agreement":
                setting = f"{r['quantity']}, {r['tokens']} tok, K={r['segments']}"
                figs = f"fp32 Δ {fmt(r['fp32_packed_vs_naive'])} (tol {fmt(r['fp32_tolerance'])})"
                if "bf16_packed_vs_fp32" in r:
                    figs += (f"; bf16 Δ vs naive {fmt(r['bf16_packed_vs_naive'])}, vs fp32 packed "
                             f"{fmt(r['bf16_packed_vs_fp32'])} / naive "
                             f"{fmt(r['bf16_naive_vs_fp32'])} (tol {fmt(r['bf16_tolerance'])})")
                figs += f"; spread {fmt(r['spread'])}"
                ok = r["fp32_ok"] and r.get("bf16_ok", True)
                out.append((part, r["model"], setting, figs, "ok" if ok else "FAIL"))
            elif part == "speed":
                setting = f"{r['tokens']} tok, K={r['segments']}"
                figs = (f"plain {fmt(r['plain_s'])} s; R̂ {fmt(r['rhat_x_plain'])}x, "
                        f"R̂+v̂ {fmt(r['both_x_plain'])}x, 4 refs "
                        f"{fmt(r.get('multi_x_plain'))}x plain; naive R̂ "
                        f"{fmt(r['naive_x_packed'])}x slower; segmentation "
                        f"{fmt(r['rhat_segment_s'])} s; peak plain {gib(r['plain_peak_gib'])}, "
                        f"R̂+v̂ {gib(r['both_peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
            elif part == "generation":
                setting = f"batch {r['batch']}, {r['prompt_tokens']}+{r['max_new_tokens']} tok"
                figs = (f"{fmt(r['completions_per_s'])} completions/s, "
                        f"{fmt(r['tokens_per_s'])} tokens/s; peak {gib(r['peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
            elif part == "mc":
                setting = (f"{r['rows']} rollouts, batch {r['batch']}, "
                           f"{r['prompt_tokens']}+{r['max_new_tokens']} tok")
                figs = (f"mc {fmt(r['mc_tokens_per_s'])} tokens/s "
                        f"({fmt(r['mc_rollouts_per_s'])} rollouts/s), plain generate "
                        f"{fmt(r['plain_tokens_per_s'])}: plain/mc {fmt(r['plain_over_mc'])}; "
                        f"same across repeats {'yes' if r['mc_identical_across_repeats'] else 'NO'}"
                        f", same at half batch {fmt(r['same_at_half_batch'])}; "
                        f"peak {gib(r['mc_peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
            elif part == "bench":
                per = "; ".join(
                    f"{k} {fmt(v['seconds'])} s/trace" + (f" loc {fmt(v['loc_top1'], 2)}"
                                                    if v.get("loc_top1") is not None else "")
                    for k, v in r["methods"].items() if v.get("seconds") is not None)
                figs = (f"{fmt(r['seconds'])} s in all; {per}"
                        + (f"; FAILED {r['failures']}" if r["failures"] else ""))
                out.append((part, r["regime"], "quick" if not meta_small(report) else "small",
                            figs, status))
            elif part == "train":
                setting = f"{r['mode']}, {r['completions']} x {r['max_completion_length']} tok"
                if r.get("form"):
                    setting = f"{r['mode']} / {r['form']}, {r['completions']} x " \
                              f"{r['max_completion_length']} tok"
                figs = (f"step {fmt(r.get('step_time'))} s (train() {fmt(r['train_s'])} s); "
                        f"scoring {fmt(r.get('rredcot/scoring_seconds'))} s; "
                        f"peak {gib(r['peak_gib'])}")
                out.append((part, r["model"], setting, figs, status))
        if not res["rows"]:
            out.append((part, "-", "-", "; ".join(res["notes"])[:200] or "-", status))
    return out


def meta_small(report: dict) -> bool:
    return bool(report.get("meta", {}).get("small"))


def print_table(report: dict) -> None:
    meta = report["meta"]
    title = (f"cotcredit gpu_check — {meta['device_name']} ({meta['device']}), torch "
             f"{meta['torch']}, transformers {meta['transformers']}, {meta['date']}")
    rows = table_rows(report)
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        widths = [max(len(r[i]) for r in rows + [("part", "model", "setting", "", "status")])
                  for i in range(5)]
        for r in [("part", "model", "setting", "figures", "status"), *rows]:
            print("  ".join(c.ljust(w) if i != 3 else c for i, (c, w) in
                            enumerate(zip(r, widths, strict=True))))
        return
    table = Table(title=title, show_lines=False)
    for col in ("part", "model", "setting", "figures", "status"):
        table.add_column(col, overflow="fold")
    last = None
    for r in rows:
        if last is not None and r[0] != last:
            table.add_section()
        table.add_row(*r)
        last = r[0]
    Console(width=max(120, int(os.environ.get("COLUMNS", 0) or 0))).print(table)


def markdown_table(report: dict) -> str:
    """The printed table as Markdown, under a line naming device, versions and date."""
    meta = report["meta"]
    lines = [
        f"{meta['device_name']} ({meta['device']}), torch {meta['torch']}, transformers "
        f"{meta['transformers']}, {meta['date'][:10]}: `python benchmarks/gpu_check "
        f"{' '.join(meta['argv'])}`",
        "",
        "| part | model | setting | figures | status |",
        "|---|---|---|---|---|",
    ]
    for row in table_rows(report):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(lines) + "\n"
