"""Does RREDCoT train better than GRPO? Five advantage arms on the model organism, several seeds.

    python -m studies.organism_train.run_study        # or: make train-study
    python -m studies.organism_train.run_study --seeds 0 --steps 4 --out runs/probe  # a probe

Every run is `cotcredit train` on studies/organism_train/config.yaml (the organism's
model-early checkpoint: a 0.8M-parameter Llama solving chains of additions, one step per line,
that answers when "The answer is " is forced mid-chain, which is what RREDCoT's probes do),
with only the output folder, the seed, the step count and the arm's advantage options
changed. The protocol is fixed here, before any result was seen:

- Arms (the same config, seeds and data order; only the advantage differs):
  ``grpo`` (plain outcome advantage); ``rredcot`` (today's defaults: strength 3, floor 0,
  weights from the scorer's rewards, whose last absorbs the terminal correction ζ − g_K);
  ``rredcot-nocorr`` (``terminal_in_weights: false``: weights from g_k − g_{k−1} alone);
  ``rredcot-floor0.5`` (the milder setting, chosen before any run: every segment token keeps
  half the plain advantage); ``shuffled`` (the control: rredcot's rewards permuted within each
  completion before weighting, seeded: the weights' spread without their placement). If rredcot
  beats grpo but not shuffled, the credit is not what helps.
  A sixth arm, ``rredcot-vhat`` (g from R̂ + v̂ over the remaining reference steps), was added
  after the five had run and after the organism localization study showed R̂ carrying no
  signal on this organism and v̂ carrying it; it is exploratory, reported apart.
  A seventh arm, ``rredcot-vhat-lines`` (R̂ + v̂ as rredcot-vhat, on one segment per reasoning
  line, ``segments: lines``, instead of 8 hybrid segments), was added on 2026-12-02, after
  rredcot-vhat was seen to equal grpo and after the segmentation study found v̂'s localization
  and its tracking of Monte Carlo hold only on step segments; exploratory, reported apart, run
  at the study's size with nothing else changed. Stated before it ran: if v̂'s credit helps
  training here, this arm beats grpo and shuffled; if it equals them, placing credit on the
  right step does not change what GRPO learns at this size.
- Size: seeds 0–4 per arm, 300 steps of 2 prompts × 8 completions (temperature 1), learning rate
  1e-4 (fixed before any run). Checked on development data before the study ran (grpo,
  seed 0, 300-step runs evaluated on 100 dev problems every 100 steps, stopped once clear):
  1e-3 collapsed (train reward 0.55 -> 0.05 within 75 steps), 3e-4 fell from 0.55 to 0.41 dev
  accuracy by step 100, 1e-4 rose to 0.63; 1e-4 was kept. Nothing else was tried.
  Runs go seed by seed, all arms of a seed before the next, so an interrupted study stays
  balanced; rerunning resumes (a finished run is skipped, a started one
  continues from its last checkpoint, saved at every evaluation).
- Held-out: the first --eval-problems (100) problems of studies/organism/problems/test.jsonl
  (disjoint from train.jsonl by prompt), 4 samples per problem at temperature 1, every
  --eval-every (50) steps and at the end (eval_curve.jsonl); greedy accuracy of the final
  checkpoint and of the starting model on the same problems (greedy.json). Nothing is tuned on
  them; the dev split is not used.
- Summary (in --out): summary.csv/.md/.tex, one row per arm: final sampled and greedy accuracy,
  area under the held-out curve (trapezoids over steps, divided by the steps: a mean accuracy),
  each a mean with a 95% t-interval over seeds; paired differences (same seed) against grpo and
  against shuffled; seconds per step and per scored step (RREDCoT scoring) against grpo; the
  fraction of completions scored and the spread of the token weights; curves.png/.pdf (train
  reward and held-out accuracy, band over seeds); weights.csv: for a sample of held-out
  completions of each rredcot arm's final checkpoint (seed 0), the weight of each segment next
  to the checker's first-error step (cotcredit.bench.organism.checker), and weights.md: how often a
  wrong completion's largest penalty share lands on the segment holding its first wrong step.
- Amendment 2 (2026-12-02, written before it ran; weights only, no training): does the terminal
  correction mask where v̂ puts the penalty? rredcot-vhat-lines' heaviest penalty never landed
  on the first wrong step at its final checkpoint (0/18), mostly on the last segment, which
  takes in ζ − g_K. ``--weights-at-start`` also weighs, on the same completions of the
  starting model, two variants that are never trained (WEIGHT_VARIANTS): rredcot-vhat and
  rredcot-vhat-lines with ``terminal_in_weights: false``. Measure: wrong completions whose
  heaviest penalty lands on the first wrong step, against chance, each variant paired with its
  trained twin on the same completions (exact McNemar-style count of completions where only one
  hits). Prediction: if the correction masks v̂, the ``-nocorr`` twins hit far more often
  (towards v̂'s top-1 localization on steps, 0.69 on this checkpoint); if not, both stay near
  chance. Either way the training arms are not rerun here.
  Found when it ran (recorded after): the weights analysis had passed no reference solution, so
  for the v̂ arms it weighed with R̂ alone (v̂'s fallback); training passed it. With the
  solution, rredcot-vhat-lines hits 20/24 at the starting model and so does its -nocorr twin
  (0 discordant): the correction masks nothing, and the 0/18 above was R̂'s. The two v̂ arms'
  seed-0 runs were retrained (every held-out evaluation and greedy accuracy identical to the
  study's runs) to weigh their final checkpoints again: 13/18 on lines, 3/16 on 8 segments.

Tracked here (the rest is regenerated): config.yaml, summary.md/.csv, runs.csv (one row per
run), greedy_start.json, weights_start.md, curves.png and run_facts.json (figures of the runs
that no table holds: `python -m studies.organism_train.run_facts`). The runs (runs/, with
metrics.jsonl and eval completions), configs/, summary.tex, curves.pdf, weights.csv and
weights_start.csv are written by `make train-study`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from cotcredit.training.metrics import read_metrics
from studies.organism.problems import problem_file
from studies.seed_runs import (
    format_interval,
    mean_interval,
    plot_seed_curves,
    run_finished,
    seed_run_summary,
)

HERE = Path(__file__).resolve().parent
# Arm -> (advantage, rredcot options over the config's). Fixed before any run.
ARMS: dict[str, tuple[str, dict]] = {
    "grpo": ("grpo", {}),
    "rredcot": ("rredcot", {}),
    "rredcot-nocorr": ("rredcot", {"terminal_in_weights": False}),
    "rredcot-floor0.5": ("rredcot", {"floor": 0.5}),
    "shuffled": ("rredcot", {"shuffle": True}),
    # Added after the organism localization study (not after any training result): there R̂
    # carried no signal and R̂ + v̂ (remaining steps) localized as well as Monte Carlo. The
    # same config with g from R̂ + v̂; exploratory, not one of the five fixed in advance.
    "rredcot-vhat": ("rredcot", {"value": "both"}),
    # Added 2026-12-02 after the segmentation study (v̂ needs step segments) and after
    # rredcot-vhat's result; exploratory.
    "rredcot-vhat-lines": ("rredcot", {"value": "both", "segments": "lines"}),
}
# Amendment 2: weighed at the starting model only (`--weights-at-start`), never trained.
WEIGHT_VARIANTS: dict[str, tuple[str, dict]] = {
    "rredcot-vhat-nocorr": ("rredcot", {"value": "both", "terminal_in_weights": False}),
    "rredcot-vhat-lines-nocorr": ("rredcot", {"value": "both", "segments": "lines",
                                              "terminal_in_weights": False}),
}


def base_model(base: Path, cfg: dict, args) -> Path:
    """The starting checkpoint: --model, else the config's `model` (relative to the config)."""
    return Path(args.model) if args.model else base.parent / cfg["model"]


