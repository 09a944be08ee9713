"""The package version (read by pyproject.toml too: one place to change it)."""

__version__ = "0.2.0"
