"""The study's report: the frontier (every configuration's tokens per trace, localization and false
blame on the test split, `mc-n` as the reference curve), the primary comparisons of the
configurations chosen on dev (PROTOCOL.md), whether each meets the goal, and one figure per
regime.

Writes frontier.csv.gz (every row), frontier.md, comparisons.csv|md, dev_summary.csv.gz and
frontier_<regime>.png here. The two long tables are gzipped (deterministic: no timestamp in the
header) to keep the tracked tree small; pandas reads them as they are.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from .common import (
    HERE,
    evaluate,
    load_split,
    problem_bootstrap,
    read_results,
    string_baselines,
)
from .run_study import CAPS, PARTS, summary

MARGIN = 0.05
#: The false-blame set of (b) per regime (PROTOCOL.md: multipath and forecast).
BLAME = {"multipath": "dep", "forecast": "ws"}
#: Which string baselines a configuration reads no less than (the rest read no reference).
READS = {"paths": ("refdiff-solutions",), "rredcot": ("refdiff", "refdiff-solutions",
                                                        "refdiff-siblings")}
STRINGS = ("refdiff", "refdiff-solutions", "refdiff-siblings")
SHOWN_N = (4, 8, 16, 32)
#: The long tables gzipped with no timestamp, so a rerun on the same results writes the same bytes.
GZIP = {"method": "gzip", "mtime": 0}


def results(regime: str, split: str) -> pd.DataFrame | None:
    parts = [read_results(regime, split, p) for p in ("reference", "allocation", "horizon",
                                                       "head")]
    parts = [p for p in parts if p is not None]
    return pd.concat(parts, ignore_index=True) if parts else None


def baselines(regime: str, split: str) -> pd.DataFrame:
    """Result rows of the string comparisons (no tokens) and of entropy (the segmentation's
    forward pass)."""
    s = load_split(regime, split, pool=False)
    parts = []
    for name, credits in string_baselines(s).items():
        parts.append(evaluate(s, name, credits, dict.fromkeys(credits, (0.0, 0.0))))
    seg = s.segments
    entropy = {str(t): (-g["mean_entropy"]).tolist() for t, g in seg.groupby("trace_id",
                                                                                sort=False)}
    passes = seg.groupby("trace_id")["cost_forward_tokens"].first()
    parts.append(evaluate(s, "entropy", entropy, {t: (float(passes[t]), 0.0) for t in entropy}))
    return pd.concat(parts, ignore_index=True)


def wide(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    return frame.pivot(index="trace_id", columns="config", values=metric)


def equal_tokens_n(table: pd.DataFrame, tokens: float) -> str | None:
    """The smallest mc-n whose mean tokens per trace are at least `tokens`."""
    curve = table[table.index.str.fullmatch(r"mc-\d+")]
    above = curve[curve["tokens"] >= tokens]
    if above.empty:
        return None
    return above.assign(n=[int(i[3:]) for i in above.index]).sort_values("n").index[0]


def strongest_string(dev: pd.DataFrame | None, eligible: tuple[str, ...]) -> str | None:
    """The eligible string baseline with the highest dev localization."""
    if not eligible:
        return None
    if dev is None:
        return eligible[-1]
    rates = dev[dev["config"].isin(eligible)].groupby("config")["loc"].mean()
    return str(rates.idxmax()) if len(rates) else eligible[-1]


def comparisons(regime: str, test: pd.DataFrame, table: pd.DataFrame, chosen: dict,
                dev_base: pd.DataFrame | None) -> list[dict]:
    """The primary comparisons (a)-(d) of each chosen configuration, paired, by problem."""
    loc, problems = wide(test, "loc"), test.groupby("trace_id")["problem"].first()
    blame_metric = BLAME.get(regime)
    blame = wide(test, blame_metric) if blame_metric else None
    mc16 = table.loc["mc-16", "tokens"]
    rows = []
    for key, choice in chosen.get("choices", {}).items():
        if not choice or choice["config"] not in table.index:
            continue
        c = choice["config"]
        diffs = {"a": loc[c] - loc["mc-16"]}
        if blame is not None:
            diffs["b"] = blame[c] - blame["mc-16"]
        eq = equal_tokens_n(table, table.loc[c, "tokens"])
        if eq is not None:
            diffs["c"] = loc[c] - loc[eq]
        prior = c.rsplit("-", 1)[-1] if c.startswith("auto-") else ""
        string = strongest_string(dev_base, READS.get(prior, ()))
        if string is not None:
            diffs["d"] = loc[c] - loc[string]
        ci = problem_bootstrap(pd.DataFrame(diffs), problems.reindex(loc.index))
        share = table.loc[c, "tokens"] / mc16
        row = {"regime": regime, "choice": key, "config": c, "tokens": table.loc[c, "tokens"],
               "share_of_mc16": share, "loc": table.loc[c, "loc"],
               "equal_tokens": eq, "string_baseline": string}
        for k in diffs:
            row.update({f"{k}": ci.loc[k, "value"], f"{k}_low": ci.loc[k, "low"],
                        f"{k}_high": ci.loc[k, "high"], f"{k}_n": ci.loc[k, "n"]})
        row["meets_goal"] = bool(share <= CAPS["quarter"] and row["a_low"] > -MARGIN and (
            "b" not in diffs or row["b_high"] < MARGIN))
        rows.append(row)
    return rows


def reference_meets(regime: str, test: pd.DataFrame, table: pd.DataFrame) -> dict:
    """Whether some mc-n under a quarter of mc-16's tokens meets the goal (the 1/10 bar)."""
    loc, problems = wide(test, "loc"), test.groupby("trace_id")["problem"].first()
    blame_metric = BLAME.get(regime)
    mc16 = table.loc["mc-16", "tokens"]
    best = {"meets": False, "n": None}
    for n in range(1, 16):
        name = f"mc-{n}"
        if name not in table.index or table.loc[name, "tokens"] > CAPS["quarter"] * mc16:
            continue
        diffs = {"a": loc[name] - loc["mc-16"]}
        if blame_metric:
            b = wide(test, blame_metric)
            diffs["b"] = b[name] - b["mc-16"]
        ci = problem_bootstrap(pd.DataFrame(diffs), problems.reindex(loc.index))
        ok = ci.loc["a", "low"] > -MARGIN and ("b" not in diffs or ci.loc["b", "high"] < MARGIN)
        best = {"meets": bool(ok) or best["meets"], "n": n if ok else best["n"],
                "largest_n_under_cap": n, "a": ci.loc["a", "value"], "a_low": ci.loc["a", "low"],
                "a_high": ci.loc["a", "high"]}
    return best


