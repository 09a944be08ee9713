"""Choosing v̂: the candidates of PROTOCOL.md on the development traces, then held-out.

    python -m studies.vhat_selection.run_selection dev        # model runs on the 24 dev traces
    python -m studies.vhat_selection.run_selection select     # figures on dev, the decision
    python -m studies.vhat_selection.run_selection held-out   # model runs on the 24 held-out
    python -m studies.vhat_selection.run_selection report     # results.md from every table

The protocol (split, metric, candidates, decision rule) is PROTOCOL.md, written and committed
before the first run. Every model run is a `cotcredit redistribute` command as a user types it,
with the Monte Carlo study's options (its segmentation, exit string "The answer is ", no chat
template), run in this folder; each resumes what it finished. The metric is computed here with
scipy/pandas from the tables: per trace, Spearman between value differences g_k − g_(k−1) and
MC's credit; mean over traces; paired differences against R̂ alone with a percentile bootstrap
interval over traces.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

HERE = Path(__file__).resolve().parent
STUDY = HERE.parent / "mc_study"
EXIT = "The answer is "
BOOTSTRAP, SEED = 10_000, 0

# Model runs: name -> extra redistribute options (PROTOCOL.md's table; λ variants are derived).
RUNS = {
    "rhat": ["--value", "rhat"],
    "whole": ["--value", "both", "--solution-part", "whole"],
    "whole-norm": ["--value", "both", "--solution-part", "whole", "--length-norm"],
    "remaining": ["--value", "both", "--solution-part", "remaining"],
    "remaining-norm": ["--value", "both", "--solution-part", "remaining", "--length-norm"],
}
# Candidates: name -> (model run it is computed from, λ, terms). "both": exp(R̂) + λ·exp(v̂).
CANDIDATES = {
    "whole": ("whole", 1.0, "both"),
    "whole-norm": ("whole-norm", 1.0, "both"),
    "remaining": ("remaining", 1.0, "both"),
    "remaining-norm": ("remaining-norm", 1.0, "both"),
    "remaining-norm-0.3": ("remaining-norm", 0.3, "both"),
    "remaining-norm-0.1": ("remaining-norm", 0.1, "both"),
}
DIAGNOSTICS = {  # v̂ alone: not candidates for the default
    "v̂ alone, remaining": ("remaining", 1.0, "vhat"),
    "v̂ alone, remaining-norm": ("remaining-norm", 1.0, "vhat"),
}
SPLITS = {"dev": "development", "held-out": "held-out"}


def split_traces(split: str) -> Path:
    """The split's traces as a JSONL file in this folder (from the study's traces.jsonl)."""
    ids = set(pd.read_csv(HERE / "split.csv").query("split == @SPLITS[@split]").trace_id)
    out = HERE / f"traces_{split}.jsonl"
    lines = [ln for ln in (STUDY / "traces.jsonl").read_text().splitlines(keepends=True)
             if json.loads(ln)["id"] in ids]
    assert len(lines) == len(ids) == 24, (split, len(lines))
    out.write_text("".join(lines))
    return out


def run_models(split: str, names: list[str], extra: dict[str, list[str]] | None = None) -> None:
    traces = split_traces(split).name
    todo = {n: RUNS[n] for n in names} | (extra or {})
    for name, opts in todo.items():
        argv = ["redistribute", traces, "-o", f"runs/{split}/{name}.parquet",
                "--segments-file", "../mc_study/segments.parquet", "--exit-string", EXIT,
                "--no-chat-template", "--on-error", "skip", "--label", f"rredcot-{name}", *opts]
        print(f"== {split} {name}: cotcredit {shlex.join(argv)}", flush=True)
        if subprocess.run([sys.executable, "-m", "cotcredit", *argv], cwd=HERE).returncode:
            sys.exit(f"stopped at {split} {name}; rerun to resume")


def values(split: str, run: str, lam: float = 1.0, terms: str = "table") -> pd.DataFrame:
    """Per segment: the value difference g_k − g_(k−1) of a run, or recomputed from its R̂ and
    v̂ columns with weight λ (terms "both" or "vhat"), in probability space."""
    df = pd.read_parquet(HERE / "runs" / split / f"{run}.parquet")
    df = df.sort_values(["trace_id", "segment"])
    if terms == "table":
        diff = df.g_after - df.g_before
    else:
        def g(r, v):
            return (np.exp(r) if terms == "both" else 0.0) + lam * np.exp(v)
        diff = g(df.r_hat, df.v_hat) - g(df.r_hat_before, df.v_hat_before)
    return pd.DataFrame({"trace_id": df.trace_id, "segment": df.segment, "value": diff})


def mc_credit() -> pd.DataFrame:
    mc = pd.read_parquet(STUDY / "mc.parquet")
    return mc[["trace_id", "segment", "score"]].rename(columns={"score": "mc"})


def position_outcome(split: str) -> pd.DataFrame:
    """Text-free baseline: leave-one-trace-out mean MC credit at the same segment position
    among the split's traces with the same outcome."""
    sp = pd.read_csv(HERE / "split.csv").query("split == @SPLITS[@split]")
    m = mc_credit().merge(sp[["trace_id", "correct"]], on="trace_id")
    grp = m.groupby(["correct", "segment"]).mc
    total, count = grp.transform("sum"), grp.transform("count")
    m["value"] = (total - m.mc) / (count - 1)
    return m[["trace_id", "segment", "value"]]


