"""The Watch view's words for two states a new user met (real emulator with KV events, real proxy, real Chromium):
a twin started after the server had cached blocks, and requests whose hits the server's counters cannot tell."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from live_servers import emulator, free_port
from page_tour import goto_view
from playwright.sync_api import Page, expect
from test_watch_page import proxied, words

from tests.app.web.test_watch_api import two_at_once

pytestmark = pytest.mark.browser


@pytest.fixture()
def watched(live_server_factory) -> Iterator[tuple[str, str]]:
    live = f"tcp://127.0.0.1:{free_port()}"
    with emulator("--kv-events", live, "--speed", "10") as emu:  # 21,520 GPU tokens: room for 400 + 2,000
        with live_server_factory("--upstream", f"emu={emu}", "--kv-events", f"emu={live}") as url:
            yield emu, url


def test_a_twin_started_late_says_what_the_server_held(page: Page, watched: tuple[str, str]) -> None:
    emu, url = watched
    goto_view(page, url, "live")  # the Watch panel is in the Live & Watch view
    page.wait_for_function("() => window.Plotly && window.htmx")
    view = page.locator("#watch-emu")
    # Before any proxied request (the twin starts with the first): 100 tokens straight to the server, 6 full blocks
    # of 16 that it caches and the twin never sees.
    httpx.post(emu + "/v1/completions", json={"prompt": words("before", 100), "max_tokens": 1}).raise_for_status()
    gpu = view.locator('.watch-tier[data-tier="gpu"] .watch-tier-label')
    expect(gpu).to_contain_text("96 of", timeout=15_000)  # the server's KV events reached the watch: 6 x 16 tokens
    proxied(url, words("p", 48))  # 3 full blocks, seen by both
    divergence = view.locator('[data-role="divergence"]')
    # Server 6 + 3, twin 3: the 6 differ from the start; no request parted them.
    expect(divergence).to_have_text(
        "server holds 9 GPU blocks, twin 3: 6 blocks differ · the server held 6 blocks before the twin started", timeout=15_000)
    d = httpx.get(url + "/api/watch/emu").json()["divergence"]
    assert (d["held_before"], d["first_parted"]) == (6, None)
    page.goto("about:blank")  # leave before the server stops, so its stream is not cut under the page


def test_unknown_hits_say_why(page: Page, watched: tuple[str, str]) -> None:
    _, url = watched
    goto_view(page, url, "live")  # the Watch panel is in the Live & Watch view
    page.wait_for_function("() => window.Plotly && window.htmx")
    proxied(url, words("first", 32))  # the counters' baseline is read after this one
    # Two at once (400 prompt tokens, 2,000 streamed at 5 ms / 10 each: 1 s in flight, the second sent once the first
    # streams): the counters, cumulative, cover both, so neither request's hits can be told (tests/test_watch_api.py).
    two_at_once(url)
    deadline = time.monotonic() + 15
    while len(records := httpx.get(url + "/api/watch/emu").json()["requests"]) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    overlapped = [r for r in records if r["prompt_tokens"] == 400]
    assert len(overlapped) == 2, records
    assert all(r["gpu_hit_tokens"] is None and "another request was in flight" in r["hits_unknown"] for r in overlapped)
    seq = overlapped[-1]["seq"]
    hit = page.locator(f"#watch-emu-req-{seq} td").nth(4)
    expect(hit).to_have_text("unknown", timeout=15_000)
    assert "another request was in flight" in (hit.get_attribute("title") or "")
    note = page.locator("#watch-emu [data-role=hits-unknown]")
    expect(note).to_contain_text("hits unknown: it ran while another request was in flight")
    page.goto("about:blank")