def figure(regime: str, table: pd.DataFrame, chosen: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("loc", "localization (top-1)")]
    if regime in BLAME:
        panels.append((BLAME[regime], "false blame: " + ("valid departures" if BLAME[regime] ==
                                                           "dep" else "wrong steps survived")))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    groups = {"allocation": ("auto-", "tab:blue"), "horizon": ("horizon-", "tab:orange"),
              "value head (mc)": ("head-mc-", "tab:green"),
              "value head (outcome)": ("head-outcome-", "tab:olive")}
    curve = table[table.index.str.fullmatch(r"mc-\d+")].copy()
    curve["n"] = [int(i[3:]) for i in curve.index]
    curve = curve.sort_values("n")
    picked = {c["config"] for c in chosen.get("choices", {}).values() if c}
    mc16 = table.loc["mc-16", "tokens"]
    for ax, (metric, label) in zip(axes[0], panels, strict=True):
        for name, (prefix, color) in groups.items():
            mine = table[table.index.str.startswith(prefix)]
            ax.scatter(mine["tokens"], mine[metric], s=10, alpha=0.35, color=color, label=name)
            sel = mine[mine.index.isin(picked)]
            ax.scatter(sel["tokens"], sel[metric], s=60, facecolors="none", edgecolors=color,
                       linewidths=1.5)
        ax.plot(curve["tokens"], curve[metric], "k.-", label="mc-n (reference)")
        for name, r in curve[curve["n"].isin(SHOWN_N)].iterrows():
            ax.annotate(name, (r["tokens"], r[metric]), fontsize=8,
                        textcoords="offset points", xytext=(3, -9))
        for name, style in (("refdiff-solutions", "-."), ("refdiff-siblings", ":")):
            if name in table.index and np.isfinite(table.loc[name, metric]):
                ax.axhline(table.loc[name, metric], color="tab:red", ls=style, lw=1,
                           label=f"{name} (reads the paths; no tokens)")
        for share in CAPS.values():
            ax.axvline(share * mc16, color="grey", ls=":", lw=1)
        if metric == "loc":
            ax.axhline(table.loc["mc-16", "loc"] - MARGIN, color="grey", ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("tokens per trace (forward + generated)")
        ax.set_ylabel(label)
    axes[0][0].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{regime}, held-out\ncircles = chosen on dev; dotted = 1/10 and 1/4 of "
                 "mc-16's tokens; dashed = mc-16 - 0.05", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80)  # the tracked tree is bounded
    plt.close(fig)


