"""The partial plotly.js bundle over a real server: a content-hashed URL, sent gzipped when the client accepts it,
cached for good, and byte for byte the vendored file; the page asks for it and for nothing of the full bundle."""

from __future__ import annotations

import gzip
import hashlib
import re

import httpx
import pytest
from playwright.sync_api import Page

from app.web.routes.assets import accepts_gzip
from live_servers import ROOT

VENDORED = ROOT / "static" / "vendor" / "plotly-basic.min.js"


def plotly_src(url: str) -> str:
    scripts = re.findall(r'<script defer src="(/assets/[^"]+)"', httpx.get(url + "/", timeout=30).text)
    assert len(scripts) == 1, scripts
    return scripts[0]


def test_the_page_names_the_bundle_by_its_content(live_server: str) -> None:
    src = plotly_src(live_server)
    # The URL carries the first 12 hex digits of the vendored file's sha256: new bytes, new URL.
    assert src == f"/assets/plotly-basic.{hashlib.sha256(VENDORED.read_bytes()).hexdigest()[:12]}.min.js"
    assert httpx.get(live_server + "/assets/plotly-basic.000000000000.min.js", timeout=10).status_code == 404
    assert httpx.get(live_server + "/assets/plotly.min.js", timeout=10).status_code == 404  # the full bundle is gone


def test_gzip_is_sent_as_vendored_and_identity_when_asked(live_server: str) -> None:
    url = live_server + plotly_src(live_server)
    with httpx.stream("GET", url, headers={"Accept-Encoding": "gzip, deflate"}, timeout=30) as packed:
        wire = b"".join(packed.iter_raw())
        headers = packed.headers
    assert headers["content-encoding"] == "gzip"
    assert "immutable" in headers["cache-control"] and "max-age=31536000" in headers["cache-control"]
    assert headers["vary"] == "Accept-Encoding"
    # The pre-compressed copy itself (not compressed again per request), and it unpacks to the vendored bundle.
    assert wire == VENDORED.with_name("plotly-basic.min.js.gz").read_bytes()
    assert gzip.decompress(wire) == VENDORED.read_bytes()
    assert len(wire) < 600_000  # the page's JS budget (make bench) with room for htmx and the page's own scripts
    plain = httpx.get(url, headers={"Accept-Encoding": "identity"}, timeout=30)
    assert "content-encoding" not in plain.headers and plain.content == VENDORED.read_bytes()


def test_accept_encoding_reading() -> None:
    # RFC 9110 12.5.3: a coding with q=0 is "not acceptable"; "*" stands for any coding not listed.
    assert accepts_gzip("gzip") and accepts_gzip("br, GZIP;q=0.5") and accepts_gzip("*")
    assert not accepts_gzip("") and not accepts_gzip("identity") and not accepts_gzip("gzip;q=0") and not accepts_gzip("gzip;q=0.0")
    assert not accepts_gzip("gzip;q=bad")


@pytest.mark.browser
def test_every_type_the_charts_name_is_in_the_bundle(page: Page, live_server: str) -> None:
    """Each ``type: "..."`` the page's scripts write is a trace type the partial bundle registers, or a shape or axis
    type of Plotly's layout (a line, a log axis): a chart of another trace type would draw nothing."""
    written = {m for f in (ROOT / "static" / "js").glob("*.js") for m in re.findall(r'\btype: "(\w+)"', f.read_text())}
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    schema = page.evaluate("""() => { const s = window.Plotly.PlotSchema.get();
      return { traces: Object.keys(s.traces),
               layout: [...s.layout.layoutAttributes.shapes.items.shape.type.values, ...s.layout.layoutAttributes.xaxis.type.values] }; }""")
    assert sorted(schema["traces"]) == ["bar", "pie", "scatter"]  # plotly.js-basic: nothing more is sent
    traces = written - set(schema["layout"])
    assert traces == {"scatter", "bar"}, written  # the page's charts: lines and markers, and the causes' stacked bars
    assert traces <= set(schema["traces"])
