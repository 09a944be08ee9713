"""cotcredit: credit assignment on chain-of-thought traces.

The Python API mirrors the command line::

    import cotcredit
    seg = cotcredit.segment("traces.jsonl", "segments.parquet", segments=8)
    rr = cotcredit.redistribute("traces.jsonl", "rredcot.parquet")
    mc = cotcredit.mc_baseline("traces.jsonl", "mc.parquet", segments_file="segments.parquet")

`compare`, `generate` and `train` are modules of the same names (`cotcredit.compare.compare`,
`cotcredit.generate.generate_traces`, `cotcredit.train.run.train`).
"""

__version__ = "0.1.0"

from cotcredit.api import attribute, mc_baseline, redistribute, score, segment  # noqa: E402

__all__ = ["__version__", "segment", "redistribute", "mc_baseline", "attribute", "score"]
