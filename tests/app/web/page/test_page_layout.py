"""The dashboard's layout at the three sizes its users bring (desktop, small laptop, phone), in headless Chromium.

- The playback bar (Step, Play, Pause, Speed and the status line) stays in view beside the lanes after Run: with the
  lanes scrolled into view and with the page scrolled to its end.
- On a phone (390x844) the document is no wider than the window: wide tables scroll inside their own box and the
  charts fit their panel.
- On a phone only the playback bar's status keeps to one cut line: every other panel's status line is read whole, and
  the page stays within the window after each panel (Run, replay, measurement upload, advisor) has been used.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from live_servers import run_kvscope
from page_tour import live_app, open_view, run_seed_lab, seed_file, use_every_panel  # noqa: F401 (fixtures)
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"
SIZES = [(1440, 900), (1024, 768), (390, 844)]
PLAYBACK = ["button[data-action=step]", "button[data-action=play]", "button[data-action=pause]", "#speed", "#player-status"]


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


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_playback_bar_is_in_view_on_first_load(page: Page, live_server: str, width: int, height: int) -> None:
    # Before any scrolling the masthead sits above the sidebar (55 to 78 px tall on a desktop): the sidebar's height
    # must leave room for it, or Speed and the status line start below the window's foot.
    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    assert page.evaluate("scrollY") == 0
    for selector in PLAYBACK:
        expect(page.locator(selector)).to_be_in_viewport(ratio=1)


def test_phone_document_is_no_wider_than_the_window(page: Page, live_server: str) -> None:
    run_seed_lab(page, live_server, 390, 844)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # The per-pass table is wider than a phone (eight columns and more): it scrolls inside its own box.
    wrap = page.locator(".panel-table .table-wrap")
    assert wrap.evaluate("w => w.scrollWidth > w.clientWidth")
    assert wrap.evaluate("w => getComputedStyle(w).overflowX") == "auto"
    # Every table on the page (runs, replay, analysis, ...) ends inside the window: it or its box scrolls.
    overflowing = page.evaluate(
        """[...document.querySelectorAll('table')].filter(t => t.offsetParent !== null)
             .map(t => t.closest('.table-wrap') ?? t).filter(box => box.getBoundingClientRect().right > innerWidth + 0.5)
             .map(box => box.outerHTML.slice(0, 80))"""
    )
    assert overflowing == []
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


# Per state on a phone: the document's width; every visible table (or its scrolling box) that ends past the window; and
# per drawn chart, whether it ends past its panel, its legend overlaps an axis title, or a label is cut at its edges.
PHONE_STATE = """() => {
  const box = (e) => e ? e.getBoundingClientRect() : null;
  const meet = (a, b) => a && b && a.width > 0 && b.width > 0 && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  const tables = [...document.querySelectorAll('table')].filter(t => t.offsetParent !== null)
    .map(t => t.closest('.table-wrap') ?? t).filter(b => b.getBoundingClientRect().right > innerWidth + 0.5)
    .map(b => b.outerHTML.slice(0, 80));
  const charts = [...document.querySelectorAll('.js-plotly-plot')].filter(c => c.offsetParent !== null).flatMap(c => {
    const svg = box(c.querySelector('svg.main-svg')), panel = box(c.closest('.panel, section'));
    const legend = box(c.querySelector('.legend'));
    const cut = [...c.querySelectorAll('.legendtext, .g-xtitle, .g-ytitle, .xtick text, .ytick text')]
      .map(box).filter(t => t.width > 0 && (t.left < svg.left - 1 || t.right > svg.right + 1));
    const wrong = [];
    if (svg.right > panel.right + 0.5) wrong.push('past its panel');
    if (meet(legend, box(c.querySelector('.g-xtitle'))) || meet(legend, box(c.querySelector('.g-ytitle')))) wrong.push('legend over an axis title');
    if (cut.length) wrong.push(`${cut.length} labels cut`);
    return wrong.map(w => `${c.id}: ${w}`);
  });
  return {width: document.documentElement.scrollWidth, tables, charts};
}"""


def test_phone_layout_holds_with_every_panel_used(page: Page, live_app: str, seed_file: Path) -> None:
    """At 390x844, after Run, replay, a measurement beside its prediction, calibration, the curves, the what-if, the
    advisor, a live run, a fleet served, two runs compared and a file imported: no sideways scroll, no table or chart past the window,
    no legend over an axis title."""
    found: dict[str, dict] = {}
    drawn = "[...document.querySelectorAll('.js-plotly-plot')].filter(c => c.querySelector('.main-svg')).map(c => c.id)"
    use_every_panel(page, live_app, seed_file, 390, 844,
                    lambda state: found.update({state: {**page.evaluate(PHONE_STATE), "drawn": page.evaluate(drawn)}}))
    assert len(found) == 9, found
    wrong = {state: f for state, f in found.items() if f["width"] > 390 or f["tables"] or f["charts"]}
    assert wrong == {}
    # The charts were there to be checked: the TTFT chart after Run (in Simulate), the routers' TTFT chart (in Fleet)
    # and the comparison of two runs at the end (in Runs).
    assert "ttft-chart" in found["run"]["drawn"] and "runs-compare-chart" in found["file imported"]["drawn"]
    assert "fleet-ttft-chart" in found["fleet served"]["drawn"]


# How many lines the playback bar's status is high.
PLAYBACK_LINES = "(s => (s.clientHeight - parseFloat(getComputedStyle(s).paddingTop) * 2) / parseFloat(getComputedStyle(s).lineHeight))(document.getElementById('player-status'))"
# Every status line on the page but the playback bar's (which is one line by design: it sits in a fixed bar).
STATUS_LINES = ".status:not(.playback .status), [role=status]:not(.playback [role=status]), .watch-status"
# Visible status lines whose text does not fit their box (scrollWidth beyond clientWidth: cut, e.g. with an ellipsis).
CUT_LINES = f"""() => [...document.querySelectorAll('{STATUS_LINES}')].filter(e => e.offsetParent !== null)
    .map(e => [e.id || e.className, e.scrollWidth, e.clientWidth, e.textContent.trim()])"""


def test_phone_status_lines_are_whole_after_each_panel_is_used(page: Page, live_server: str, tmp_path) -> None:
    measurements = tmp_path / "seed.csv"
    assert run_kvscope(["simulate", "--out", str(measurements)]).returncode == 0
    seen: set[str] = set()

    def check(after: str) -> None:
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, after
        lines = page.evaluate(CUT_LINES)
        cut = [line for line in lines if line[1] > line[2]]
        assert cut == [], (after, cut)
        seen.update(line[3][:40] for line in lines)

    run_seed_lab(page, live_server, 390, 844)
    check("Run")
    playback_lines = page.evaluate(PLAYBACK_LINES)  # read in Simulate, the one view with the playback bar
    open_view(page, "replay")
    page.click("#replay-form button[type=submit]")  # the bundled trace at the panel's default tiers
    page.wait_for_selector("#replay[data-state=done]", timeout=60_000)
    expect(page.locator("#replay-status")).to_contain_text("Replayed")
    check("replay")
    open_view(page, "plan")
    page.set_input_files("#measure-file", str(measurements))
    page.click("#measure-form button[type=submit]")
    # 30 requests x 2 configurations in the file: a status line longer than a phone's width, so it must wrap.
    expect(page.locator("#measure-result .status")).to_contain_text("60 requests in 2 configurations")
    check("measurement upload")
    page.fill("#advise-points", "3")
    page.click("#advise-form button[type=submit]")
    expect(page.locator("#advise-table tbody tr").first).to_be_attached(timeout=60_000)
    check("advisor")
    # The checks saw the long lines that a one-line style would cut on a phone, and they were whole.
    assert any(text.startswith("Replayed") for text in seen), seen
    assert any(text.startswith("60 requests") for text in seen), seen
    # The playback bar stays compact: its own status is two lines high, whatever it says.
    assert playback_lines == pytest.approx(2, abs=0.05), playback_lines


def test_phone_playback_status_is_read_whole(page: Page, live_server: str) -> None:
    """On a phone the bar's status was one line cut with "…": "Done: 30 requests in every configuration. Play repla…".
    It has two lines, and what it says fits them: after Run, and paused mid-run with the request's pass and document."""
    run_seed_lab(page, live_server, 390, 844)
    status = page.locator("#player-status")
    whole = "(s => s.scrollHeight <= s.clientHeight && s.scrollWidth <= s.clientWidth)(document.getElementById('player-status'))"
    expect(status).to_have_text("Done: 30 requests in every configuration. Play replays it.")
    assert page.evaluate(whole)
    page.select_option("#speed", "1")
    page.click("button[data-action=play]")
    expect(status).to_contain_text("(2 of 30)", timeout=10_000)
    page.click("button[data-action=pause]")
    expect(status).to_contain_text("Paused. Request")
    assert page.evaluate(whole), status.text_content()
    # The lanes still end above the bar at the page's end: the page leaves room for its two lines.
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    last = page.locator("main.layout > :last-child").bounding_box()
    playback = page.locator("#playback").bounding_box()
    assert last is not None and playback is not None and last["y"] + last["height"] <= playback["y"] + 0.5, (last, playback)


