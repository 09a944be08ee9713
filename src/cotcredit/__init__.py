"""cotcredit: credit assignment on chain-of-thought traces.

One function per command, with the command's behaviour (the CLI parses options, calls these,
and prints)::

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

Each is imported on first use: `import cotcredit` (and `cotcredit --help`) loads no torch,
transformers, pandas or report stack; the first call brings in what it needs.

The package's folders are its layers, each importing only those before it: `data` (reading
input, the `Trace` record), `store` (tables on disk), `lm` (the model and every forward pass),
`segmentation`, `methods` (one file per method), `pipeline` (the analysis path and this API),
`report`, `bench` (known-truth regimes), `training`, `cli`. Import paths of the flat layout
before 0.3 (`cotcredit.traces`, ...) still work until 0.4 (`cotcredit._aliases`).
"""

from cotcredit import _aliases
from cotcredit._lazy import lazy_index
from cotcredit.version import __version__

_aliases.install()  # old import paths (cotcredit.traces, ...) keep working for one release

_LAZY = {
    "segment": "cotcredit.pipeline.api",
    "redistribute": "cotcredit.pipeline.api",
    "mc_baseline": "cotcredit.pipeline.api",
    "attribute": "cotcredit.pipeline.api",
    "score": "cotcredit.pipeline.api",
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

__all__ = ["__version__", *_LAZY]
_lazy_getattr, __dir__ = lazy_index(__name__, _LAZY)


def __getattr__(name: str):
    if f"{__name__}.{name}" in _aliases.ALIASES:  # `cotcredit.tables` without importing it
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    return _lazy_getattr(name)
