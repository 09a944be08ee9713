"""The `cotcredit` command line: it parses options and calls the public API (`main`: the
console-script entry point)."""

from cotcredit.cli.bench import add_bench_command
from cotcredit.cli.commands import app, main

# `bench` prints with the commands' consoles, so it is added here rather than by them.
add_bench_command(app)

__all__ = ["app", "main"]