def test_why_card_says_what_the_bars_show(page: Page, live_server: str) -> None:
    """The seed lab (tests/test_seed.py): 10 documents of 5,024 prompt tokens, a GPU of 21,504 tokens (4.28 prompts).
    Request 11 (doc 1, pass 2; seq from 0) needs 5,024 tokens: it evicts the last 1,408 tokens of doc 6 (its head) and
    3,616 of doc 7's tail (1,408 + 3,616 = 5,024), the least recently used, while request 12 asks for doc 2. So the card must
    not say that the tile leaving is always the next one asked for."""
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    for applied in range(1, 13):  # one Step at a time: each waits for its request to be applied
        page.click("button[data-action=step]")
        expect(page.locator("#player-status")).to_have_attribute("data-applied", str(applied))
    line = page.locator('#event-log li[data-run="gpu"][data-seq="11"]')  # seq counts from 0
    expect(line).to_contain_text("req 11 · pass 2 · doc 1")
    expect(line).to_contain_text("doc 7 tail, 3,616 tokens")
    card = page.locator(".fact").first
    expect(card).not_to_contain_text("always the next one asked for")
    expect(card).to_contain_text("least recently used")


def _luminance(rgb: str) -> float:
    """WCAG relative luminance of a computed colour "rgb(r, g, b)"."""
    channels = [int(v) / 255 for v in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3]]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_one_palette_for_charts_and_badges(page: Page, live_server: str) -> None:
    run_seed_lab(page, live_server, 1440, 900)
    # Each configuration's line on the TTFT chart has the colour of its CSS variable (--run-0 gpu, --run-1 gpu+cpu).
    lines = page.evaluate("Object.fromEntries([...document.getElementById('ttft-chart').data].filter(t => t.meta === 'run').map(t => [t.name, t.line.color]))")
    css = page.evaluate("[0, 1].map(i => getComputedStyle(document.documentElement).getPropertyValue(`--run-${i}`).trim().toUpperCase())")
    assert {k: v.upper() for k, v in lines.items()} == {"gpu": css[0], "gpu+cpu": css[1]}
    # GPU hit, CPU load, disk load and computed are four different colours, none of them a configuration's.
    sources = page.evaluate("window.kvscope.palette.sources.map(s => window.kvscope.palette.source(s).colour.toUpperCase())")
    assert len(sources) == 4 and len(set(sources) | set(css)) == 6
    # White text on every configuration badge reads at 4.5:1 or more (WCAG AA for small text).
    for bg in page.evaluate("[...new Set([...document.querySelectorAll('.run-badge')].map(b => getComputedStyle(b).backgroundColor))]"):
        assert _contrast(bg, "rgb(255, 255, 255)") >= 4.5, bg
    # The focus ring is at least 3:1 on white (WCAG 1.4.11).
    page.focus("button[data-action=run]")
    page.keyboard.press("Tab")  # from the keyboard, so :focus-visible applies
    assert page.evaluate("document.activeElement.matches(':focus-visible') && getComputedStyle(document.activeElement).outlineStyle") == "solid"
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineColor")
    assert _contrast(ring, "rgb(255, 255, 255)") >= 3, ring


