"""Numbers as kvscope writes them for a reader (the CLI's tables, the page's templates; static/js/format.js is the
browser's twin): each rounded once, from the exact value, half to even as Python's format() rounds."""

from __future__ import annotations

DASH = "–"  # a value not known


def ms_text(value: float | None) -> str:
    """Milliseconds to one decimal: ``1234.56`` -> ``1,234.6``; ``39.4496`` -> ``39.4`` (never ``39.45`` first)."""
    return DASH if value is None else f"{value:,.1f}"


def times_text(value: float | None) -> str:
    """A speed-up: ``11.747`` -> ``11.7x``; below 2, two decimals show a few percent (``0.966`` -> ``0.97x``)."""
    if value is None:
        return DASH
    return f"{value:.2f}x" if value < 2 else f"{value:.1f}x"
