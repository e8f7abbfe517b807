"""``kvscope serve``: the dashboard and HTTP API under uvicorn (127.0.0.1:8000 unless told otherwise)."""

from __future__ import annotations

import click
import uvicorn

# Open step streams must not hold a shutdown for long: they are cancelled after this many seconds.
GRACEFUL_SHUTDOWN_S = 2


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="interface to listen on (0.0.0.0 for all)")
@click.option("--port", type=click.IntRange(0, 65_535), default=8000, show_default=True, help="TCP port (0: any free port)")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info", show_default=True)
def command(host: str, port: int, log_level: str) -> None:
    """Serve the dashboard at http://HOST:PORT/ and the API (OpenAPI at /docs)."""
    uvicorn.run(
        "app.web.app:make_app",
        factory=True,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
