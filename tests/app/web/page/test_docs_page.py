"""The OpenAPI docs at /docs in headless Chromium: Swagger UI renders the API from this server alone, under a CSP
that admits the one inline script Swagger UI starts from and nothing else."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def test_docs_render_every_operation_without_leaving_the_server(page: Page, live_server: str) -> None:
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(live_server + "/docs")
    # Operations are drawn only after the bundle ran, the inline script started it and /openapi.json was read.
    expect(page.locator(".opblock-summary-path", has_text="/api/simulate/stream")).to_be_visible(timeout=20_000)
    operations = page.locator(".opblock-summary-path").all_inner_texts()
    assert {"/api/simulate", "/api/presets", "/healthz", "/api/replay"} <= {o.strip() for o in operations}
    assert "/docs" not in {o.strip() for o in operations}  # the page itself is not an API operation
    assert live_server + "/openapi.json" in requested
    assert any(url.endswith("/swagger-ui-bundle.js") for url in requested)
    outside = [url for url in requested if urlsplit(url).hostname != "127.0.0.1" and not url.startswith("data:")]
    assert outside == []
    # The page fixture fails the test on any console error, which is where a CSP violation would show.


def test_docs_csp_allows_one_inline_script_by_hash_and_no_other(live_server: str) -> None:
    response = httpx.get(live_server + "/docs", timeout=10)
    assert response.status_code == 200
    policy = response.headers["content-security-policy"]
    script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src")).split()[1:]
    assert script_src[0] == "'self'" and len(script_src) == 2 and script_src[1].startswith("'sha256-")
    assert "unsafe-inline" not in " ".join(script_src)
    assert "cdn" not in response.text.lower()
    # The dashboard keeps the strict policy: its pages have no inline script at all.
    assert "sha256" not in httpx.get(live_server + "/", timeout=10).headers["content-security-policy"]


def test_redoc_is_off(live_server: str) -> None:
    # FastAPI's ReDoc page would load its script from a CDN.
    assert httpx.get(live_server + "/redoc", timeout=10).status_code == 404
