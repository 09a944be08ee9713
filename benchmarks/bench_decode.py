"""Chunked decoding: finished rows leave the batch, against one `generate` call that keeps them.

    python benchmarks/bench_decode.py                    # embedded SmolLM2-135M, CPU
    python benchmarks/bench_decode.py --model Qwen/Qwen3-0.6B --rows 64 --max-new-tokens 512

The same rollouts (one prompt, `--rows` samples at `--temperature`) are decoded with the default
chunk (`sampling._DECODE_CHUNK`) and with a chunk longer than `--max-new-tokens` (the behaviour
before chunking: a finished row decodes padding until the longest row ends), alternating,
`--repeats` times each. Prints the median seconds of each, their ratio, the completions' length
spread (what chunking can save) and whether both gave identical completions (they must).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPT = ("Liam's friend is Grace. Grace's friend is Frank. Frank's friend is Liam. Start at "
          "Liam and follow the friend link three times. Whose fruit is it, and what does it "
          "cost? Think line by line.\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model [default: the embedded SmolLM2-135M]")
    ap.add_argument("--rows", type=int, default=32, help="samples decoded in one batch")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args(argv)

    from cotcredit.lm import ModelOptions, load_scorer, sampling

    scorer = load_scorer(ModelOptions(model=args.model, device=args.device))
    gen = sampling.HFGenerator(scorer.model, scorer.tokenizer)
    prompt = scorer.tokenizer(PROMPT)["input_ids"]
    opts = sampling.SamplingOptions(n=args.rows, temperature=args.temperature,
                                    max_new_tokens=args.max_new_tokens, seed=0,
                                    batch_size=args.rows)
    chunk = sampling._DECODE_CHUNK
    seconds: dict[str, list[float]] = {"chunked": [], "whole": []}
    outputs: dict[str, list] = {}
    for _ in range(args.repeats):
        for name, size in (("chunked", chunk), ("whole", args.max_new_tokens + 1)):
            sampling._DECODE_CHUNK = size
            t0 = time.perf_counter()
            out = gen.generate([prompt], opts)[0]
            seconds[name].append(time.perf_counter() - t0)
            outputs[name] = [c.token_ids for c in out]
    sampling._DECODE_CHUNK = chunk
    lengths = [len(t) for t in outputs["whole"]]
    used = sum(min(n + 1, args.max_new_tokens) for n in lengths)
    med = {k: statistics.median(v) for k, v in seconds.items()}
    print(f"{args.rows} rows, lengths {min(lengths)}-{max(lengths)} (mean "
          f"{statistics.mean(lengths):.0f}); rows x steps needed {used} of "
          f"{args.rows * (max(lengths) + 1)} decoded without chunks")
    print(f"median seconds: chunked ({chunk} tokens) {med['chunked']:.2f}, whole "
          f"{med['whole']:.2f}; whole / chunked = {med['whole'] / med['chunked']:.2f}x")
    print("identical completions:", outputs["chunked"] == outputs["whole"])


if __name__ == "__main__":
    main()