def per_trace_spearman(v: pd.DataFrame) -> pd.Series:
    """Spearman(value differences, MC credit) per trace; NaN where either side is constant."""
    m = v.merge(mc_credit(), on=["trace_id", "segment"])

    def rho(t: pd.DataFrame) -> float:
        if t.value.nunique() < 2 or t.mc.nunique() < 2:
            return float("nan")
        return float(stats.spearmanr(t.value, t.mc).statistic)

    return m.groupby("trace_id")[["value", "mc"]].apply(rho)


def mean_ci(x: np.ndarray) -> tuple[float, float, float]:
    """Mean and 95% percentile bootstrap interval over traces."""
    res = stats.bootstrap((x,), np.mean, n_resamples=BOOTSTRAP, method="percentile",
                          random_state=np.random.default_rng(SEED))
    return float(x.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high)


def figures(split: str, variants: dict[str, pd.DataFrame], reference: pd.DataFrame) -> pd.DataFrame:
    """Per variant: mean Spearman, and its paired difference against the reference (R̂ alone),
    over the traces where both are defined; also against the text-free baseline."""
    ref = per_trace_spearman(reference)
    base = per_trace_spearman(position_outcome(split))
    rows = []
    for name, v in variants.items():
        r = per_trace_spearman(v)
        both = pd.concat([r, ref, base], axis=1, keys=["v", "ref", "base"]).dropna()
        m, lo, hi = mean_ci(both.v.to_numpy())
        d, dlo, dhi = (mean_ci((both.v - both.ref).to_numpy()) if name != "R̂ alone"
                       else (0.0, 0.0, 0.0))
        b, blo, bhi = mean_ci((both.v - both.base).to_numpy()) if "no text" not in name else (
            0.0, 0.0, 0.0)
        rows.append({"split": split, "variant": name, "traces": len(both), "spearman": m,
                     "lo": lo, "hi": hi, "diff_vs_rhat": d, "diff_lo": dlo, "diff_hi": dhi,
                     "diff_vs_notext": b, "notext_lo": blo, "notext_hi": bhi})
    return pd.DataFrame(rows)


def early_late(variants: dict[str, pd.DataFrame]) -> str:
    """Supplementary, added after the decision: pooled Spearman with MC on the first and the
    second half of the segments (does a variant see early errors, as v̂ is meant to?)."""
    lines = ["| variant | early (segments 0–1) | late (segments 2–3) |", "|---|---|---|"]
    for name, v in variants.items():
        m = v.merge(mc_credit(), on=["trace_id", "segment"])
        early = m[m.segment < 2]
        late = m[m.segment >= 2]
        lines.append(f"| {name} | {stats.spearmanr(early.value, early.mc).statistic:.3f} | "
                     f"{stats.spearmanr(late.value, late.mc).statistic:.3f} |")
    return "\n".join(lines)


