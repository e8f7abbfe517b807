"""Chart updates from a stream reach Plotly at most once per chart per animation frame (static/js/plot.js), in headless
Chromium with the seed lab at full speed: every extendTraces and every redraw of the causes chart runs inside an
animation frame, no chart is redrawn twice in one frame, and 60 TTFT points take fewer calls than points."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page

from page_checks import WRAP

pytestmark = pytest.mark.browser


def test_stream_updates_redraw_each_chart_at_most_once_per_frame(page: Page, live_server: str) -> None:
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.evaluate(WRAP)
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector("#player-status[data-state=done]", timeout=60_000)
    page.wait_for_timeout(200)
    calls = page.evaluate("window.__calls")
    points = page.evaluate("[...document.getElementById('ttft-chart').data].filter(t => t.meta === 'run').reduce((n, t) => n + t.x.length, 0)")
    assert points == 60  # 30 requests x 2 configurations: all drawn
    extends = [c for c in calls if c[0] == "extendTraces"]
    assert extends and all(c[1] == "ttft-chart" for c in extends)
    # In frames, or drained once at the end (kvscope:finished) outside one; never one call per point.
    assert len(extends) < points
    in_frames = [(c[1], c[2]) for c in calls if c[0] in ("extendTraces", "react") and c[2] is not None]
    assert len(in_frames) == len(set(in_frames)), "a chart redrawn twice in one frame"
    # The causes chart: a bar per pass and configuration arrives with each of the 6 pass events (3 passes x 2). After
    # its reset (outside a frame) every redraw is in a frame, except the last, drained when the run finishes; at most
    # one redraw per pass event, fewer when passes arrive in the same frame.
    causes = [c for c in calls if c[1] == "causes-chart" and c[0] == "react"]
    assert 2 <= len(causes) <= 1 + 6
    assert all(c[2] is not None for c in causes[1:-1])


# As WRAP, and each call made slow (a 30 ms busy wait, as a large chart's redraw takes on a loaded machine), so that
# one chart's redraw alone uses up a frame's budget (plot.js's FRAME_BUDGET_MS, 8 ms).
SLOW = WRAP.replace("return f.call(this, div, ...rest);",
                    "const until = performance.now() + 30; while (performance.now() < until) {} return f.call(this, div, ...rest);")


def test_one_frame_redraws_one_slow_chart_and_done_waits_for_the_last(page: Page, live_server: str) -> None:
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.evaluate(SLOW)
    # The TTFT chart's points at the moment the status first says done (recorded in the same task that says it).
    page.evaluate("""() => { window.__atDone = null; const s = document.getElementById('player-status');
      new MutationObserver(() => { if (s.dataset.state === 'done' && window.__atDone === null) window.__atDone =
        [...document.getElementById('ttft-chart').data].filter(t => t.meta === 'run').reduce((n, t) => n + t.x.length, 0); })
        .observe(s, { attributes: true, attributeFilter: ['data-state'] }); }""")
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector("#player-status[data-state=done]", timeout=60_000)
    calls = page.evaluate("window.__calls")
    # Both charts are redrawn during the run, but never two of them in one frame: the second waits for the next.
    charts_per_frame: dict[float, set[str]] = {}
    for _, chart, frame in calls:
        if frame is not None:
            charts_per_frame.setdefault(frame, set()).add(chart)
    assert {c for charts in charts_per_frame.values() for c in charts} >= {"ttft-chart", "causes-chart"}
    assert all(len(charts) == 1 for charts in charts_per_frame.values()), charts_per_frame
    # "Done" only once the last points are drawn: 30 requests x 2 configurations, with no wait after it.
    assert page.evaluate("window.__atDone") == 60
