"""``GET /assets/plotly-basic.<hash>.min.js``: the partial plotly.js bundle under a content-hashed URL, sent gzipped as vendored."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.web.context import PLOTLY_JS, PLOTLY_URL, Web

# The URL changes with the bytes, so the browser never needs to ask again.
IMMUTABLE = "public, max-age=31536000, immutable"


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header allows gzip (RFC 9110 12.5.3: ``gzip`` or ``*``, unless its q is 0)."""
    for part in accept_encoding.split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        if coding.lower() not in ("gzip", "*"):
            continue
        q = next((p.split("=", 1)[1] for p in params if p.lower().startswith("q=")), "1")
        try:
            if float(q) > 0:
                return True
        except ValueError:
            continue
    return False


def router(*, web: Web) -> APIRouter:
    api = APIRouter(include_in_schema=False)
    # Read once: the gzip copy was compressed when vendored (level 9), so no request pays for compression.
    plain, packed = PLOTLY_JS.read_bytes(), PLOTLY_JS.with_name(PLOTLY_JS.name + ".gz").read_bytes()

    @api.get(PLOTLY_URL)
    def plotly_js(request: Request) -> Response:
        headers = {"Cache-Control": IMMUTABLE, "Vary": "Accept-Encoding"}
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            return Response(packed, media_type="text/javascript", headers={**headers, "Content-Encoding": "gzip"})
        return Response(plain, media_type="text/javascript", headers=headers)

    return api