def test_skip_link_and_event_log_from_the_keyboard(page: Page, live_server: str) -> None:
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    # The first Tab reaches the skip link; Enter moves focus past the header and the scenario form to the run.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "run"
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    # The event log scrolls (30 requests x 2 configurations), so it is reachable by Tab and scrolls with the keys.
    log = page.locator("#event-log")
    assert log.evaluate("l => l.scrollHeight > l.clientHeight")
    log.focus()
    page.keyboard.press("End")
    page.wait_for_function("() => document.getElementById('event-log').scrollTop > 0")


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)], ids=["1440x900", "390x844"])
def test_cause_bars_are_named_without_overlap(page: Page, live_server: str, width: int, height: int) -> None:
    """Six bars (3 passes x 2 configurations) named "pass N · config": their names were rotated 30 degrees, overlapped
    each other on a phone and ran past the chart's right edge at 1440. Each name is level, apart from its neighbours and
    inside the chart."""
    run_seed_lab(page, live_server, width, height)
    page.wait_for_function("() => document.querySelectorAll('#causes-chart .xtick text').length === 6")
    boxes = page.evaluate("[...document.querySelectorAll('#causes-chart .xtick text')].map(t => t.getBoundingClientRect().toJSON())")
    svg = page.evaluate("document.querySelector('#causes-chart svg.main-svg').getBoundingClientRect().toJSON()")
    for i, a in enumerate(boxes):
        assert svg["left"] <= a["left"] and a["right"] <= svg["right"], (a, svg)
        assert a["height"] > a["width"] / 3 or a["width"] < 80, a  # not one long rotated line
        for b in boxes[i + 1:]:
            assert a["right"] <= b["left"] or b["right"] <= a["left"] or a["bottom"] <= b["top"] or b["bottom"] <= a["top"], (a, b)


