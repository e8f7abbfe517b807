"""The ``kvscope`` executable: the click group, with an error nobody foresaw shown as one line instead of a traceback.

Every foreseen bad input has its own message and exit status 2 (usage) where it
is checked; this is the net below them. ``KVSCOPE_TRACEBACK=1`` shows the
traceback, for a bug report.
"""

from __future__ import annotations

import os
import sys

import click

from app.cli import main

TRACEBACK_VAR = "KVSCOPE_TRACEBACK"


def run() -> None:
    try:
        main(standalone_mode=True)  # click prints its own errors and exits 2 for usage, 1 for ClickException
    except Exception as exc:  # noqa: BLE001 - the net: anything click did not handle
        unforeseen(exc)


def unforeseen(exc: Exception) -> None:
    """Report an error nobody foresaw in one line and exit 1 (re-raise it with ``KVSCOPE_TRACEBACK`` set)."""
    if os.environ.get(TRACEBACK_VAR):
        raise exc
    what = "out of memory" if isinstance(exc, MemoryError) else f"{type(exc).__name__}: {exc}"
    click.echo(f"Error: {what} ({TRACEBACK_VAR}=1 shows where; please report it)", err=True)
    sys.exit(1)
