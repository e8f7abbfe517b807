"""The proxied OpenAI paths as plain ASGI, and ``ProxyFirst``, which hands them their requests before anything else.

A proxied request should cost the client as little as the stack allows: ``ProxyFirst`` sits outside the app's
own middleware (security headers, gzip, disconnects) and its router, looks the method and path up in a dict
(``/v1/...`` for the first upstream, ``/upstream/NAME/v1/...`` for one by name) and calls the endpoint itself;
every other request goes on unchanged. The same endpoints are also the app's routes, so a wrong method answers as
before. kvscope's own credentials (``--auth-token``'s ``Authorization: Bearer`` and the ``kvscope_token`` cookie)
stop here: the upstream gets only the headers the client meant for it.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

import httpx
from starlette.types import ASGIApp, Receive, Scope, Send

from app.proxy.forward import error_response, forward
from app.proxy.watch import UpstreamWatch
from app.web.guard import COOKIE, GuardConfig

PREFIX = "/upstream/"


class Proxied:
    """One proxied path (``/v1/completions``...), forwarded to the upstream named in the path or to the first."""

    def __init__(self, path: str, client: httpx.AsyncClient, watches: Mapping[str, UpstreamWatch], *, watched: bool = True) -> None:
        self.path, self.client, self.watches = path, client, watches
        self.watched = watched  # False: forwarded only, neither numbered nor measured (/tokenize, say)
        self.first = next(iter(watches.values()))
        self.token = GuardConfig.from_env().token  # kvscope's own, which the guard has checked already

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope.get("path_params", {}).get("name")
        watch = self.watches.get(name) if name is not None else self.first
        if watch is None:
            message = f"no upstream named {name!r} (configured: {', '.join(self.watches)})"
            await error_response(404, message, "NotFoundError")(scope, receive, send)
            return
        if not self.watched:
            await forward(self.client, watch.upstream, self.path, scope, receive, send, lambda ex: None)
            return
        seq = await watch.begin()
        passed = False

        def first_byte() -> None:
            nonlocal passed
            if not passed:  # once per request, even if forwarding fails in an unforeseen way
                passed = True
                watch.first_byte_passed()

        scope = {**scope, "headers": without_own_credentials(scope["headers"], self.token)}
        try:
            await forward(self.client, watch.upstream, self.path, scope, receive, send,
                          lambda ex: watch.on_exchange(seq, ex), first_byte)
        finally:
            first_byte()


def without_own_credentials(headers: list[tuple[bytes, bytes]], token: str | None) -> list[tuple[bytes, bytes]]:
    """``headers`` (ASGI: names in lower case) without kvscope's credentials: an ``Authorization`` carrying ``token``
    and the ``kvscope_token`` cookie (whatever its value: the name is kvscope's); the client's other cookies stay, in
    their order, and a Cookie header left empty goes."""
    kept: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name == b"authorization" and token is not None and _bears(value, token):
            continue
        if name == b"cookie":
            pairs = [p for p in value.split(b";") if p.strip() and p.split(b"=", 1)[0].strip() != COOKIE.encode()]
            if not pairs:
                continue
            value = b";".join(pairs).strip()
        kept.append((name, value))
    return kept


def _bears(authorization: bytes, token: str) -> bool:
    """The header carries ``token`` as the guard reads one (the scheme in any case, the token exact)."""
    return authorization[:7].lower() == b"bearer " and hmac.compare_digest(authorization[7:], token.encode())


class ProxyFirst:
    """Middleware: proxied paths straight to their endpoint (a dict look-up), everything else to ``app``.

    ``table`` maps (method, path) to endpoints (``Web.proxied``; the watch router fills it when the app is built).
    """

    def __init__(self, app: ASGIApp, table: Mapping[tuple[str, str], ASGIApp]) -> None:
        self.app = app
        self.table = table

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.table:
            path, name = scope["path"], None
            if path.startswith(PREFIX):
                name, _, rest = path[len(PREFIX):].partition("/")
                path = "/" + rest
            endpoint = self.table.get((scope["method"], path))
            if endpoint is not None and name != "":
                if name is not None:
                    scope["path_params"] = {"name": name}
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)
