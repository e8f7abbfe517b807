"""``--db`` and ``--no-save`` for the commands whose answer is kept as a run: simulate, replay, analyze, calibrate;
``--no-save`` alone, a no-op, for the others (explain, capacity, ...).

The answer is printed first and kept after: a database that cannot be written (read-only, a full disk, not a
database at all) gets a warning on stderr, never a lost answer or another exit code. The runs store (and
sqlite3) is imported only when a run is kept, so ``--no-save`` costs the command nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from app.runs.paths import ENV_DB, MEMORY, default_path

if TYPE_CHECKING:
    from app.runs.store import RunStore


def no_save_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--no-save``, passed to the command as ``no_save`` (``kvscope live`` has its own ``--db``: runs_db)."""
    return click.option("--no-save", is_flag=True, help="do not keep this run in the runs database")(command)


def keeps_nothing(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--no-save`` accepted by a command that keeps no run, so that one command line works for every command."""
    return click.option("--no-save", is_flag=True, expose_value=False,
                        help="accepted as by every command; this one keeps no run anyway")(command)


def save_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--db PATH`` and ``--no-save``, passed to the command as ``db`` and ``no_save``."""
    command = no_save_option(command)
    return click.option(
        "--db", default=None, metavar="PATH",
        help=f"the runs database to keep this run in (default ${ENV_DB}, else $XDG_DATA_HOME/kvscope/runs.db; "
        "':memory:' keeps nothing)",
    )(command)


def open_store(db: str | None, no_save: bool) -> RunStore | None:
    """The runs database to keep this run in, or None: ``--no-save``, ``:memory:``, or one that cannot be opened
    (a warning says why)."""
    if no_save or (db or default_path()) == MEMORY:  # ':memory:' keeps nothing past the process: nothing to say
        return None
    import sqlite3  # here, not at the top: see the module's docstring

    from app.runs.store import RunStore, StoreError, announce_pruning

    try:
        return announce_pruning(RunStore.from_env(db))
    except (StoreError, sqlite3.Error, OSError, ValueError) as exc:  # ValueError: a malformed KVSCOPE_* number
        not_kept(exc)
        return None


def not_kept(why: object) -> None:
    click.echo(f"warning: this run was not kept: {why}", err=True)


def say_kept(run_id: int) -> None:
    click.echo(f"kept as run {run_id} (kvscope runs show {run_id})", err=True)


def save_run(db: str | None, no_save: bool, save: Callable[[RunStore], int]) -> int | None:
    """Keep the run with ``save(store)`` and say so on stderr (``kept as run N``); the run's id, or None when not
    kept (``--no-save``, or the database refused it: then a warning says why)."""
    store = open_store(db, no_save)
    if store is None:
        return None
    import sqlite3

    from app.runs.store import StoreError

    try:
        run_id = save(store)
    except (StoreError, sqlite3.Error, OSError) as exc:
        not_kept(exc)
        return None
    finally:
        store.close()
    say_kept(run_id)
    return run_id
