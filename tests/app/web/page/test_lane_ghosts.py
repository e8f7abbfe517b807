"""Eviction ghosts on the lanes, in headless Chromium: under each tier's bar the last three evictions stay in view,
each naming the request that caused it, and a GPU eviction whose document the CPU tier still holds is joined to that
CPU tile. The expected ghosts are worked out here from the events the player hands the panels (kvscope:event)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"
GHOSTS = 3


def run_capturing(page: Page, url: str) -> list[dict[str, Any]]:
    page.goto(url + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.evaluate("window.seen = []; document.addEventListener('kvscope:event', (e) => window.seen.push(e.detail.event))")
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    return page.evaluate("window.seen")


def expected_ghosts(events: list[dict[str, Any]], run: str, tier: str) -> list[dict[str, Any]]:
    """The last evictions of one tier: the parts of one document evicted by one request add up; newest first."""
    groups: dict[tuple[int, int], int] = {}
    for e in events:
        if e["type"] == "evict" and e["run"] == run and e["tier"] == tier:
            groups[(e["seq"], e["doc"])] = groups.get((e["seq"], e["doc"]), 0) + e["tokens"]
    last = list(groups.items())[-GHOSTS:][::-1]
    return [{"seq": seq, "doc": doc, "tokens": tokens} for (seq, doc), tokens in last]


def shown(page: Page, run: str, tier: str) -> list[dict[str, Any]]:
    return page.evaluate(
        """([run, tier]) => [...document.querySelectorAll(`.lane[data-run="${run}"] .tier[data-tier="${tier}"] .ghost`)]
            .map(g => ({seq: Number(g.dataset.seq), doc: Number(g.dataset.doc), tokens: Number(g.dataset.tokens), text: g.textContent,
                        copy: g.dataset.cpuCopy === "true"}))""",
        [run, tier],
    )


def test_the_last_evictions_stay_as_ghosts_joined_to_their_cpu_copy(page: Page, live_server: str) -> None:
    events = run_capturing(page, live_server)
    runs = [e["run"] for e in events if e["type"] == "request"]
    assert set(runs) == {"gpu", "gpu+cpu"}  # the seed lab's two configurations
    for run in ("gpu", "gpu+cpu"):
        want = expected_ghosts(events, run, "gpu")
        assert want, f"the seed lab evicts from the GPU of {run}"  # 21,520 tokens hold 4.3 of its 10 documents
        got = shown(page, run, "gpu")
        assert [{k: g[k] for k in ("seq", "doc", "tokens")} for g in got] == want
        # The ghost names the request that evicted it by its seq, as the CLI and the JSON do.
        for g in got:
            assert g["text"].startswith(f"{g['doc']} ← req {g['seq']}")
    # Without a CPU tier nothing is kept elsewhere: no ghost says "in CPU", no line is drawn.
    assert not any("in CPU" in g["text"] for g in shown(page, "gpu", "gpu"))
    expect(page.locator('.lane[data-run="gpu"] svg.relations line')).to_have_count(0)
    # With one: a ghost is joined to the CPU when the CPU tier's last occupancy still lists its document.
    cpu_now = [e for e in events if e["type"] == "occupancy" and e["run"] == "gpu+cpu" and e["tier"] == "cpu"][-1]["docs"]
    kept = [g["doc"] for g in expected_ghosts(events, "gpu+cpu", "gpu") if cpu_now.get(str(g["doc"]), 0) > 0]
    assert kept, "in the seed lab the CPU tier (1.5 GB) holds every document the GPU evicts"
    lines = page.locator('.lane[data-run="gpu+cpu"] svg.relations line')
    expect(lines).to_have_count(len(kept))
    assert sorted(int(d) for d in lines.evaluate_all("ls => ls.map(l => l.dataset.doc)")) == sorted(kept)
    assert [g["doc"] for g in shown(page, "gpu+cpu", "gpu") if g["copy"]] == kept
    # Each line runs from its ghost down to the CPU tier's labels, ending right above the CPU tile of the same document.
    ends = page.evaluate(
        """() => { const lane = document.querySelector('.lane[data-run="gpu+cpu"]'); const box = lane.getBoundingClientRect();
            const head = lane.querySelector('.tier[data-tier="cpu"] .tier-head').getBoundingClientRect();
            return [...lane.querySelectorAll('svg.relations line')].map(l => {
              const tile = lane.querySelector(`.tier[data-tier="cpu"] .tile[data-doc="${l.dataset.doc}"]`).getBoundingClientRect();
              return [Number(l.getAttribute('x2')) + box.left - tile.left, tile.width, Number(l.getAttribute('y2')) + box.top - head.top]; }); }"""
    )
    for x_in_tile, width, y_off in ends:
        assert 0 <= x_in_tile <= width and abs(y_off) < 1


def _label_pixels(page: Page, lane: str) -> list[bytes]:
    """Screenshots of each word of the CPU tier's head (its name, fill and fit) in one lane."""
    labels = page.locator(f'.lane[data-run="{lane}"] .tier[data-tier="cpu"] .tier-head > span')
    assert labels.count() == 3
    return [labels.nth(i).screenshot(animations="disabled") for i in range(labels.count())]


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (1024, 768)], ids=["1440x900", "1024x768"])
def test_the_lines_to_the_cpu_never_draw_over_its_labels(page: Page, live_server: str, width: int, height: int) -> None:
    """The seed lab's end: three GPU ghosts of gpu+cpu, all still in CPU, whose lines run down to CPU tiles across the
    CPU tier's head (its name, "48,640 / 56,173 tokens" and "256-token chunks · holds 11.2 prompts"). Each label must
    look the same with the lines drawn and with them hidden: a line may pass behind a label, never through its words."""
    page.set_viewport_size({"width": width, "height": height})
    run_capturing(page, live_server)
    lines = page.locator('.lane[data-run="gpu+cpu"] svg.relations line')
    expect(lines).to_have_count(3)
    page.locator('.lane[data-run="gpu+cpu"]').scroll_into_view_if_needed()
    # Each line is read whole: it ends at the top edge of the CPU's labels (drawn on to the tile it ran behind them and
    # showed as two short dashes), right above the CPU tile it points at, which is outlined; and it is no short dash.
    ends = page.evaluate(
        """() => { const lane = document.querySelector('.lane[data-run="gpu+cpu"]'); const box = lane.getBoundingClientRect();
            const head = lane.querySelector('.tier[data-tier="cpu"] .tier-head').getBoundingClientRect();
            return [...lane.querySelectorAll('svg.relations line')].map(l => {
              const [x1, y1, x2, y2] = ['x1', 'y1', 'x2', 'y2'].map(a => Number(l.getAttribute(a)));
              const tile = lane.querySelector(`.tier[data-tier="cpu"] .tile[data-doc="${l.dataset.doc}"]`).getBoundingClientRect();
              return {bottom: y2 + box.top - head.top, x: x2 + box.left, tile: [tile.left, tile.right], length: Math.hypot(x2 - x1, y2 - y1),
                      outlined: getComputedStyle(lane.querySelector(`.tier[data-tier="cpu"] .tile[data-doc="${l.dataset.doc}"]`)).outlineStyle}; }); }"""
    )
    for end in ends:
        assert abs(end["bottom"]) <= 0.5 and end["tile"][0] <= end["x"] <= end["tile"][1], end
        assert end["outlined"] == "solid" and end["length"] >= 8, end
    drawn = _label_pixels(page, "gpu+cpu")
    page.evaluate("""document.querySelector('.lane[data-run="gpu+cpu"] svg.relations').style.visibility = 'hidden'""")
    assert _label_pixels(page, "gpu+cpu") == drawn


