"""``kvscope serve``: the dashboard and HTTP API under uvicorn (127.0.0.1:8000 unless told otherwise)."""

from __future__ import annotations

import os
from pathlib import Path

import click
import uvicorn

from app import costs_profile
from app.cli import runs_db
from app.cli.serve_upstreams import configure_upstreams, upstream_options
from app.live.targets import ENV_VAR, TargetSpecError, env_value, parse_targets, targets_from_env

# Open step streams must not hold a shutdown for long: they are cancelled after this many seconds.
GRACEFUL_SHUTDOWN_S = 2


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="interface to listen on (0.0.0.0 for all)")
@click.option("--port", type=click.IntRange(0, 65_535), default=8000, show_default=True, help="TCP port (0: any free port)")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info", show_default=True)
@click.option(
    "--target", "targets", multiple=True, metavar="NAME=URL",
    help=f"a vLLM server for live mode, e.g. gpu=http://host:8000; repeat for more (replaces ${ENV_VAR})",
)
@click.option(
    "--costs", "costs_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help=f"cost profile JSON (from kvscope calibrate) for every simulation of the page and API (replaces ${costs_profile.ENV_VAR})",
)
@upstream_options
@runs_db.db_options
def command(
    host: str, port: int, log_level: str, targets: tuple[str, ...], costs_file: Path | None,
    upstreams: tuple[str, ...], kv_events: tuple[str, ...], kv_replay: tuple[str, ...], upstream_timeout: str | None,
    db: str | None, keep_runs: int | None, db_max_mb: int | None,
) -> None:
    """Serve the dashboard at http://HOST:PORT/ and the API (OpenAPI at /docs)."""
    _configure_live_targets(targets)
    configure_upstreams(upstreams, kv_events, kv_replay, upstream_timeout)
    runs_db.configure(db, keep_runs, db_max_mb).close()  # checked now, reopened by the app
    try:
        costs_profile.configure(costs_file)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--costs" if costs_file else costs_profile.ENV_VAR) from None
    uvicorn.run(
        "app.web.app:make_app",
        factory=True,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )


def _configure_live_targets(specs: tuple[str, ...]) -> None:
    """Check the live targets before serving (only http and https) and hand them to the app through ``KVSCOPE_TARGETS``."""
    try:
        if specs:
            os.environ[ENV_VAR] = env_value(parse_targets(specs))
        else:
            targets_from_env(os.environ.get(ENV_VAR))
    except TargetSpecError as exc:
        if specs:
            raise click.BadParameter(str(exc), param_hint="--target") from None
        raise click.UsageError(f"{ENV_VAR}: {exc}") from None
