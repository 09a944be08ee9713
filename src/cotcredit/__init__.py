"""cotcredit: credit assignment on chain-of-thought traces.

The Python API mirrors the command line::

    import cotcredit
    seg = cotcredit.segment("traces.jsonl", "segments.parquet", segments=8)
    rr = cotcredit.redistribute("traces.jsonl", "rredcot.parquet")
    mc = cotcredit.mc_baseline("traces.jsonl", "mc.parquet", segments_file="segments.parquet")
    result = cotcredit.compare("traces.jsonl", "rredcot,mc,loo", "report/")
"""

__version__ = "0.1.0"

from cotcredit.api import attribute, mc_baseline, redistribute, score, segment  # noqa: E402

__all__ = ["__version__", "segment", "redistribute", "mc_baseline", "attribute", "score",
           "compare", "generate", "train"]


def __getattr__(name: str):
    # Imported on first use: compare pulls in matplotlib, train pulls in TRL.
    if name == "compare":
        from cotcredit.compare import compare

        return compare
    if name == "generate":
        from cotcredit.generate import generate_traces

        return generate_traces
    if name == "train":
        from cotcredit.train.run import train

        return train
    raise AttributeError(f"module 'cotcredit' has no attribute {name!r}")