def _fmt(x, digits=3):
    return "–" if x is None or (isinstance(x, float) and not np.isfinite(x)) else \
        f"{x:.{digits}f}"


def write_report(regimes) -> None:
    chosen = json.loads((HERE / "chosen.json").read_text())
    frontier, comps, dev_rows, verdicts, dev_tables = [], [], [], {}, {}
    for regime in regimes:
        dev = results(regime, "dev")
        if dev is not None:
            dev_tables[regime] = summary(dev)
            dev_rows.append(dev_tables[regime].assign(regime=regime))
        test = results(regime, "test")
        if test is None:
            continue
        base = baselines(regime, "test")
        dev_base = baselines(regime, "dev") if dev is not None else None
        pool = set(test.loc[test["config"] == "mc-16", "trace_id"])
        every = pd.concat([test, base[base["trace_id"].isin(pool)]], ignore_index=True)
        table = summary(every)
        frontier.append(table.assign(regime=regime))
        mine = chosen.get(regime, {})
        comps += comparisons(regime, every, table, mine, dev_base)
        verdicts[regime] = reference_meets(regime, every, table)
        verdicts[regime]["parts_not_run"] = [p for p in PARTS
                                             if read_results(regime, "test", p) is None]
        figure(regime, table, mine, HERE / f"frontier_{regime}.png")
    if dev_rows:
        pd.concat(dev_rows).reset_index().to_csv(HERE / "dev_summary.csv.gz", index=False,
                                                    float_format="%.4g", compression=GZIP)
    if not frontier:
        return
    front = pd.concat(frontier).reset_index()
    front.to_csv(HERE / "frontier.csv.gz", index=False, float_format="%.4g", compression=GZIP)
    comp = pd.DataFrame(comps)
    comp.to_csv(HERE / "comparisons.csv", index=False, float_format="%.4g")
    (HERE / "verdicts.json").write_text(json.dumps(verdicts, indent=1, default=float) + "\n")
    (HERE / "frontier.md").write_text(markdown(front, comp, verdicts, dev_tables))


def horizon_table(t: pd.DataFrame) -> list[str]:
    """Localization (tokens) of each horizon by rollouts per boundary: where it saturates."""
    from .live import HORIZON_ROLLOUTS, HORIZONS, horizon_name

    if not t.index.str.startswith("horizon-").any():
        return []
    head = " | ".join(f"n = {r}" for r in HORIZON_ROLLOUTS)
    out = ["Truncated rollouts: localization (tokens per trace) by horizon and rollouts per "
           "boundary; mc-n for comparison.", "", f"| horizon | {head} |",
           "|---|" + "---|" * len(HORIZON_ROLLOUTS)]
    for kind, n in HORIZONS:
        cells = []
        for r in HORIZON_ROLLOUTS:
            name = horizon_name(kind, n, r)
            cells.append(f"{t.loc[name, 'loc']:.3f} ({t.loc[name, 'tokens']:,.0f})"
                         if name in t.index else "–")
        label = f"{n} tokens" if kind == "tokens" else f"{n} line{'s' * (n > 1)}"
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    cells = [f"{t.loc[f'mc-{r}', 'loc']:.3f} ({t.loc[f'mc-{r}', 'tokens']:,.0f})"
             for r in HORIZON_ROLLOUTS]
    out += ["| none (mc-n) | " + " | ".join(cells) + " |", ""]
    return out


def head_table(t: pd.DataFrame, dev: pd.DataFrame | None) -> list[str]:
    """Per fitting fraction (and the outcome head): the configuration best on dev and its
    held-out localization and tokens."""
    if dev is None or not t.index.str.startswith("head-").any():
        return []
    out = ["Value head: per fitting fraction, the configuration best on dev (layer, head, l2) "
           "and its held-out localization.", "",
           "| fitted on | configuration | dev localization | localization | tokens |",
           "|---|---|---|---|---|"]
    for label, prefix in (("5% of problems, mc-16", "head-mc-f05-"),
                          ("10%, mc-16", "head-mc-f10-"), ("25%, mc-16", "head-mc-f25-"),
                          ("outcomes of every other problem", "head-outcome-")):
        mine = dev[dev.index.str.startswith(prefix)]
        if mine.empty:
            continue
        best = mine.sort_values(["loc", "tokens"], ascending=[False, True]).index[0]
        if best in t.index:
            out.append(f"| {label} | {best} | {mine.loc[best, 'loc']:.3f} | "
                       f"{t.loc[best, 'loc']:.3f} | {t.loc[best, 'tokens']:,.0f} |")
    return out + [""]


