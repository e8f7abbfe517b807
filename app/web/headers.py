"""Security headers on every response, as plain ASGI middleware so that streams and disconnects pass straight through."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def content_security_policy(script_src: str = "'self'") -> str:
    """Everything from this origin only; plotly and htmx inject <style> elements; no other page may frame this one."""
    return (
        f"default-src 'self'; script-src {script_src}; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
    )


# Scripts only from this origin, so no inline script can run.
CSP = content_security_policy()
# On every answer of this server's own: set by ``SecurityHeaders``, and by the request guard on what it refuses.
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",  # frame-ancestors for browsers without CSP 2
    "Referrer-Policy": "same-origin",
}
RAW_HEADERS = [(name.lower().encode(), value.encode()) for name, value in HEADERS.items()]


class SecurityHeaders:
    """Adds the CSP (unless the route set its own, as ``/docs`` does), ``nosniff``, no framing, no referrer to other sites."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
