"""What the server refuses before any route runs: a foreign Host, a cross-site write, a missing token, a body over its limit.

- Host: only the names in ``allowed_hosts`` (default: the bind address and
  localhost, 127.0.0.1, [::1]), so a page whose DNS name is rebound to
  127.0.0.1 cannot read this server (400). A server bound to every interface
  accepts any Host unless hosts are given: there the token is the protection.
- Cross-site writes: a POST (any method but GET, HEAD, OPTIONS) whose browser
  says it comes from another site (``Sec-Fetch-Site``) or whose ``Origin`` is
  not this server's is refused (403), so no other page can start a simulation
  or reserve live targets through a plain form. Clients that are not browsers
  send neither header and pass.
- Token (``--auth-token`` / ``KVSCOPE_TOKEN``): every request but ``/healthz``
  needs ``Authorization: Bearer TOKEN`` or the cookie a visit to ``/?token=TOKEN``
  sets (401 otherwise).
- Body size: uploads (routes marked ``@upload_route``) up to ``UPLOAD_LIMIT_BYTES``, anything
  else up to ``BODY_LIMIT_BYTES``; a larger ``Content-Length`` is refused before a
  byte is read, and a body that grows past it while read (413). The proxied
  OpenAI paths (``/v1/...``, ``/upstream/NAME/v1/...``) bound their own bodies
  and pass straight through once Host, token and origin are checked, so a
  rebound DNS name cannot reach an upstream through this server either.
- JSON nesting: a JSON body (anything but an upload) nested deeper than
  ``sim.bounds.jsontext.MAX_DEPTH`` is a 422 naming the body and the limit, where
  the parser would fail with a RecursionError (a 400 without a reason).
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.web.headers import RAW_HEADERS
from app.web.panel_input import MAX_UPLOAD_BYTES
from sim.bounds import jsontext

HOSTS_ENV = "KVSCOPE_ALLOWED_HOSTS"
TOKEN_ENV = "KVSCOPE_TOKEN"
COOKIE = "kvscope_token"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")

# Two measurement files of a long_doc_qa run, or a 32 MiB trace, and the form around them.
UPLOAD_LIMIT_BYTES = 2 * MAX_UPLOAD_BYTES + 8 * 2**20
# A scenario is a few hundred bytes; explicit pass lists of thousands of documents fit easily.
BODY_LIMIT_BYTES = 2 * 2**20
UPLOAD_MARK = "_kvscope_upload"  # set by ``upload_route`` on a route's endpoint
PROXIED_PREFIXES = ("/v1/", "/upstream/", "/tokenize", "/detokenize")  # app/web/proxied.py: forwarded with the proxy's own body bound
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/healthz"})  # the container's health check carries no token


F = TypeVar("F", bound=Callable[..., Any])


def upload_route(endpoint: F) -> F:
    """Marks a route that takes a file (under its ``@router.post``): its body may be up to ``UPLOAD_LIMIT_BYTES``.
    The guard's list of upload routes is made of these marks (``upload_paths``), so that a route names itself once."""
    setattr(endpoint, UPLOAD_MARK, True)
    return endpoint


def upload_paths(routes: Iterable[BaseRoute]) -> frozenset[str]:
    """The paths of the routes marked ``upload_route``."""
    return frozenset(r.path for r in routes if isinstance(r, Route) and getattr(r.endpoint, UPLOAD_MARK, False))


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """``allowed_hosts`` None: any Host; ``token`` None: no token needed."""

    allowed_hosts: frozenset[str] | None = frozenset(LOCAL_HOSTS)
    token: str | None = None

    @classmethod
    def from_env(cls) -> GuardConfig:
        """What ``kvscope serve`` configured (``KVSCOPE_ALLOWED_HOSTS``: comma-separated, ``*`` for any)."""
        hosts = os.environ.get(HOSTS_ENV, "").strip()
        allowed = None if hosts == "*" else frozenset(h.strip().lower().strip("[]") for h in hosts.split(",") if h.strip()) or frozenset(LOCAL_HOSTS)
        return cls(allowed, os.environ.get(TOKEN_ENV) or None)


def allowed_hosts_for(bind: str, extra: tuple[str, ...]) -> str:
    """The ``KVSCOPE_ALLOWED_HOSTS`` value for a server bound to ``bind``: ``*`` for every interface unless hosts are given."""
    if not extra and bind in WILDCARD_BINDS:
        return "*"
    names = dict.fromkeys([*extra, *([] if bind in WILDCARD_BINDS else [bind]), *LOCAL_HOSTS])
    return ",".join(n.strip("[]").lower() for n in names)


