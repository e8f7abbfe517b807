"""The Watch view in headless Chromium: an emulator publishing KV events, driven through kvscope's proxy; the page
draws its tiers to scale, the proxied requests' TTFT beside the twin's, and the divergence when traffic bypasses
the proxy."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from live_servers import emulator, free_port
from page_checks import WRAP, frames_per_chart
from playwright.sync_api import Page, expect

from sim.explain.causes import FIRST_SEEN, LABELS, PRECEDENCE

Serve = Callable[..., AbstractContextManager[str]]


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


@pytest.fixture(scope="module")
def watched(live_server_factory: Serve) -> Iterator[tuple[str, str]]:
    live, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    # A small GPU (64 blocks of 16 = 1,024 tokens, 63 usable) and 32-token CPU chunks, so the bars fill visibly.
    with emulator("--kv-events", live, "--kv-events-replay", replay, "--speed", "50", "--gpu-tokens", "1024",
                  "--chunk-size", "32") as emu:
        with live_server_factory("--upstream", f"emu={emu}", "--kv-events", f"emu={live}",
                                 "--kv-events-replay", f"emu={replay}") as url:
            yield emu, url


def proxied(url: str, prompt: str) -> None:
    with httpx.stream("POST", url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2, "stream": True}) as r:
        r.read()


def requests_seen(url: str) -> int:
    return len(httpx.get(url + "/api/watch/emu").json()["requests"])


@pytest.mark.browser
def test_the_watch_view_follows_an_emulator_through_the_proxy(page: Page, watched: tuple[str, str], artifacts: Path) -> None:
    emu, url = watched
    page.goto(url + "/live")
    page.wait_for_function("() => window.Plotly && window.htmx")
    view = page.locator("#watch-emu")
    expect(view).to_be_visible()
    page.evaluate(WRAP)
    # Three 160-token prompts (10 blocks each), one at a time: the page must show 30 of 63 GPU blocks = 480 tokens.
    for i in range(3):
        proxied(url, words(f"p{i}x", 160))
        expect(page.locator("#watch-emu-req-" + str(i))).to_be_attached(timeout=15_000)  # seq from 0
    gpu = view.locator('.watch-tier[data-tier="gpu"]')
    expect(gpu.locator(".watch-tier-label")).to_have_text("GPU: 480 of 1,008 tokens in 3 prefixes", timeout=15_000)
    # To scale: three segments of 160 tokens, each 160 / 1,008 of the bar.
    widths = gpu.locator(".watch-seg").evaluate_all("segs => segs.map(s => parseFloat(s.style.width))")
    assert widths == pytest.approx([100 * 160 / 1008] * 3, abs=0.01)
    bar = gpu.locator(".watch-bar").bounding_box()
    seg = gpu.locator(".watch-seg").first.bounding_box()
    assert bar is not None and seg is not None and seg["width"] == pytest.approx(bar["width"] * 160 / 1008, abs=2)
    # The CPU tier: 160 tokens = 5 full chunks of 32 per prompt.
    expect(view.locator('.watch-tier[data-tier="cpu"] .watch-tier-label')).to_contain_text("480 of", timeout=15_000)
    divergence = view.locator('[data-role="divergence"]')
    expect(divergence).to_have_text("server holds 30 GPU blocks, twin 30: 0 blocks differ (they agree)")
    # Measured and predicted TTFT, one point per proxied request each.
    points = view.locator('[data-role="chart"]').evaluate("d => d.data.map(t => t.x.length)")
    assert points == [3, 3]
    expect(page.locator("#watch-emu-req-1 td").nth(4)).to_have_text("0")  # GPU hit tokens of a new prompt
    # Why the twin computed: three new prompts share nothing, so the twin computes all 3 x 160 = 480 tokens; each row
    # names its causes as the watch's own record of that request has them (the twin's gpu_miss/computed maps).
    records = {r["seq"]: r for r in httpx.get(url + "/api/watch/emu").json()["requests"]}
    for seq in (0, 1, 2):  # proxied requests are numbered from 0, as a run's seq
        computed = records[seq]["computed"]
        assert sum(computed.values()) == 160, computed
        assert computed.get(FIRST_SEEN, 0) > 0, computed  # never held by the twin before
        # Each cause by its label; one that names a thing ("the last token") takes "for" (static/js/causes.js).
        text = ", ".join(f"{computed[c]:,} {'for ' if LABELS[c].startswith('the ') else ''}{LABELS[c]}" for c in PRECEDENCE if computed.get(c))
        expect(page.locator(f"#watch-emu-req-{seq} td").nth(6)).to_have_text(text)
    totals = view.locator('[data-role="causes-total"]')
    expect(totals).to_contain_text("The twin computed 480 tokens over 3 requests: ")
    # The per-cause totals as the main page's cause bar: one stacked bar whose segments sum to the 480 tokens.
    causes_chart = view.locator('[data-role="causes"]')
    expect(causes_chart).to_be_visible()
    page.wait_for_function("() => document.querySelector('#watch-emu [data-role=causes]').data?.length > 0")
    stacked = causes_chart.evaluate("d => d.data.map(t => [t.name, t.y[0]])")
    assert sum(y for _, y in stacked) == 480
    assert [name for name, _ in stacked] == [LABELS[c] for c in PRECEDENCE if any(records[s]["computed"].get(c) for s in (0, 1, 2))]
    # Both charts took their points and redraws in animation frames, never twice in one (static/js/plot.js).
    calls = page.evaluate("window.__calls")
    assert [c for c in calls if c[1] == "chart" and c[0] == "extendTraces"] and [c for c in calls if c[1] == "causes" and c[0] == "react"]
    assert frames_per_chart(calls, "chart") == (0, 0) and frames_per_chart(calls, "causes") == (0, 0)

    # A request that bypasses the proxy: the server caches 4 blocks the twin never sees.
    httpx.post(emu + "/v1/completions", json={"prompt": words("bypass", 64), "max_tokens": 1}).raise_for_status()
    proxied(url, words("p3x", 32))  # 2 more blocks on both
    expect(divergence).to_have_text("server holds 36 GPU blocks, twin 32: 4 blocks differ · they parted after request 3",
                                    timeout=15_000)
    expect(divergence).to_have_attribute("data-state", "differ")
    divergence.get_by_role("link", name="request 3").click()
    expect(page.locator("#watch-emu-req-3")).to_be_in_viewport()
    page.screenshot(path=str(artifacts / "watch-view.png"), full_page=True)


@pytest.mark.browser
def test_without_upstreams_the_panel_says_how_to_start_one(page: Page, live_server: str) -> None:
    page.goto(live_server + "/live")
    expect(page.locator(".watch-none")).to_contain_text("kvscope serve --upstream", timeout=15_000)


@pytest.mark.browser
def test_the_bars_order_prefixes_largest_first_or_as_the_twin_would_evict_them(
    page: Page, live_server_factory: Serve, artifacts: Path,
) -> None:
    live = f"tcp://127.0.0.1:{free_port()}"
    with emulator("--kv-events", live, "--speed", "50", "--gpu-tokens", "1024") as emu, \
            live_server_factory("--upstream", f"emu={emu}", "--kv-events", f"emu={live}") as url:
        page.goto(url + "/live")
        page.wait_for_function("() => window.Plotly && window.htmx")
        view = page.locator("#watch-emu")
        # A (240 tokens, 15 blocks), B (160, 10), C (80, 5), then A again: a GPU hit on all of A.
        for i, (tag, n) in enumerate((("a", 240), ("b", 160), ("c", 80), ("a", 240))):
            proxied(url, words(tag, n))
            expect(page.locator(f"#watch-emu-req-{i}")).to_be_attached(timeout=15_000)  # seq from 0
        gpu = view.locator('.watch-tier[data-tier="gpu"]')
        expect(gpu.locator(".watch-tier-label")).to_have_text("GPU: 480 of 1,008 tokens in 3 prefixes", timeout=15_000)

        def tokens_in_bar_order(expected: list[int]) -> list[int]:
            deadline = time.monotonic() + 15
            while (got := [int(t) for t in gpu.locator(".watch-seg").evaluate_all(
                    "segs => segs.map(s => s.dataset.tokens)")]) != expected and time.monotonic() < deadline:
                time.sleep(0.1)
            return got

        # Largest first: A, B, C.
        assert tokens_in_bar_order([240, 160, 80]) == [240, 160, 80]
        # The twin's LRU order (vLLM's free queue: a finished request's blocks go to the back, so the front holds
        # those used longest ago): after A, B, C the order is A, B, C; the second A takes A's blocks out as a hit
        # and puts them back at the back. Next to be evicted first: B, C, A.
        view.get_by_label("LRU order as the twin knows it").check()
        assert tokens_in_bar_order([160, 80, 240]) == [160, 80, 240]
        page.screenshot(path=str(artifacts / "watch-view-lru.png"), full_page=True)
        # A new prompt D (48 tokens, 3 blocks) is now the most recent; the order follows the next occupancy.
        proxied(url, words("d", 48))
        assert tokens_in_bar_order([160, 80, 240, 48]) == [160, 80, 240, 48]
        view.get_by_label("largest first").check()
        assert tokens_in_bar_order([240, 160, 80, 48]) == [240, 160, 80, 48]
        page.goto("about:blank")  # leave before the server stops, so its stream is not cut under the page


@pytest.mark.browser
def test_on_a_phone_each_proxied_request_is_one_line(page: Page, watched: tuple[str, str]) -> None:
    """At 390 px the recent-requests table squeezed its last column ("1 for the last token, 159 first seen") into a
    word per line, each row four lines tall. Each cell is one line; the table scrolls in its box, the page does not."""
    _, url = watched
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(url + "/live")
    page.wait_for_function("() => window.Plotly && window.htmx")
    seen = requests_seen(url)
    proxied(url, words("phone", 160))
    expect(page.locator(f"#watch-emu-req-{seen}")).to_be_attached(timeout=15_000)
    expect(page.locator(f"#watch-emu-req-{seen} td").nth(6)).not_to_be_empty(timeout=15_000)
    wrapped = page.evaluate(
        """[...document.querySelectorAll('#watch-emu .watch-requests tbody td')].filter(td => { const r = document.createRange();
             r.selectNodeContents(td); return new Set([...r.getClientRects()].map(c => Math.round(c.top))).size > 1; })
             .map(td => td.textContent)"""
    )
    assert wrapped == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_an_upstreams_badge_and_chart_share_its_colour(page: Page, watched: tuple[str, str]) -> None:
    """The badge took the gpu+cpu blue and the chart the gpu vermillion, whatever the upstream: an upstream is a server
    with its own configuration, coloured as a live target is (static/js/palette.js runIndex: by its name when it names a
    configuration, else by its place in the list), the same on its badge and its chart."""
    emu, url = watched
    page.goto(url + "/live")
    page.wait_for_function("() => window.Plotly && window.htmx")
    proxied(url, words("colour", 32))
    expect(page.locator("#watch-emu [data-role=chart] .main-svg").first).to_be_attached(timeout=15_000)
    colours = page.evaluate(
        """() => { const ctx = document.createElement("canvas").getContext("2d");
             const hex = (c) => { ctx.fillStyle = c; return ctx.fillStyle; };
             const view = document.getElementById("watch-emu"), chart = view.querySelector("[data-role=chart]");
             return { badge: hex(getComputedStyle(view.querySelector(".watch-badge")).borderLeftColor),
                      chart: [...chart.data].map((t) => hex(t.line.color)),
                      first: hex(window.kvscope.palette.run(0)) }; }"""
    )
    # "emu" names no configuration and is the first upstream listed: the first run colour, on the badge and both series.
    assert colours["chart"] == [colours["first"], colours["first"]] and colours["badge"] == colours["first"], colours