def test_phone_legends_are_compact_and_whole(page: Page, live_server: str) -> None:
    """At 390 px Plotly gave every legend entry the width of the longest, one per row: the TTFT chart's six entries
    (gpu, gpu+cpu and four prompt sources) took six rows above a plot of about the same height. They go two to a row
    where the longest fits half the width, and no entry is cut at the chart's edge (the cause chart's "past the last
    full chunk" does not fit half, so that legend keeps one entry per row)."""
    run_seed_lab(page, live_server, 390, 844)
    for chart in ("#ttft-chart", "#causes-chart"):
        right = page.evaluate(f"document.querySelector('{chart} svg.main-svg').getBoundingClientRect().right")
        texts = page.evaluate(f"[...document.querySelectorAll('{chart} .legend .legendtext')].map(t => t.getBoundingClientRect().right)")
        assert texts and max(texts) <= right, (chart, texts, right)
    rows = page.evaluate("new Set([...document.querySelectorAll('#ttft-chart .legend .traces')].map(t => Math.round(t.getBoundingClientRect().top))).size")
    assert rows <= 3, rows


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)], ids=["1440x900", "390x844"])
def test_run_does_not_push_the_panels_down(page: Page, live_server: str, width: int, height: int) -> None:
    """The "Link to this scenario" line appeared only after Run and pushed everything under it down by a line. Its
    place is held from the first load: the facts and the lanes start at the same height before and after Run."""
    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    where = "() => [document.querySelector('#run-view .facts').getBoundingClientRect().top + scrollY, document.querySelector('.lane').getBoundingClientRect().top + scrollY]"
    before = page.evaluate(where)
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    expect(page.locator("[data-role=scenario-link]")).to_be_visible()
    assert page.evaluate(where) == before


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_event_log_fits_its_box(page: Page, live_server: str, width: int, height: int) -> None:
    """At 1024 px the log's column beside the TTFT chart is 226 px wide: a request's line (badge, words, TTFT side by
    side) needed 257, ran past the box's right edge (its TTFT cut) and left its words 95 px, a word or two per line.
    Every line fits the box, and a request's words have most of its width."""
    run_seed_lab(page, live_server, width, height)
    log = page.evaluate(
        """(() => { const l = document.getElementById('event-log'), text = l.querySelector('li[data-seq] .log-text');
             return [l.scrollWidth, l.clientWidth, text.getBoundingClientRect().width]; })()"""
    )
    assert log[0] <= log[1] and log[2] >= 0.6 * log[1], log


@pytest.mark.parametrize(("width", "height"), SIZES[:2], ids=[f"{w}x{h}" for w, h in SIZES[:2]])
def test_event_log_fills_its_panel_beside_the_ttft_chart(page: Page, live_server: str, artifacts: Path, width: int, height: int) -> None:
    # At 1024 px and wider the log's panel stands beside the TTFT panel, stretched to its height: the log's box ends at
    # the panel's content edge (its bottom less border and padding), not some 340 px below its heading.
    run_seed_lab(page, live_server, width, height)
    page.locator(".panels").screenshot(path=str(artifacts / f"event-log-{width}x{height}.png"))
    box = page.evaluate(
        """() => {
             const panel = document.querySelector('.panel-log'), log = document.getElementById('event-log');
             const style = getComputedStyle(panel), p = panel.getBoundingClientRect();
             const contentBottom = p.bottom - parseFloat(style.borderBottomWidth) - parseFloat(style.paddingBottom);
             return {logBottom: log.getBoundingClientRect().bottom, contentBottom, panelHeight: p.height,
                     chartHeight: document.querySelector('.panel-chart').getBoundingClientRect().height,
                     scrolls: log.scrollHeight > log.clientHeight};
           }"""
    )
    assert abs(box["contentBottom"] - box["logBottom"]) <= 3, box
    # The log's 120 lines (60 requests, two configurations) scroll inside it: they do not stretch the row past the chart.
    assert box["scrolls"], box
    assert abs(box["panelHeight"] - box["chartHeight"]) <= 1, box
