"""How numbers are written in the report's tables (Markdown, HTML, LaTeX and the terminal)."""

from __future__ import annotations

import math

#: What an empty cell shows.
EMPTY = "–"


def fmt(value: float | None, digits: int = 3) -> str:
    """A number with ``digits`` decimals, or ``EMPTY`` when missing or not finite; a value that
    rounds to zero is written 0.000, never -0.000."""
    if value is None or not math.isfinite(value):
        return EMPTY
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def fmt_ci(value: float, low: float, high: float) -> str:
    """``value [low, high]``; just the value when the interval is missing."""
    if math.isfinite(low) and math.isfinite(high):
        return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"
    return fmt(value)


def _significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, trailing zeros kept (9.00, 39.4, 1,234)."""
    if not math.isfinite(value):
        return EMPTY
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    return f"{value:,.{decimals}f}"


def fmt_seconds(value: float) -> str:
    """Seconds with three significant digits (0.0123, 1.23, 123, 1,234)."""
    return _significant(value)


def fmt_count(value: float) -> str:
    """A mean count (tokens) rounded to a whole number, thousands separated."""
    return f"{value:,.0f}" if math.isfinite(value) else EMPTY


def fmt_ratio(value: float) -> str:
    """A ratio with three significant digits (0.0500, 1.00, 24.3, 1,234)."""
    return _significant(value)
