"""Where the CLI and the server keep runs: ``--db PATH`` (or ``KVSCOPE_DB``), ``--keep-runs N``, ``--db-max-mb M``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from app.runs.store import ENV_DB, ENV_KEEP, ENV_MAX_MB, RunStore, StoreError, announce_pruning, default_path


def db_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The three options, for ``kvscope serve`` and ``kvscope runs``."""
    command = click.option(
        "--db-max-mb", type=click.IntRange(1, 1_048_576), default=None,
        help=f"refuse to grow the database past this many MiB (default 2,048; replaces ${ENV_MAX_MB})",
    )(command)
    command = click.option(
        "--keep-runs", type=click.IntRange(1, 10_000_000), default=None,
        help=f"keep only the newest N runs, pruning the oldest first (default: keep all; replaces ${ENV_KEEP})",
    )(command)
    return click.option(
        "--db", default=None, metavar="PATH",
        help=f"the runs database (default ${ENV_DB}, else $XDG_DATA_HOME/kvscope/runs.db; ':memory:' keeps nothing)",
    )(command)


def configure(db: str | None, keep_runs: int | None, db_max_mb: int | None) -> RunStore:
    """Name the choices in the environment (the server's app reads them there) and open the store once, so that a
    database that cannot be used stops the command with exit 2 naming it."""
    for name, value in ((ENV_DB, db), (ENV_KEEP, keep_runs), (ENV_MAX_MB, db_max_mb)):
        if value is not None:
            os.environ[name] = str(value)
    try:
        return announce_pruning(RunStore.from_env())
    except (StoreError, ValueError, OSError) as exc:  # OSError: e.g. a folder on the path that is a file
        raise click.BadParameter(str(exc), param_hint="--db" if db else f"${ENV_DB} ({default_path()})") from None