def host_name(host: str) -> str:
    """``127.0.0.1:8000`` -> ``127.0.0.1``; ``[::1]:8000`` -> ``::1``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class RequestGuard:
    """Plain ASGI middleware, so that streams pass straight through."""

    def __init__(self, app: ASGIApp, config: GuardConfig | None = None, uploads: frozenset[str] = frozenset()) -> None:
        """``uploads``: the paths that take files (``upload_paths`` of the app's routes)."""
        self.app = app
        self.config = config or GuardConfig.from_env()
        self.uploads = uploads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path: str = scope["path"]
        allowed = self.config.allowed_hosts
        if allowed is not None and host_name(headers.get("host", "")) not in allowed:
            await _refuse(send, 400, "this server does not answer to that Host name; start it with --allowed-host NAME to allow it")
            return
        if self.config.token is not None and path not in OPEN_PATHS:
            granted = self._token_response(scope, headers)
            if granted is not None:
                await self._send_raw(send, *granted)
                return
        if scope["method"] not in SAFE_METHODS and (reason := _cross_site(headers)):
            await _refuse(send, 403, reason)
            return
        if path.startswith(PROXIED_PREFIXES):
            await self.app(scope, receive, send)
            return
        uploading = path in self.uploads
        limit = UPLOAD_LIMIT_BYTES if uploading else BODY_LIMIT_BYTES
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _refuse(send, 413, f"the request body is larger than the limit of {limit:,} bytes for {path}")
            return
        await self._limited(scope, receive, send, limit, json_body=not uploading and _is_json(headers))

    def _token_response(self, scope: Scope, headers: Headers) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """None when the request carries the token; else the answer (a cookie and redirect for ``?token=``, or 401)."""
        token = self.config.token
        assert token is not None
        auth = headers.get("authorization", "")
        cookie = SimpleCookie(headers.get("cookie", "")).get(COOKIE)
        offered = [auth[7:] if auth.lower().startswith("bearer ") else "", cookie.value if cookie else ""]
        if any(o and hmac.compare_digest(o.encode(), token.encode()) for o in offered):
            return None
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if scope["method"] == "GET" and hmac.compare_digest(query.pop("token", "").encode(), token.encode()):
            # The page's visit with the token: a cookie for the next requests, and the token out of the address bar.
            location = _own_path(scope) + (f"?{urlencode(query)}" if query else "")
            cookie_header = f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
            return 303, [(b"location", location.encode("latin-1")), (b"set-cookie", cookie_header.encode())], b""
        body = json.dumps({"detail": "a token is needed: Authorization: Bearer TOKEN, or open /?token=TOKEN once"}).encode()
        return 401, [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")], body

    @staticmethod
    async def _send_raw(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": [*headers, *RAW_HEADERS, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def _limited(self, scope: Scope, receive: Receive, send: Send, limit: int, json_body: bool = False) -> None:
        """A body without ``Content-Length`` (chunked) is counted as it arrives; past the limit the client gets 413
        and the app sees the client leave, so it stops reading and whatever it answers is dropped. A JSON body is
        read whole first (it is within the limit) and its nesting checked."""
        received = 0
        started = refused = False

        async def counting_receive() -> Message:
            nonlocal received, refused, started
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    if not started:
                        started = True
                        await _refuse(send, 413, f"the request body is larger than the limit of {limit:,} bytes for {scope['path']}")
                    return {"type": "http.disconnect"}
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        if not json_body:
            await self.app(scope, counting_receive, watching_send)
            return
        chunks: list[bytes] = []
        message = await counting_receive()
        while message["type"] == "http.request":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
            message = await counting_receive()
        if refused:
            return  # 413 sent
        if message["type"] == "http.request":
            message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            if problem := _too_deep(message["body"]):
                await _send_json(send, 422, [{"type": "json_too_deep", "loc": ["body"], "msg": problem}])
                return
        whole: Message | None = message  # the whole body (or the client's leaving), then whatever comes next

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                first, whole = whole, None
                return first
            return await counting_receive()

        await self.app(scope, replay, watching_send)


def _own_path(scope: Scope) -> str:
    """The request's path as a redirect that stays on this server: as sent (still percent-encoded), with its leading
    slashes and backslashes made one slash, since a browser reads ``//evil.example/`` and ``/\\evil.example/`` as
    another server's address (WHATWG URL: a scheme-relative reference; ``\\`` is ``/`` in http URLs)."""
    sent: bytes = scope.get("raw_path") or scope["path"].encode()
    return "/" + sent.decode("latin-1").lstrip("/\\\t\r\n")  # tabs and newlines: a URL parser drops them


def _cross_site(headers: Headers) -> str | None:
    """Why a write is refused as cross-site, or None."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return f"a {site} request may not change anything here (Sec-Fetch-Site)"
    origin = headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        if origin == "null" or parts.netloc.lower() != headers.get("host", "").lower():
            return "a request from another origin may not change anything here (Origin)"
    return None


def _is_json(headers: Headers) -> bool:
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _too_deep(body: bytes) -> str | None:
    """Why the JSON body is refused for its nesting, or None (malformed JSON is left to the route's own 422)."""
    if body.count(b"[") + body.count(b"{") <= jsontext.MAX_DEPTH:
        return None  # too few brackets to nest that deep: nothing parsed twice
    try:
        jsontext.loads(body)
    except ValueError as exc:
        if "nested deeper" in str(exc):
            return f"the JSON body is {exc} (the limit)"
    return None


async def _refuse(send: Send, status: int, message: str) -> None:
    await _send_json(send, status, message)


async def _send_json(send: Send, status: int, detail: object) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), *RAW_HEADERS, (b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body})
