"""``GET /docs``: the OpenAPI docs in Swagger UI, served from the vendored copy so that they work with no network."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

from app.web.context import Web
from app.web.headers import content_security_policy

OPENAPI_URL = "/openapi.json"
SWAGGER_UI = "/static/vendor/swagger-ui"  # written by scripts/vendor_assets.py


def router(*, web: Web) -> APIRouter:
    api = APIRouter(include_in_schema=False)
    page = get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title="kvscope API",
        swagger_js_url=f"{SWAGGER_UI}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_UI}/swagger-ui.css",
        swagger_favicon_url=f"{SWAGGER_UI}/favicon-32x32.png",
        # No badge image from the public validator: nothing on the page may leave this server.
        swagger_ui_parameters={"validatorUrl": None},
    )
    body = bytes(page.body)
    # Swagger UI starts from one inline script that FastAPI writes. Rather than drop the page's CSP, the policy
    # allows exactly that script by its hash (fixed: the page is the same for every request), and no other.
    policy = content_security_policy(script_src=f"'self' {inline_script_hash(body)}")

    @api.get("/docs")
    def docs() -> HTMLResponse:
        return HTMLResponse(body, headers={"Content-Security-Policy": policy})

    return api


def inline_script_hash(html: bytes) -> str:
    """The CSP source (``'sha256-...'``) of the page's one inline script."""
    scripts = re.findall(rb"<script>(.*?)</script>", html, flags=re.DOTALL)
    if len(scripts) != 1:
        raise RuntimeError(f"expected one inline script in the Swagger UI page, found {len(scripts)}")
    return "'sha256-" + base64.b64encode(hashlib.sha256(scripts[0]).digest()).decode() + "'"