def run_config(base: Path, arm: str, seed: int, out: Path, args) -> Path:
    """`base` with its paths valid from `out/configs` (a config's paths are relative to the
    config file), the arm's advantage and the study's sizes."""
    cfg = yaml.safe_load(base.read_text())
    folder = out / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    cfg["train_file"] = os.path.relpath((base.parent / cfg["train_file"]).resolve(), folder)
    cfg["eval_file"] = os.path.relpath(out / "eval_problems.jsonl", folder)
    cfg["output_dir"] = os.path.relpath(out / "runs" / f"{arm}-seed{seed}", folder)
    cfg["model"] = os.path.relpath(base_model(base, cfg, args).resolve(), folder)
    cfg["seed"] = seed
    advantage, options = ARMS[arm]
    cfg["advantage"] = advantage
    cfg["rredcot"] = {**cfg.get("rredcot", {}), **options}
    every = args.eval_every if 0 < args.eval_every < args.steps else None
    cfg["eval"] = {**cfg.get("eval", {}), "every": every, "samples": args.samples}
    group = cfg["grpo"]["num_generations"]
    # Checkpoints at every evaluation, the last one kept: to resume, and for the greedy eval.
    save = every or args.steps
    cfg["grpo"] = {**cfg["grpo"], "per_device_train_batch_size": group * args.prompts_per_step,
                   "max_steps": args.steps, "save_steps": save, "save_total_limit": 1}
    path = folder / f"{arm}-seed{seed}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return path