def markdown(front: pd.DataFrame, comp: pd.DataFrame, verdicts: dict,
             dev_tables: dict | None = None) -> str:
    dev_tables = dev_tables or {}
    lines = ["# Value below Monte Carlo's price: the frontier (held-out)", "",
             "Tokens per trace = forward + generated, everything a source spends. Localization: "
             "top-1 on traces with a wrong step and a wrong answer; false blame: valid "
             "departures (dep) and wrong steps the answer survived (ws). Intervals: 95%, "
             "bootstrap over problems, paired on the same traces. Full table: frontier.csv.gz.", ""]
    for regime, t in front.groupby("regime", sort=False):
        t = t.set_index("config")
        mc16 = t.loc["mc-16", "tokens"]
        missing = verdicts.get(regime, {}).get("parts_not_run")
        lines += [f"## {regime}", ""] + ([
            f"**Partial:** the held-out {', '.join(missing)} runs have not finished; their "
            "rows and comparisons are absent.", ""] if missing else []) + [
            f"mc-16: {mc16:,.0f} tokens per trace; caps 1/4 = "
            f"{0.25 * mc16:,.0f}, 1/10 = {0.1 * mc16:,.0f}.", "",
                  "| row | tokens | share of mc-16 | localization | blame dep | blame ws | n |",
                  "|---|---|---|---|---|---|---|"]
        shown = [f"mc-{n}" for n in (1, 2, 3, 4, 8, 16, 32)] + [
            "entropy", "refdiff", "refdiff-solutions", "refdiff-siblings"]
        best = []
        for prefix in ("auto-", "horizon-", "head-mc-", "head-outcome-"):
            mine = t[t.index.str.startswith(prefix)]
            for share in (0.10, 0.25, None):
                under = mine if share is None else mine[mine["tokens"] <= share * mc16]
                if len(under):  # the cheapest of the best
                    best.append(under.sort_values(["loc", "tokens"],
                                                  ascending=[False, True]).index[0])
        for name in list(dict.fromkeys(shown + best)):
            if name not in t.index:
                continue
            r = t.loc[name]
            lines.append(f"| {name} | {r['tokens']:,.0f} | {r['tokens'] / mc16:.3f} | "
                         f"{_fmt(r['loc'])} | {_fmt(r['dep'])} | {_fmt(r['ws'])} | "
                         f"{int(r['traces'])} |")
        lines += ["", "(Best test localization of each approach at 1/10, 1/4 and any cost: "
                  "secondary, chosen after seeing test. The primary rows are below.)", ""]
        v = verdicts.get(regime, {})
        gap = (f" (localization − mc-16: {v['a']:+.3f} [{v['a_low']:+.3f}, {v['a_high']:+.3f}])"
               if "a_high" in v else "")
        lines += [f"Reference curve: the largest mc-n under 1/4 of mc-16's tokens is "
                  f"mc-{v.get('largest_n_under_cap')}{gap}; it meets the goal: "
                  f"{'yes' if v.get('meets') else 'no'}.", ""]
        mine = comp[comp["regime"] == regime] if len(comp) else comp
        if len(mine):
            lines += ["| chosen on dev | config | share | loc | (a) − mc-16 | (b) blame − mc-16 | "
                      "(c) − mc-n, equal tokens | (d) − string | meets |",
                      "|---|---|---|---|---|---|---|---|---|"]
            for _, r in mine.iterrows():
                def ci(k, r=r):
                    if not np.isfinite(r.get(f"{k}_low", np.nan)):
                        return "–"
                    return f"{r[k]:+.3f} [{r[f'{k}_low']:+.3f}, {r[f'{k}_high']:+.3f}]"
                eq = f" vs {r['equal_tokens']}" if isinstance(r.get("equal_tokens"), str) else ""
                st = f" vs {r['string_baseline']}" if isinstance(r.get("string_baseline"),
                                                                 str) else ""
                lines.append(f"| {r['choice']} | {r['config']} | {r['share_of_mc16']:.3f} | "
                             f"{r['loc']:.3f} | {ci('a')} | {ci('b')} | {ci('c')}{eq} | "
                             f"{ci('d')}{st} | {'yes' if r['meets_goal'] else 'no'} |")
            lines.append("")
        lines += horizon_table(t) + head_table(t, dev_tables.get(regime))
        lines += [f"![{regime}](frontier_{regime}.png)", ""]
    return "\n".join(lines)
