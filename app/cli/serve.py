"""``kvscope serve``: the dashboard and HTTP API under uvicorn (127.0.0.1:8000 unless told otherwise)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import click
import uvicorn

from app import budgets, costs_profile
from app.cli import runs_db
from app.cli.listen import bound_url, listen
from app.cli.serve_upstreams import configure_upstreams, upstream_options
from app.live.targets import ENV_VAR, TargetSpecError, env_value, parse_targets, targets_from_env
from app.web import guard

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
@click.option(
    "--budget", default=None, metavar="KEY=VALUE,...",
    help=f"one request's limits and the workers, e.g. work=1e7,seconds=10,concurrency=4 "
    f"(replaces ${budgets.ENV_VAR}; default {budgets.WebBudget().describe()})",
)
@click.option(
    "--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
    help=f"a Host name the server answers to besides the bind address and localhost; repeat for more; * for any "
    f"(replaces ${guard.HOSTS_ENV}; a server on 0.0.0.0 answers to any unless given)",
)
@click.option(
    "--auth-token", default=None, metavar="TOKEN",
    help=f"require this token of every request but /healthz (Authorization: Bearer TOKEN, or open /?token=TOKEN once); "
    f"replaces ${guard.TOKEN_ENV}",
)
def command(
    host: str, port: int, log_level: str, targets: tuple[str, ...], costs_file: Path | None,
    upstreams: tuple[str, ...], kv_events: tuple[str, ...], kv_replay: tuple[str, ...], upstream_tokens: tuple[str, ...],
    upstream_timeout: str | None,
    db: str | None, keep_runs: int | None, db_max_mb: int | None,
    budget: str | None, allowed_hosts: tuple[str, ...], auth_token: str | None,
) -> None:
    """Serve the dashboard at http://HOST:PORT/ and the API (OpenAPI at /docs)."""
    _configure_live_targets(targets)
    configure_upstreams(upstreams, kv_events, kv_replay, upstream_timeout, upstream_tokens)
    runs_db.configure(db, keep_runs, db_max_mb).close()  # checked now, reopened by the app
    _configure_guard(host, allowed_hosts, auth_token)
    try:
        if budget is not None:
            os.environ[budgets.ENV_VAR] = budgets.parse_web_budget(budget).describe()
        else:
            budgets.web_budget()
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--budget" if budget is not None else budgets.ENV_VAR) from None
    try:
        costs_profile.configure(costs_file)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--costs" if costs_file else costs_profile.ENV_VAR) from None
    config = uvicorn.Config(
        "app.web.app:make_app",
        factory=True,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    from app.web.workers import stop_all  # the web's modules load in the server only, not for every command

    server = _Server(config, stop_all)
    sock = listen(host, port)  # bound first: a port in use says so, naming --port
    # uvicorn names its address only when it binds the socket itself: said here, with the port chosen for --port 0.
    click.echo(f"kvscope serving the dashboard at {bound_url(host, sock)}/ (API docs at /docs); Ctrl+C stops it", err=True)
    server.run(sockets=[sock])
    if not server.started:
        sys.exit(3)  # as uvicorn.run: it could not start (the port is taken, say), and said why


class _Server(uvicorn.Server):
    """uvicorn's server, whose SIGTERM also answers the calls waiting for a worker (503) at once: otherwise each
    would hold the shutdown for its grace period, and the workers' ending would come after it."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.on_exit()


def _configure_guard(host: str, allowed_hosts: tuple[str, ...], auth_token: str | None) -> None:
    """Hand the Host allow-list and the token to the app through its environment variables."""
    if allowed_hosts or guard.HOSTS_ENV not in os.environ:
        os.environ[guard.HOSTS_ENV] = "*" if "*" in allowed_hosts else guard.allowed_hosts_for(host, allowed_hosts)
    if auth_token is not None:
        if not auth_token.strip():
            raise click.BadParameter("must not be empty", param_hint="--auth-token")
        os.environ[guard.TOKEN_ENV] = auth_token


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
