"""cotcredit: credit assignment on chain-of-thought traces.

One function per command, with the command's behaviour (the CLI parses options, calls these,
and prints)::

    import cotcredit
    cotcredit.segment("traces.jsonl", "segments.parquet")
    cotcredit.redistribute("traces.jsonl", "rredcot.parquet", segments_file="segments.parquet")
    cotcredit.mc_baseline("traces.jsonl", "mc.parquet", segments_file="segments.parquet")
    cotcredit.attribute("traces.jsonl", "attr.parquet", methods=["loo"])
    cotcredit.compare(methods="rredcot,mc,loo")           # the tables in this folder
    cotcredit.export("rredcot.parquet", "prm.jsonl", traces="traces.jsonl")
    cotcredit.merge(["shard0.parquet", "shard1.parquet"], "all.parquet")
    cotcredit.generate("problems.jsonl", "traces.jsonl")
    cotcredit.train("config.yaml")

    # Inside any trainer: segment credit of generated completions, then per-token advantages.
    credit = cotcredit.OnlineRredcot(model, tokenizer)
    out = credit(prompt_ids, completion_ids, answers)      # spans + rewards per completion
    adv = cotcredit.token_advantages(advantages, [o.rewards for o in out],
                                     [o.spans for o in out], completion_mask)

Each is imported on first use: `import cotcredit` (and `cotcredit --help`) loads no torch,
transformers, pandas or report stack; the first call brings in what it needs.
"""

from cotcredit.version import __version__

_LAZY = {
    "segment": ("cotcredit.api", "segment"),
    "redistribute": ("cotcredit.api", "redistribute"),
    "mc_baseline": ("cotcredit.api", "mc_baseline"),
    "attribute": ("cotcredit.api", "attribute"),
    "compare": ("cotcredit.comparison", "compare"),
    "export": ("cotcredit.exports", "export"),
    "merge": ("cotcredit.shards", "merge_tables"),
    "generate": ("cotcredit.problems", "generate_traces"),
    "train": ("cotcredit.training.run", "train"),
    # Online scoring inside a trainer (see cotcredit.online).
    "OnlineRredcot": ("cotcredit.online", "OnlineRredcot"),
    "CompletionCredit": ("cotcredit.online", "CompletionCredit"),
    "CompletionError": ("cotcredit.online", "CompletionError"),
    "token_advantages": ("cotcredit.online", "token_advantages"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'cotcredit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
