"""The dashboard explains misses: the log line says the cause, a stacked bar per pass of computed tokens by cause,
and clicking a request explains it and marks the requests that evicted its tokens (seed lab, real Chromium).

Expected values come from tests/test_explain.py's derivations: every pass-2 request of the gpu run has 5,008
evicted tokens and 16 for the last token; doc 0's were evicted by requests 4 and 5 (their seq, from 0).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from test_page import DONE, open_dashboard

pytestmark = pytest.mark.browser


def test_log_chart_and_click_explain_the_misses(page: Page, live_server: str, artifacts: Path) -> None:
    open_dashboard(page, live_server)
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)

    line = page.locator('#event-log li[data-run="gpu"][data-seq="10"]')
    # Causes in words, by their labels (sim/explain/causes.py): "the last token" names a thing, so it takes "for".
    expect(line).to_contain_text("computed 5,024 tokens (16 for the last token, 5,008 evicted)")

    # One bar per pass and configuration: 3 passes x 2 runs; pass 2 of gpu is 50,080 evicted tokens.
    bars = page.evaluate(
        """() => Object.fromEntries(document.getElementById('causes-chart').data.map(t => [t.name,
             Object.fromEntries(t.x.map((x, i) => [x, t.y[i]]))]))"""
    )
    assert bars["evicted"]["pass 2 · gpu"] == 50_080
    assert bars["evicted"]["pass 2 · gpu+cpu"] == 0  # the CPU tier served every full chunk
    assert bars["past the last full chunk"]["pass 2 · gpu+cpu"] == 1_600  # 10 x 160
    assert len(bars["first seen"]) == 6
    expect(page.locator("#causes-chart .barlayer .point")).not_to_have_count(0)

    line.click()
    detail = page.locator("#explain-detail")
    expect(detail).to_be_visible()
    expect(detail).to_contain_text("5,008 tokens evicted from GPU by req 4, req 5")
    expect(detail).to_contain_text("16 tokens for the last token")
    # No code key of a cause ("last-token", "partial-chunk", ...) reaches the reader, in the log or the card.
    keys = re.compile(r"\b(partial-block|partial-chunk|last-token|first-seen|chain-broken|not-stored|not-asked)\b")
    assert not keys.search(page.inner_text("#event-log")), keys.findall(page.inner_text("#event-log"))[:3]
    assert not keys.search(detail.inner_text())
    # The requests that evicted them (seq 4 and 5) are marked; no other line is.
    marked = page.evaluate("[...document.querySelectorAll('#event-log li.evictor')].map(li => [li.dataset.run, li.dataset.seq])")
    assert sorted(marked) == [["gpu", "4"], ["gpu", "5"]]
    page.screenshot(path=str(artifacts / "dashboard-explain.png"), full_page=True)


def test_on_a_phone_a_log_line_reads_across_the_panel(page: Page, live_server: str) -> None:
    """At 390 px the log's words had about 150 px between the badge and the TTFT (a word or two per line); they take
    the line's whole width under them, and the badge, the words and the TTFT never overlap."""
    page.set_viewport_size({"width": 390, "height": 844})
    open_dashboard(page, live_server)
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    boxes = page.evaluate(
        """() => { const li = document.querySelector('#event-log li[data-seq]'); const r = (e) => e.getBoundingClientRect().toJSON();
             return {li: r(li), badge: r(li.querySelector('.run-badge')), text: r(li.querySelector('.log-text')), ttft: r(li.querySelector('.log-ttft'))}; }"""
    )
    assert boxes["text"]["width"] >= 0.9 * (boxes["li"]["width"] - 8), boxes
    for a, b in (("badge", "text"), ("badge", "ttft"), ("text", "ttft")):
        x, y = boxes[a], boxes[b]
        assert x["right"] <= y["left"] or y["right"] <= x["left"] or x["bottom"] <= y["top"] or y["bottom"] <= x["top"], (a, b, boxes)
