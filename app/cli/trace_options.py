"""The trace arguments shared by ``kvscope replay`` and ``kvscope curve``: loading a trace, its block size and format."""

from __future__ import annotations

import click

from sim.traces.reader import FORMAT_BLOCK_TOKENS, TRACE_FORMATS, Trace, TraceError, TraceFormat, open_trace


def load(trace: str, block_size: int | None, fmt: TraceFormat | None = None) -> Trace:
    """The trace named on the command line; a bad file exits 2 naming its line."""
    try:
        return open_trace(trace, block_size, fmt=fmt)
    except TraceError as exc:
        if _measurements(trace):
            raise click.UsageError(
                f"{trace}: a measurement file (per-request TTFTs), not a trace: replay reads Mooncake or Bailian JSONL "
                f"traces; kvscope analyze {trace} reads measurement files") from None
        raise click.UsageError(f"{trace}: {exc}") from None


def _measurements(name: str) -> bool:
    """The file opens as a measurement file does: a CSV header with its required columns, or JSON with them."""
    try:
        with open(name, encoding="utf-8", errors="replace") as f:
            head = f.readline(4096)
    except OSError:
        return False
    names = {c.strip().strip('"') for c in head.split(",")}
    from sim.calibration.measurements import REQUIRED  # only for a file that failed as a trace

    return set(REQUIRED) <= names or (head.lstrip().startswith("{") and all(f'"{c}"' in head for c in REQUIRED))


def block_size_option() -> click.Option:
    defaults = ", ".join(f"{block} for {fmt}" for fmt, block in FORMAT_BLOCK_TOKENS.items())
    return click.option(
        "--block-size", type=click.IntRange(1, 65_536), default=None,
        help=f"tokens per hash id in the trace (one GPU block each); default: the format's ({defaults})",
    )


def format_option() -> click.Option:
    return click.option(
        "--format", "fmt", type=click.Choice(TRACE_FORMATS), default=None,
        help="the trace's format; default: told from its first request (Bailian's chat_id, parent_chat_id, turn, type)",
    )
