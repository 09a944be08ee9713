"""The `cotcredit` command line: it parses options and calls the public API (`main`: the
console-script entry point)."""

from cotcredit.cli.commands import app, main

__all__ = ["app", "main"]
