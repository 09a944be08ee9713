"""cotcredit: credit assignment on chain-of-thought traces.

One function per command (a method command's is made from the method registry)::

    import cotcredit
    cotcredit.segment("traces.jsonl", "segments.parquet")
    cotcredit.redistribute("traces.jsonl", "rredcot.parquet", segments_file="segments.parquet")
    cotcredit.mc_baseline("traces.jsonl", "mc.parquet", segments_file="segments.parquet")
    cotcredit.attribute("traces.jsonl", "attr.parquet", methods=["loo"])
    cotcredit.score("traces.jsonl", "out.parquet", methods={"rredcot": None})  # any method
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

Each is imported on first use, so `import cotcredit` (and `cotcredit --help`) loads no torch or
pandas. The layers: docs/architecture.md.
"""

from cotcredit import _aliases
from cotcredit._lazy import lazy_index
from cotcredit.version import __version__ as __version__

_aliases.install()  # old import paths (cotcredit.traces, ...) keep working for one release

_LAZY = {
    "segment": "cotcredit.pipeline.api",
    "score": "cotcredit.pipeline.run",
    "compare": "cotcredit.report.compare",
    "export": "cotcredit.pipeline.export",
    "merge": "cotcredit.store.shards:merge_tables",
    "generate": "cotcredit.pipeline.generate:generate_traces",
    "train": "cotcredit.training.run",
    # Online scoring inside a trainer (see cotcredit.training.online).
    "OnlineRredcot": "cotcredit.training.online",
    "CompletionCredit": "cotcredit.training.online",
    "CompletionError": "cotcredit.training.online",
    "token_advantages": "cotcredit.training.advantages:batch_token_advantages",
}

# The method commands' functions (redistribute, mc_baseline, attribute, ...) are made from the
# registry: `pipeline.api.command_functions`.
_lazy_getattr, __dir__ = lazy_index(__name__, _LAZY, "cotcredit.pipeline.api:command_functions")


def __getattr__(name: str):
    import importlib

    if name == "__all__":  # with the functions of the method commands, which the registry makes
        made = importlib.import_module("cotcredit.pipeline.api").command_functions()
        return ["__version__", *_LAZY, *made]
    if f"{__name__}.{name}" in _aliases.ALIASES:  # `cotcredit.tables` without importing it
        return importlib.import_module(f"{__name__}.{name}")
    return _lazy_getattr(name)
