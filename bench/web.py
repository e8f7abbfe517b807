"""Dashboard figures over a real ``kvscope serve``: time to first byte of ``/``, a full seed-lab step stream at
maximum speed (over HTTP, and played to the end in headless Chromium), and the bytes of JS and CSS the page loads."""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from typing import Any

import httpx

from bench._served import free_port, served

# Runs kept in memory: a benchmark never writes to the user's runs database (the store's cost is bench/runs.py's).
_SERVE = [sys.executable, "-c", "from app.cli import main; main()", "serve", "--log-level", "warning", "--db", ":memory:"]
_CHROMIUM = "/usr/bin/chromium"
_CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


@contextmanager
def _served() -> Iterator[str]:
    port = free_port()
    with served([*_SERVE, "--port", str(port)], port, "/healthz") as url:
        yield url


def _ttfb_ms(client: httpx.Client, url: str, n: int = 30) -> dict[str, float]:
    """Time from sending ``GET /`` to its first body byte (the page renders a fresh simulation each time)."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        with client.stream("GET", url + "/") as response:
            chunks = response.iter_raw()
            next(chunks)
            times.append((time.perf_counter() - started) * 1000)
            for _ in chunks:  # read the rest, so the connection is reused cleanly
                pass
    return {"p50": round(statistics.median(times), 2), "min": round(min(times), 2), "n": n}


def _stream_s(client: httpx.Client, url: str, n: int = 10) -> dict[str, Any]:
    """Wall time of a whole seed-lab stream (pace 0: as fast as the server goes), read to its last byte."""
    times, events, size = [], 0, 0
    for _ in range(n):
        started = time.perf_counter()
        with client.stream("POST", url + "/api/simulate/stream", json={"preset": "seed-lab"}) as response:
            body = response.read()
        times.append(time.perf_counter() - started)
        events, size = body.count(b"\nevent: ") + body.startswith(b"event: "), len(body)
    return {"p50_s": round(statistics.median(times), 4), "min_s": round(min(times), 4), "events": events, "bytes": size, "n": n}


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script" and a.get("src"):
            self.urls.append(str(a["src"]))
        elif tag == "link" and a.get("rel") == "stylesheet" and a.get("href"):
            self.urls.append(str(a["href"]))


def _asset_bytes(url: str) -> dict[str, Any]:
    """Every script and stylesheet of ``/``: bytes as files, and as sent with gzip."""
    page = httpx.get(url + "/", timeout=30).text
    parser = _Assets()
    parser.feed(page)
    files: dict[str, dict[str, int]] = {}
    for path in parser.urls:
        plain = httpx.get(url + path, headers={"Accept-Encoding": "identity"}, timeout=30)
        with httpx.stream("GET", url + path, headers={"Accept-Encoding": "gzip"}, timeout=30) as gz:
            wire = sum(len(chunk) for chunk in gz.iter_raw())
        files[path.split("?")[0]] = {"bytes": len(plain.content), "gzip_bytes": wire}
    js = [f for p, f in files.items() if p.endswith(".js")]
    css = [f for p, f in files.items() if p.endswith(".css")]
    return {
        "js_bytes": sum(f["bytes"] for f in js),
        "js_gzip_bytes": sum(f["gzip_bytes"] for f in js),
        "css_bytes": sum(f["bytes"] for f in css),
        "css_gzip_bytes": sum(f["gzip_bytes"] for f in css),
        "files": files,
    }


def _browser_run_s(url: str, n: int = 3) -> dict[str, Any] | None:
    """Run to done in headless Chromium at the fastest speed: request, stream, tiles, chart, log and table."""
    if not shutil.which(_CHROMIUM):
        return None
    from playwright.sync_api import sync_playwright

    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_CHROMIUM, args=_CHROMIUM_ARGS)
        for _ in range(n):
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(url + "/")
            page.wait_for_function("() => window.Plotly && window.htmx")
            page.select_option("#speed", "max")
            started = time.perf_counter()
            page.click("button[data-action=run]")
            page.wait_for_selector("#player-status[data-state=done]", timeout=60_000)
            times.append(time.perf_counter() - started)
            page.close()
        browser.close()
    return {"p50_s": round(statistics.median(times), 3), "n": n}


def run() -> dict[str, Any]:
    with _served() as url, httpx.Client(timeout=60) as client:
        client.get(url + "/")  # warm: the first page computes the default cost fit
        return {
            "ttfb_index_ms": _ttfb_ms(client, url),
            "seed_lab_stream": _stream_s(client, url),
            "seed_lab_in_browser": _browser_run_s(url),
            "page_assets": _asset_bytes(url),
        }
