"""The trace arguments shared by ``kvscope replay`` and ``kvscope curve``: loading a trace, its block size and format."""

from __future__ import annotations

import click

from sim.traces.reader import FORMAT_BLOCK_TOKENS, TRACE_FORMATS, Trace, TraceError, TraceFormat, open_trace


def load(trace: str, block_size: int | None, fmt: TraceFormat | None = None) -> Trace:
    """The trace named on the command line; a bad file exits 2 naming its line."""
    try:
        return open_trace(trace, block_size, fmt=fmt)
    except TraceError as exc:
        raise click.UsageError(f"{trace}: {exc}") from None


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