def test_on_a_phone_every_ghost_and_total_is_whole(page: Page, live_server: str) -> None:
    """At 390 px a lane is about 300 px wide: three ghosts ("5 ← req 30 · in CPU" is about 120 px) do not fit one row, and
    four totals side by side leave about 70 px each, too few for "3,438 ms". Ghosts wrap onto a second row, totals go
    two by two: nothing is cut at the strip's edge, and each number stays on one line."""
    page.set_viewport_size({"width": 390, "height": 844})
    run_capturing(page, live_server)
    cut = page.evaluate(
        """[...document.querySelectorAll('.ghosts')].flatMap(strip => { const s = strip.getBoundingClientRect();
             return [...strip.children].filter(g => { const r = g.getBoundingClientRect(); return r.right > s.right + 0.5 || r.left < s.left - 0.5; })
               .map(g => g.textContent); })"""
    )
    assert cut == []
    assert page.locator('.lane[data-run="gpu+cpu"] .tier[data-tier="gpu"] .ghost').count() == GHOSTS
    wrapped = page.evaluate(
        """[...document.querySelectorAll('.lane-totals dd')].filter(dd => { const r = document.createRange(); r.selectNodeContents(dd);
             return new Set([...r.getClientRects()].map(c => Math.round(c.top))).size > 1; }).map(dd => dd.textContent)"""
    )
    assert wrapped == []
