"""ZMQ endpoints as vLLM's KV events config names them: ``tcp://HOST:PORT`` (``tcp://*:PORT`` to bind every interface)."""

from __future__ import annotations

import re

_TCP = re.compile(r"^tcp://(?P<host>\*|\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.\-]+):(?P<port>\d{1,5})$")


class EndpointError(ValueError):
    """An endpoint that is not ``tcp://HOST:PORT``."""


def check_endpoint(endpoint: str, bind: bool = False) -> str:
    """The endpoint if well formed; ``EndpointError`` saying what is wrong otherwise (``*`` only to bind)."""
    m = _TCP.match(endpoint)
    if m is None:
        raise EndpointError(f"{endpoint!r} is not tcp://HOST:PORT")
    port = int(m["port"])
    if not 1 <= port <= 65_535:
        raise EndpointError(f"port {port} of {endpoint!r} is not from 1 to 65535")
    if m["host"] == "*" and not bind:
        raise EndpointError(f"{endpoint!r}: '*' binds every interface; to connect, name the host")
    return endpoint
