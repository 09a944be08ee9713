"""Where each credit source puts a wrong completion's blame, at the starting checkpoint.

    python -m studies.training.agreement            # writes agreement.md / agreement.csv

Completions: 2 samples (temperature 1, seed 0) of each of the first 150 problems of the
regime's dev split, from the regime's checkpoint (the policy every training run starts from).
Each source of the study scores them exactly as in training (one segment per reasoning line,
R̂ + v̂, 4 Monte Carlo rollouts). For every wrong completion whose checker locates a first wrong
step after the first line (the oracle then has something to spare), the table reports how
often the source's lowest segment reward falls on the first wrong line (`hits`; chance = 1 /
the number of lines), and the mean reward the source gives the lines before it and the first
wrong line (the oracle: 0 and −1). Descriptive only; it explains the training table, it is not
a test of it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> None:
    import pandas as pd
    import torch

    from cotcredit.bench.regimes import checkpoint
    from cotcredit.data import load_problems
    from cotcredit.lm.generation import SamplingOptions
    from cotcredit.lm.sampling import HFGenerator
    from cotcredit.training.config import TrainConfig
    from cotcredit.training.credit import credit_source, regime_check
    from cotcredit.training.run import build_dataset, load_policy, prompt_ids
    from studies.training.run_study import MAX_TOKENS, base_config, problem_files

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--regime", default="unique")
    ap.add_argument("--problems", type=int, default=150)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    files = problem_files(args.regime, HERE / "data")
    problems = load_problems(files["dev"])[: args.problems]
    cfg = TrainConfig.model_validate({**base_config(), "model": checkpoint(args.regime),
                                      "train_file": files["dev"], "output_dir": HERE / "tmp",
                                      "oracle": {"regime": args.regime}})
    model, tokenizer, _ = load_policy(cfg)
    model.eval()
    rows = build_dataset(problems, True, None, tokenizer).to_list()
    prompts = [prompt_ids(tokenizer, r["prompt"]) for r in rows]
    options = SamplingOptions(n=2, temperature=1.0, seed=0, max_new_tokens=MAX_TOKENS[args.regime])
    with torch.no_grad():
        outputs = HFGenerator(model, tokenizer).generate(prompts, options)
    batch = [(p, c.token_ids + [tokenizer.eos_token_id], r, c.text)
             for p, cs, r in zip(prompts, outputs, rows, strict=True) for c in cs]
    check = regime_check(args.regime, problems)
    labels = [check(r, text) for _, _, r, text in batch]
    outcomes = [1.0 if lab.correct else 0.0 for lab in labels]
    oracle = credit_source(cfg.model_copy(update={"advantage": "oracle"}), model, tokenizer,
                           problems)
    found = oracle.score_batch([b[0] for b in batch], [b[1] for b in batch],
                               [b[2] for b in batch], outcomes)
    # Wrong completions with a located first wrong step after the first line.
    targets = {i: r[0].index(-1.0) for i, r in enumerate(found)
               if r is not None and r[0].index(-1.0) > 0}
    out = []
    for source in ("oracle", "rredcot", "mc"):
        fn = oracle if source == "oracle" else credit_source(
            cfg.model_copy(update={"advantage": source}), model, tokenizer, problems,
            max_new_tokens=MAX_TOKENS[args.regime])
        chosen = [batch[i] for i in targets]
        with torch.no_grad():
            scored = fn.score_batch([b[0] for b in chosen], [b[1] for b in chosen],
                                    [b[2] for b in chosen], [0.0] * len(chosen))
        for (i, line), result in zip(targets.items(), scored, strict=True):
            if result is None:
                continue
            rewards = result[0]
            k = min(line, len(rewards) - 1)  # the oracle's lines include the answer line
            out.append({"source": source, "completion": i, "lines": len(rewards),
                        "first_wrong_line": line, "hit": int(min(range(len(rewards)),
                                                                 key=rewards.__getitem__) == k),
                        "chance": 1 / len(rewards),
                        "before": sum(rewards[:k]) / k, "at_line": rewards[k]})
    frame = pd.DataFrame(out)
    frame.to_csv(HERE / "agreement.csv", index=False)
    lines = [f"Blame on {len(targets)} wrong completions of the {args.regime} checkpoint whose "
             f"first wrong step is after line 1 ({len(batch)} sampled, "
             f"{sum(outcomes):.0f} correct):", "",
             "| source | completions | lowest reward on the first wrong line | chance | "
             "mean reward, lines before it | mean reward, first wrong line |",
             "|---|---|---|---|---|---|"]
    for source, t in frame.groupby("source", sort=False):
        lines.append(f"| {source} | {len(t)} | {t.hit.sum()}/{len(t)} ({t.hit.mean():.2f}) | "
                     f"{t.chance.mean():.2f} | {t.before.mean():+.3f} | {t.at_line.mean():+.3f} |")
    text = "\n".join(lines) + "\n"
    (HERE / "agreement.md").write_text(text)
    print(text)
    if math.isnan(frame.hit.mean()):
        raise SystemExit("no completion to score")


if __name__ == "__main__":
    main()