def all_variants(split: str) -> dict[str, pd.DataFrame]:
    out = {"R̂ alone": values(split, "rhat")}
    for name, (run, lam, terms) in (CANDIDATES | DIAGNOSTICS).items():
        if (HERE / "runs" / split / f"{run}.parquet").exists():
            out[name] = values(split, run, lam, terms)
    out["position × outcome (no text)"] = position_outcome(split)
    if (HERE / "runs" / split / "chosen.parquet").exists():
        out["chosen, run as such"] = values(split, "chosen")
    return out


def decide(dev: pd.DataFrame) -> dict:
    cands = dev[dev.variant.isin(CANDIDATES)]
    best = cands.sort_values("diff_vs_rhat", ascending=False).iloc[0]
    run, lam, _ = CANDIDATES[best.variant]
    return {"selected": best.variant, "run": run, "vhat_weight": lam,
            "dev_diff": [best.diff_vs_rhat, best.diff_lo, best.diff_hi],
            "default": best.variant if best.diff_lo > 0 else "R̂ alone"}


def fmt(df: pd.DataFrame) -> str:
    lines = ["| variant | traces | mean Spearman with MC [95% CI] | − R̂ alone, paired [95% CI] "
             "| − position × outcome, paired [95% CI] |", "|---|---|---|---|---|"]
    for r in df.itertuples():
        diff = "–" if r.variant == "R̂ alone" else (
            f"{r.diff_vs_rhat:+.3f} [{r.diff_lo:+.3f}, {r.diff_hi:+.3f}]")
        notext = "–" if "no text" in r.variant else (
            f"{r.diff_vs_notext:+.3f} [{r.notext_lo:+.3f}, {r.notext_hi:+.3f}]")
        lines.append(f"| {r.variant} | {r.traces} | {r.spearman:.3f} [{r.lo:.3f}, {r.hi:.3f}] "
                     f"| {diff} | {notext} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("phase", choices=["dev", "select", "held-out", "report"])
    phase = ap.parse_args().phase
    for table in ("traces.jsonl", "segments.parquet", "mc.parquet"):  # the study's, regenerated
        if not (STUDY / table).exists():
            sys.exit(f"error: {STUDY / table}: not found; run the Monte Carlo study first "
                     "(make study)")
    if phase == "dev":
        run_models("dev", list(RUNS))
    elif phase == "select":
        dev = figures("dev", all_variants("dev"), values("dev", "rhat"))
        dev.to_csv(HERE / "figures_dev.csv", index=False)
        decision = decide(dev)
        (HERE / "decision.json").write_text(json.dumps(decision, indent=1) + "\n")
        print(fmt(dev))
        print(json.dumps(decision, indent=1))
    elif phase == "held-out":
        d = json.loads((HERE / "decision.json").read_text())
        opts = RUNS[d["run"]] + ["--vhat-weight", str(d["vhat_weight"])]
        run_models("held-out", list(RUNS), {"chosen": opts})
    else:
        d = json.loads((HERE / "decision.json").read_text())
        parts = []
        for split in SPLITS:
            variants = all_variants(split)
            f = figures(split, variants, values(split, "rhat"))
            f.to_csv(HERE / f"figures_{split.replace('-', '')}.csv", index=False)
            parts.append(f"## {SPLITS[split]} traces\n\n{fmt(f)}\n\n"
                         "Supplementary (added after the decision, not part of the protocol): "
                         "pooled Spearman of value differences with MC credit by position.\n\n"
                         f"{early_late(variants)}\n")
        (HERE / "results.md").write_text(
            "# Choosing v̂: figures (`run_selection.py report`)\n\n"
            f"Selected on development traces: **{d['selected']}** (paired difference "
            f"{d['dev_diff'][0]:+.3f} [{d['dev_diff'][1]:+.3f}, {d['dev_diff'][2]:+.3f}]); "
            f"default under the protocol's rule: **{d['default']}**.\n\n" + "\n".join(parts))
        print((HERE / "results.md").read_text())


if __name__ == "__main__":
    main()
