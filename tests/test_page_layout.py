"""The dashboard's layout at the three sizes its users bring (desktop, small laptop, phone), in headless Chromium.

- The playback bar (Step, Play, Pause, Speed and the status line) stays in view beside the lanes after Run: with the
  lanes scrolled into view and with the page scrolled to its end.
- On a phone (390x844) the document is no wider than the window: wide tables scroll inside their own box and the
  charts fit their panel.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"
SIZES = [(1440, 900), (1024, 768), (390, 844)]
PLAYBACK = ["button[data-action=step]", "button[data-action=play]", "button[data-action=pause]", "#speed", "#player-status"]


def run_seed_lab(page: Page, url: str, width: int, height: int) -> None:
    page.set_viewport_size({"width": width, "height": height})
    page.goto(url + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_playback_bar_stays_in_view_beside_the_lanes(page: Page, live_server: str, width: int, height: int) -> None:
    run_seed_lab(page, live_server, width, height)
    # Beside the lanes: scroll the second lane's GPU bar to the middle of the window; every control is wholly visible.
    page.evaluate("document.querySelectorAll('.lane .bar')[1].scrollIntoView({block: 'center'})")
    for selector in PLAYBACK:
        expect(page.locator(selector)).to_be_in_viewport(ratio=1)
    # The lanes' bars are not hidden under it (on a phone the bar is fixed to the window's foot).
    bar = page.locator(".lane .bar").nth(1).bounding_box()
    playback = page.locator("#playback").bounding_box()
    assert bar is not None and playback is not None
    overlaps = bar["x"] < playback["x"] + playback["width"] and playback["x"] < bar["x"] + bar["width"] and \
        bar["y"] < playback["y"] + playback["height"] and playback["y"] < bar["y"] + bar["height"]
    assert not overlaps, (bar, playback)
    # At the page's end too, and the controls still work from there: Play replays the run to its end.
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    for selector in PLAYBACK:
        expect(page.locator(selector)).to_be_in_viewport(ratio=1)
    page.click("button[data-action=play]")
    page.wait_for_selector(DONE, timeout=60_000)


def test_phone_document_is_no_wider_than_the_window(page: Page, live_server: str) -> None:
    run_seed_lab(page, live_server, 390, 844)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # The per-pass table is wider than a phone (eight columns and more): it scrolls inside its own box.
    wrap = page.locator(".panel-table .table-wrap")
    assert wrap.evaluate("w => w.scrollWidth > w.clientWidth")
    assert wrap.evaluate("w => getComputedStyle(w).overflowX") == "auto"
    # Each drawn chart fits inside its panel, and the TTFT chart's legend and x-axis title do not overlap.
    for chart in ("#ttft-chart", "#causes-chart"):
        widths = page.evaluate(
            f"""() => {{ const c = document.querySelector('{chart}'); const svg = c.querySelector('svg.main-svg');
                         return [svg.getBoundingClientRect().right, c.closest('.panel').getBoundingClientRect().right]; }}"""
        )
        assert widths[0] <= widths[1], (chart, widths)
    legend = page.locator("#ttft-chart .legend").bounding_box()
    xtitle = page.locator("#ttft-chart .g-xtitle").bounding_box()
    assert legend is not None and xtitle is not None
    assert legend["y"] + legend["height"] <= xtitle["y"] or xtitle["y"] + xtitle["height"] <= legend["y"], (legend, xtitle)
