"""cotcredit: credit assignment on chain-of-thought traces.

The Python API mirrors the command line::

    import cotcredit
    seg = cotcredit.segment("traces.jsonl", "segments.parquet", segments=8)
    rr = cotcredit.redistribute("traces.jsonl", "rredcot.parquet")
"""

__version__ = "0.1.0"

from cotcredit.api import redistribute, segment  # noqa: E402

__all__ = ["__version__", "segment", "redistribute"]
