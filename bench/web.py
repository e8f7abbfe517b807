"""Dashboard figures over a real ``kvscope serve``: time to first byte of ``/``, a full seed-lab step stream at
maximum speed (over HTTP, and played to the end in headless Chromium), the bytes of JS and CSS the page loads, and
how smooth the page stays: its longest main-thread task while the seed lab plays at maximum speed and the time until
it is usable after a cold load, each against its target (JS under 600 kB gzipped, no task over 200 ms, usable
within 1.5 s)."""

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
# The targets of issue 13, the anchors the measured figures are given against.
JS_GZIP_TARGET_BYTES = 600_000
LONGEST_TASK_TARGET_MS = 200.0
INTERACTIVE_TARGET_MS = 1500.0
QUIET_MS = 1000  # "usable": no long task for this long after it (as Lighthouse's time to interactive asks, 5 s there)
# Collects every long task (over 50 ms, the Long Tasks API's own threshold) from the first byte on; added through the
# DevTools protocol, so the page's CSP does not apply to it.
_OBSERVE = """window.__longtasks = [];
new PerformanceObserver((list) => { for (const t of list.getEntries()) window.__longtasks.push([t.startTime, t.duration]); })
  .observe({type: "longtask", buffered: true});"""


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
    js_gzip = sum(f["gzip_bytes"] for f in js)
    return {
        "js_bytes": sum(f["bytes"] for f in js),
        "js_gzip_bytes": js_gzip,
        "js_gzip_of_target": round(js_gzip / JS_GZIP_TARGET_BYTES, 3),  # under 1: within the 600 kB budget
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


def _spread(values: list[float], target: float) -> dict[str, Any]:
    return {"min_ms": round(min(values), 1), "p50_ms": round(statistics.median(values), 1), "max_ms": round(max(values), 1),
            "p50_of_target": round(statistics.median(values) / target, 3), "n": len(values)}


def _smoothness(url: str, n: int = 3) -> dict[str, Any] | None:
    """Per run, in a fresh browser context (a cold cache): the time until the page is usable after load, then the
    longest task and the count of long tasks while the seed lab plays at maximum speed, from Run to done.

    Usable: the page's scripts have run (DOMContentLoaded, with Plotly and htmx defined) and the main thread has then
    been free of long tasks for QUIET_MS; the figure is the later of DOMContentLoaded's end and the end of the last long
    task before that quiet spell, from navigation start."""
    if not shutil.which(_CHROMIUM):
        return None
    from playwright.sync_api import sync_playwright

    interactive, longest, counts = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_CHROMIUM, args=_CHROMIUM_ARGS)
        for _ in range(n):
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            context.add_init_script(_OBSERVE)
            page = context.new_page()
            page.goto(url + "/")
            page.wait_for_function("() => window.Plotly && window.htmx")
            page.wait_for_function(
                f"""() => {{ const last = window.__longtasks.reduce((m, [s, d]) => Math.max(m, s + d), 0);
                            return performance.now() - last > {QUIET_MS}; }}""", timeout=30_000)
            interactive.append(page.evaluate(
                """() => Math.max(performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd,
                                  ...window.__longtasks.map(([s, d]) => s + d))"""))
            page.select_option("#speed", "max")
            started = page.evaluate("performance.now()")
            page.click("button[data-action=run]")
            page.wait_for_selector("#player-status[data-state=done]", timeout=60_000)
            page.wait_for_timeout(300)  # the last frame's task is reported once it ends
            tasks = page.evaluate(f"window.__longtasks.filter(([s]) => s >= {started}).map(([, d]) => d)")
            longest.append(max(tasks, default=0.0))
            counts.append(len(tasks))
            context.close()
        browser.close()
    return {
        "interactive_after_load": _spread(interactive, INTERACTIVE_TARGET_MS),
        "seed_lab_max_speed_longest_task": {**_spread(longest, LONGEST_TASK_TARGET_MS), "long_tasks_per_run": counts},
    }


def run() -> dict[str, Any]:
    with _served() as url, httpx.Client(timeout=60) as client:
        client.get(url + "/")  # warm: the first page computes the default cost fit
        return {
            "ttfb_index_ms": _ttfb_ms(client, url),
            "seed_lab_stream": _stream_s(client, url),
            "seed_lab_in_browser": _browser_run_s(url),
            "page_smoothness": _smoothness(url),
            "page_assets": _asset_bytes(url),
        }
