"""The listening socket of ``kvscope serve`` and ``kvscope emulate``, bound before either says it serves: a port in
use stops the command with a message naming ``--port``, never uvicorn's traceback-like log after a banner."""

from __future__ import annotations

import errno
import socket

import click


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (``port`` 0: any free one; ``sock.getsockname()[1]`` says which)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a port in TIME_WAIT is free
    try:
        sock.bind((host, port))
        sock.listen(2048)  # uvicorn's default backlog
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(
                f"port {port} on {host} is in use (another server listens there): choose another with --port N "
                "(--port 0 takes any free port)") from None
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def bound_url(host: str, sock: socket.socket) -> str:
    """The address the socket listens on, as a URL (the port chosen when 0 was asked for)."""
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