def _load(model_dir: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return AutoModelForCausalLM.from_pretrained(model_dir).eval(), tokenizer


def _prompts(tokenizer, problems, chat: bool) -> list[list[int]]:
    from cotcredit.training.run import prompt_field, prompt_ids

    return [prompt_ids(tokenizer, prompt_field(p.prompt, chat, None, tokenizer)) for p in problems]


def greedy_accuracy(model_dir: Path, problems, *, chat: bool, max_new_tokens: int) -> dict:
    """Greedy accuracy of the model in `model_dir` on `problems` (graded as in training)."""
    import torch

    from cotcredit.data.grading import grade_completion
    from cotcredit.lm import HFGenerator, SamplingOptions

    model, tokenizer = _load(model_dir)
    options = SamplingOptions(n=1, temperature=0.0, max_new_tokens=max_new_tokens).validate()
    with torch.no_grad():
        outputs = HFGenerator(model, tokenizer).generate(_prompts(tokenizer, problems, chat),
                                                         options)
    right = sum(bool(grade_completion(c[0].text, p.answer).correct)
                for p, c in zip(problems, outputs))
    return {"accuracy": right / len(problems), "correct": right, "problems": len(problems)}


def last_checkpoint(run: Path) -> Path | None:
    found = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    return found[-1] if found else None


def area_under_curve(run: Path) -> float:
    """Mean held-out accuracy over training: trapezoids of eval_curve.jsonl over its steps."""
    import numpy as np

    path = run / "eval_curve.jsonl"
    rows = read_metrics(path) if path.is_file() else []
    if len(rows) < 2:
        return math.nan
    steps = np.array([r["step"] for r in rows], float)
    acc = np.array([r["accuracy"] for r in rows], float)
    return float(np.trapezoid(acc, steps) / (steps[-1] - steps[0]))


def per_run_table(runs: dict[str, list[Path]]):
    """One row per run: seed, final sampled and greedy accuracy, area under the curve, scored
    seconds per step (steps where something was scored)."""
    import numpy as np
    import pandas as pd

    rows = []
    for arm, dirs in runs.items():
        for d in dirs:
            e = json.loads((d / "eval.json").read_text()) if (d / "eval.json").is_file() else {}
            g = json.loads((d / "greedy.json").read_text()) if (d / "greedy.json").is_file() else {}
            metrics = read_metrics(d / "metrics.jsonl") if (d / "metrics.jsonl").is_file() else []
            scored = [r["rredcot_seconds"] for r in metrics if r.get("rredcot_seconds")]
            rows.append({
                "arm": arm, "seed": int(d.name.rsplit("seed", 1)[-1]),
                "final": (e.get("after") or {}).get("accuracy", math.nan),
                "greedy": (g.get("after") or {}).get("accuracy", math.nan),
                "auc": area_under_curve(d),
                "scored_step_seconds": float(np.median(scored)) if scored else math.nan,
            })
    return pd.DataFrame(rows)


def paired(table, arm: str, base: str, key: str) -> tuple[float, float, float]:
    a = table[table.arm == arm].set_index("seed")[key]
    b = table[table.arm == base].set_index("seed")[key]
    shared = a.index.intersection(b.index)
    return mean_interval((a[shared] - b[shared]).tolist())


def study_summary(runs: dict[str, list[Path]], *, steps: int, window: int):
    """seed_run_summary's table per arm, plus greedy, area under the curve and the paired
    differences against grpo and shuffled for final, greedy and area."""
    import numpy as np

    table = seed_run_summary(runs, window=window, baseline="grpo").rename(columns={"mode": "arm"})
    per_run = per_run_table(runs)
    for key in ("greedy", "auc"):
        for i, arm in enumerate(table.arm):
            mean, low, high = mean_interval(per_run[per_run.arm == arm][key].tolist())
            table.loc[i, [key, f"{key}_low", f"{key}_high"]] = [mean, low, high]
    for base in ("grpo", "shuffled"):
        for key in ("final", "greedy", "auc"):
            for i, arm in enumerate(table.arm):
                vals = paired(per_run, arm, base, key) if base in runs else (math.nan,) * 3
                table.loc[i, [f"{key}_vs_{base}", f"{key}_vs_{base}_low",
                              f"{key}_vs_{base}_high"]] = list(vals)
    for i, arm in enumerate(table.arm):
        v = per_run[per_run.arm == arm]["scored_step_seconds"].dropna()
        table.loc[i, "scored_step_seconds"] = float(v.mean()) if len(v) else np.nan
    return table, per_run



def comparison_markdown(table) -> str:
    ci = format_interval
    head = ("| arm | seeds | final (sampled) | gain over start | greedy | area under curve | "
            "final − grpo | "
            "area − grpo | final − shuffled | area − shuffled | scored | weight spread | "
            "s / step | × grpo | scoring s / scored step |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for _, r in table.iterrows():
        lines.append(
            f"| {r['arm']} | {r['seeds']} | {ci(r, 'eval_after')} | {ci(r, 'eval_gain')} | "
            f"{ci(r, 'greedy')} | "
            f"{ci(r, 'auc')} | {ci(r, 'final_vs_grpo')} | {ci(r, 'auc_vs_grpo')} | "
            f"{ci(r, 'final_vs_shuffled')} | {ci(r, 'auc_vs_shuffled')} | "
            f"{r['scored_fraction']:.2f} | {r['weight_std']:.3f} | {r['step_seconds']:.1f} | "
            f"{r['seconds_ratio']:.2f} | "
            f"{r['scored_step_seconds']:.1f} |".replace("nan", "–")
        )
    return "\n".join(lines) + "\n"


def where_the_weight_goes(model_dir: Path, cfg: dict, problems, *, chat: bool, arm: str,
                          n: int = 40):
    """Per-segment weights of `n` sampled held-out completions of the model in `model_dir`,
    scored and weighted as the run config `cfg` says, next to the checker's first wrong step.
    Weight = a segment's per-token advantage over A (1 = plain GRPO), with A > 0 for a correct
    completion and A < 0 for a wrong one (then the weight is its share of the penalty)."""
    import torch

    from cotcredit.bench.organism.checker import check_response
    from cotcredit.bench.organism.task import parse_prompt
    from cotcredit.lm import HFGenerator, SamplingOptions
    from cotcredit.training.advantages import (
        completion_key,
        segment_token_advantages,
        shuffled_rewards,
    )
    from cotcredit.training.scoring import PolicySegmentRewards

    rr = cfg.get("rredcot") or {}
    model, tokenizer = _load(model_dir)
    fn = PolicySegmentRewards(model, tokenizer, segments=rr.get("segments", 8),
                              value=rr.get("value", "rhat"), exit_string=rr.get("exit_string"),
                              terminal_in_weights=rr.get("terminal_in_weights", True))
    sample = problems[:n]
    prompts = _prompts(tokenizer, sample, chat)
    options = SamplingOptions(n=1, temperature=1.0, max_new_tokens=96, seed=0).validate()
    rows = []
    with torch.no_grad():
        outputs = HFGenerator(model, tokenizer).generate(prompts, options)
        for p, p_ids, c in zip(sample, prompts, outputs):
            text = c[0].text
            c_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            check = check_response(parse_prompt(p.prompt), text)
            # The reference solution too: without it v̂ falls back to R̂ alone.
            result = fn(p_ids, c_ids, example={"prompt": p.prompt, "answer": p.answer,
                                               "solution": p.solution})
            if result is None:
                continue
            rewards, spans = result
            if rr.get("shuffle"):
                rewards = shuffled_rewards(rewards, cfg.get("seed", 0), completion_key(c_ids))
            sign = 1.0 if check.correct else -1.0
            a = segment_token_advantages(sign, rewards, spans, len(c_ids),
                                         strength=rr.get("strength", 3.0),
                                         floor=rr.get("floor", 0.0))
            offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            chars = offsets["offset_mapping"]
            for k, (s, e) in enumerate(spans):
                start = chars[s][0] if s < len(chars) else len(text)
                rows.append({
                    "arm": arm, "problem": p.id, "correct": check.correct, "segment": k,
                    "first_char": start, "line": text[:start].count("\n") + 1,
                    "weight": float(a[s] / sign) if e > s else math.nan,
                    "reward": rewards[k], "first_error_step": check.first_error_step,
                    "error_char": check.error_char,
                    "error_line": text[: check.error_char].count("\n") + 1
                    if check.error_char >= 0 else 0,
                })
    return rows


def heaviest_penalty_hits(rows) -> dict[str, tuple[bool, float]]:
    """Per wrong completion with a wrong step (problem id): whether its heaviest-penalised
    segment touches the first wrong step (the segment holding the wrong line's first character
    or one starting on that line: a line can span segments; its wrong result is at its end),
    and the chance of that for a random segment."""
    out = {}
    for problem, c in rows[(~rows.correct) & (rows.error_char >= 0)].groupby("problem"):
        c = c.dropna(subset=["weight"]).sort_values("first_char")
        if c.empty:
            continue
        holder = c[c.first_char <= c.error_char.iloc[0]]
        targets = set(c.segment[c.line == c.error_line.iloc[0]])
        targets.add(holder.segment.iloc[-1] if len(holder) else c.segment.iloc[0])
        out[problem] = (c.loc[c.weight.idxmax(), "segment"] in targets, len(targets) / len(c))
    return out


def weights_markdown(frame) -> str:
    """How often a wrong completion's heaviest-penalised segment touches its first wrong step
    (`heaviest_penalty_hits`). Chance: those segments / all."""
    lines = ["| arm | wrong completions with a wrong step | heaviest penalty on the first "
             "wrong step | chance | penalty weights, min–max (mean over completions) | "
             "correct: last segment's weight / others' |", "|---|---|---|---|---|---|"]
    frame = frame.assign(last=frame.groupby(["arm", "problem"]).segment.transform("max")
                         == frame.segment)
    for arm, rows in frame.groupby("arm"):
        wrong = rows[~rows.correct].groupby("problem").weight
        right = rows[rows.correct]
        hits = heaviest_penalty_hits(rows)
        total = len(hits)
        chance = sum(c for _, c in hits.values()) / total if total else math.nan
        lines.append(f"| {arm} | {total} | {sum(h for h, _ in hits.values())}/{total} | "
                     f"{chance:.2f} | "
                     f"{wrong.min().mean():.2f}–{wrong.max().mean():.2f} | "
                     f"{right[right['last']].weight.mean():.2f} / "
                     f"{right[~right['last']].weight.mean():.2f} |")
    return "\n".join(lines) + "\n"


def paired_hits_markdown(frame, pairs: list[tuple[str, str]]) -> str:
    """Amendment 2: each weights-only variant against its trained twin on the same wrong
    completions: hits of both, and the completions where only one hits, with the exact
    two-sided binomial p of those discordant counts (McNemar's exact test)."""
    from scipy.stats import binomtest

    lines = ["| variant | twin | completions | variant hits | twin hits | only variant | "
             "only twin | exact McNemar p |", "|---|---|---|---|---|---|---|---|"]
    for a, b in pairs:
        ha = heaviest_penalty_hits(frame[frame.arm == a])
        hb = heaviest_penalty_hits(frame[frame.arm == b])
        both = sorted(set(ha) & set(hb))
        only_a = sum(ha[p][0] and not hb[p][0] for p in both)
        only_b = sum(hb[p][0] and not ha[p][0] for p in both)
        pval = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
        lines.append(f"| {a} | {b} | {len(both)} | {sum(ha[p][0] for p in both)} | "
                     f"{sum(hb[p][0] for p in both)} | {only_a} | {only_b} | {pval:.3g} |")
    return "\n".join(lines) + "\n"


def weights_at_start(args, out: Path, held_out: Path) -> None:
    """Where the weight goes before any training: each rredcot arm's weights on completions of
    the starting model (seed 0), in weights_start.csv and weights_start.md."""
    import pandas as pd

    from cotcredit.data import load_problems

    problems = load_problems(held_out)
    base = yaml.safe_load(args.config.read_text())
    model = base_model(args.config, base, args)
    rows = []
    arms = {a: ARMS[a] for a in args.arms if ARMS[a][0] == "rredcot"} | WEIGHT_VARIANTS
    for arm, (_, options) in arms.items():
        cfg = {**base, "seed": 0, "rredcot": {**base.get("rredcot", {}), **options}}
        rows += where_the_weight_goes(model, cfg, problems,
                                      chat=bool(base.get("chat_template", True)),
                                      arm=arm, n=args.weights_sample)
    frame = pd.DataFrame(rows)
    frame.to_csv(out / "weights_start.csv", index=False)
    text = (f"Where the weight goes at the starting model ({model.name}), {args.weights_sample} "
            "held-out problems, one completion each (temperature 1, seed 0):\n\n"
            + weights_markdown(frame))
    pairs = [(v, v.removesuffix("-nocorr")) for v in WEIGHT_VARIANTS
             if v.removesuffix("-nocorr") in arms]
    if pairs:
        text += ("\nAmendment 2: the same completions weighed without the terminal correction "
                 "(never trained) against the trained arm's weights:\n\n"
                 + paired_hits_markdown(frame, pairs))
    (out / "weights_start.md").write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="study folder (default: this one)")
    ap.add_argument("--config", type=Path, default=HERE / "config.yaml")
    ap.add_argument("--model", default=None, help="model folder (default: the config's)")
    ap.add_argument("--eval-source", type=Path, default=None,
                    help="held-out problems (default: the organism's test split)")
    ap.add_argument("--eval-problems", type=int, default=100)
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    ap.add_argument("--prompts-per-step", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--samples", type=int, default=4, help="held-out samples per problem")
    ap.add_argument("--weights-sample", type=int, default=40,
                    help="held-out completions per rredcot arm in weights.csv (0: none)")
    ap.add_argument("--weights-at-start", action="store_true",
                    help="only weights_start.csv/.md: the weights of the starting model, no runs")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    held_out = out / "eval_problems.jsonl"
    if not held_out.is_file():
        source = args.eval_source or problem_file("test")
        lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
        held_out.write_text("".join(lines[: args.eval_problems]), encoding="utf-8")
    if args.weights_at_start:
        weights_at_start(args, out, held_out)
        return
    train_file = args.config.parent / yaml.safe_load(args.config.read_text())["train_file"]
    if not train_file.is_file():
        sys.exit(f"error: {train_file}: no such file; write it with `make organism-problems`")
    t_start = time.perf_counter()
    runs: dict[str, list[Path]] = {a: [] for a in args.arms}
    plan = [(seed, arm) for seed in args.seeds for arm in args.arms]
    for i, (seed, arm) in enumerate(plan, 1):
        run = out / "runs" / f"{arm}-seed{seed}"
        runs[arm].append(run)
        if run_finished(run, args.steps):
            print(f"[{i}/{len(plan)}] {arm} seed {seed}: done", flush=True)
            continue
        config = run_config(args.config, arm, seed, out, args)
        resume = any(run.glob("checkpoint-*/trainer_state.json"))
        cmd = ["train", str(config.relative_to(out)), "--resume" if resume else "--overwrite"]
        print(f"[{i}/{len(plan)}] {arm} seed {seed}: cotcredit {' '.join(cmd)}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "cotcredit", *cmd], cwd=out)
        if proc.returncode != 0:
            sys.exit(f"run {arm} seed {seed} failed (exit {proc.returncode}); rerun to resume")

    from cotcredit.data import load_problems

    base_cfg = yaml.safe_load(args.config.read_text())
    chat = bool(base_cfg.get("chat_template", True))
    problems = load_problems(held_out)
    max_new = int(base_cfg.get("eval", {}).get("max_new_tokens") or 96)
    start_model = base_model(args.config, base_cfg, args)
    start_greedy = out / "greedy_start.json"
    if not start_greedy.is_file():
        start_greedy.write_text(json.dumps(
            greedy_accuracy(start_model, problems, chat=chat, max_new_tokens=max_new), indent=1))
    before = json.loads(start_greedy.read_text())
    for dirs in runs.values():
        for run in dirs:
            target = run / "greedy.json"
            checkpoint = last_checkpoint(run)
            if not target.is_file() and checkpoint is not None:
                after = greedy_accuracy(checkpoint, problems, chat=chat, max_new_tokens=max_new)
                target.write_text(json.dumps(
                    {"before": before, "after": {**after, "checkpoint": checkpoint.name}},
                    indent=1))

    window = max(2, min(10, args.steps // 4))
    table, per_run = study_summary(runs, steps=args.steps, window=window)
    table.to_csv(out / "summary.csv", index=False)
    per_run.to_csv(out / "runs.csv", index=False)
    columns = {"arm": "arm", "seeds": "seeds", "eval_after": "final", "greedy": "greedy",
               "auc": "area", "final_vs_grpo": "final − grpo", "auc_vs_grpo": "area − grpo",
               "final_vs_shuffled": "final − shuffled", "scored_fraction": "scored",
               "weight_std": "weight spread", "step_seconds": "s/step"}
    table[list(columns)].rename(columns=columns).to_latex(
        out / "summary.tex", index=False, float_format="%.3f")
    text = (comparison_markdown(table) + f"\n{args.steps} steps, {len(args.seeds)} seeds, "
            f"{len(problems)} held-out problems × {args.samples} samples (temperature 1); "
            "greedy: the final checkpoint; area: mean held-out accuracy over training; "
            "differences are paired by seed, 95% t-intervals over seeds; s / step: median "
            "step; scoring s / scored step: median RREDCoT scoring seconds of the steps that "
            "scored.\n")
    print(plot_seed_curves(runs, out / "curves.png", window=window,
                           title=f"Advantage arms on the organism, {len(args.seeds)} seeds"))
    if args.weights_sample:
        import pandas as pd

        rows = []
        for arm in [a for a in args.arms if ARMS[a][0] == "rredcot"]:
            run = runs[arm][0]
            if last_checkpoint(run) is not None and (run / "config.yaml").is_file():
                cfg = yaml.safe_load((run / "config.yaml").read_text())
                rows += where_the_weight_goes(last_checkpoint(run), cfg, problems, chat=chat,
                                              arm=arm, n=args.weights_sample)
        done = {r["arm"] for r in rows}
        if (out / "weights.csv").is_file():
            # Arms whose checkpoints are gone (runs keep them only while they are needed)
            # keep the rows they were measured with; an arm measured again replaces its own.
            kept = pd.read_csv(out / "weights.csv")
            rows = kept[~kept.arm.isin(done)].to_dict("records") + rows
        if rows:
            frame = pd.DataFrame(rows)
            frame.to_csv(out / "weights.csv", index=False)
            text += ("\nWhere the weight goes (seed 0, final checkpoint):\n\n"
                     + weights_markdown(frame))
    (out / "summary.md").write_text(text)
    print(text)
    from studies.organism_train import run_facts  # here: run_facts imports this module

    run_facts.main(["--out", str(out)])
    print(f"study finished in {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
