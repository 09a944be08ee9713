"""The `cotcredit` command line: it parses options and calls the public API.

`commands` holds the Typer app and the commands (the method commands are made from the method
specs); `params` turns options dataclasses into command-line parameters. `main` is the
console-script entry point.
"""

from cotcredit.cli.commands import app, main

__all__ = ["app", "main"]
