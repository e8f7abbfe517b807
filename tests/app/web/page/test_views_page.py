"""The dashboard's views (app.web.views) in headless Chromium: each view's URL opens that view; the nav's links move
between views, and back and forward move back through them; the scenario sidebar is only where it is used; each view
at 1440x900 is as tall as its own panels; on a phone, Run brings the lanes into view under a playback bar of at most
80 px, with no control cut off."""

from __future__ import annotations

import pytest
from page_tour import run_to_end
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

# path -> (the view's name on <main data-view>, an element only that view has, whether it shows the sidebar)
VIEWS = {
    "/": ("simulate", "#run-view .panel-lanes", True),
    "/replay": ("replay", "#replay-form", False),
    "/plan": ("plan", "#measure-form", True),
    "/live": ("live", "#watch-area", False),
    "/fleet": ("fleet", "#fleet-form", False),
    "/runs": ("runs", "#runs-list-box", False),
}
# What only one view shows: each view's own areas, none of another's.
AREAS = ["#run", "#replay-area", "#analysis-area", "#live-area", "#watch-area", "#fleet-area", "#runs-area"]
OWN = {"/": {"#run"}, "/replay": {"#replay-area"}, "/plan": {"#analysis-area"}, "/live": {"#live-area", "#watch-area"},
       "/fleet": {"#fleet-area"}, "/runs": {"#runs-area"}}


def _ready(page: Page) -> None:
    page.wait_for_function("() => window.Plotly && window.htmx")


@pytest.mark.parametrize("path", list(VIEWS))
def test_each_views_url_opens_that_view(page: Page, live_server: str, path: str) -> None:
    name, own, sidebar = VIEWS[path]
    page.goto(live_server + path)
    _ready(page)
    assert page.get_attribute("main", "data-view") == name
    expect(page.locator(own)).to_be_visible()
    # The nav marks this view, and only it, as the current page.
    assert page.locator(".views-nav a[aria-current=page]").evaluate_all("as => as.map(a => a.getAttribute('href'))") == [path]
    assert {a for a in AREAS if page.locator(a).count()} == OWN[path]
    # The sidebar is there only in the views whose panels read its scenario (Simulate plays it, Plan's forms include
    # it); in Plan it has no playback bar, which only plays Simulate's run.
    assert page.locator("aside.sidebar").count() == (1 if sidebar else 0)
    if sidebar:
        expect(page.locator("#scenario-form")).to_be_visible()
        expect(page.locator("#playback")).to_be_visible() if name == "simulate" else expect(page.locator("#playback")).to_be_hidden()


def test_nav_links_back_and_forward_move_between_views(page: Page, live_server: str) -> None:
    page.goto(live_server + "/")
    _ready(page)
    page.fill("#f-docs", "7")  # the sidebar's scenario, edited in Simulate, is the one Plan reads
    for path in ["/plan", "/live", "/fleet", "/runs", "/replay"]:
        page.click(f".views-nav a[href='{path}']")
        page.wait_for_url(live_server + path)
        expect(page.locator("main")).to_have_attribute("data-view", VIEWS[path][0])
        if path == "/plan":
            expect(page.locator("#f-docs")).to_have_value("7")  # kept between the views that show it
            expect(page.locator("#measure-form")).to_be_visible()
    # Back through every view to the first page, which the browser (not htmx) had loaded; then forward again.
    for path in ["/runs", "/fleet", "/live", "/plan", "/"]:
        page.go_back()
        page.wait_for_url(live_server + path)
        expect(page.locator("main")).to_have_attribute("data-view", VIEWS[path][0])
        expect(page.locator(VIEWS[path][1])).to_be_visible()
    page.go_forward()
    page.wait_for_url(live_server + "/plan")
    expect(page.locator("main")).to_have_attribute("data-view", "plan")
    expect(page.locator("#measure-form")).to_be_visible()
    # The boosted link and a link opened anew show the same view: the page's main is the same list of areas.
    boosted = page.locator("main > *").evaluate_all("es => es.map(e => e.id)")
    page.goto(live_server + "/plan")
    _ready(page)
    assert page.locator("main > *").evaluate_all("es => es.map(e => e.id)") == boosted


@pytest.mark.parametrize("path", ["/replay", "/plan", "/live", "/fleet", "/runs"])
def test_a_view_at_1440x900_is_as_tall_as_its_own_panels(page: Page, live_server: str, path: str) -> None:
    # The one long page was 5,600 px tall at 1440x900, every view's panels under one another. A view is now no taller
    # than its own areas, from the top of the page: its document ends where its last area (or the sidebar) ends, plus
    # the layout's bottom padding (40 px).
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server + path)
    _ready(page)
    expect(page.locator(VIEWS[path][1])).to_be_visible()
    page.wait_for_timeout(300)
    ends = page.evaluate("Math.max(...[...document.querySelectorAll('main > *')].map(e => e.getBoundingClientRect().bottom + scrollY))")
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height <= max(900, ends + 40 + 1), (height, ends)


def test_simulate_at_1440x900_shows_the_lanes_in_the_first_window(page: Page, live_server: str) -> None:
    # Simulate's main result is the lanes: their first bar starts inside the first window, under no other view's panel.
    run_to_end(page, live_server, "/", (1440, 900))
    page.evaluate("window.scrollTo(0, 0)")
    bar = page.locator(".lane .bar").first.bounding_box()
    assert bar is not None and bar["y"] + bar["height"] <= 900, bar


def test_the_labs_measured_columns_are_in_view_at_1440x900(page: Page, live_server: str) -> None:
    # The seed lab's per-pass table has 15 columns (configuration, pass, 4 TTFT figures, GPU and CPU hit tokens and
    # hit rate, computed, speed-up, and the lab's 3 measured): 1,270 px in a 1,048 px box, the measured ones past its
    # right edge. They are in the box now, without scrolling it: the box does not scroll, and each measured header
    # ends inside it.
    run_to_end(page, live_server, "/", (1440, 900))
    wrap = page.locator(".panel-table .table-wrap")
    assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth"), wrap.evaluate("w => [w.scrollWidth, w.clientWidth]")
    box = wrap.bounding_box()
    headers = page.locator("#results-table thead th.measured")
    expect(headers).to_have_count(3)
    for i in range(3):
        cell = headers.nth(i).bounding_box()
        assert box is not None and cell is not None and cell["x"] + cell["width"] <= box["x"] + box["width"] + 0.5, (i, cell, box)
    # A hit rate and its GiB are two lines, the GiB whole on the second: "42.5% ·" over "0.571 GiB", never "0.571" over
    # "GiB" (gpu+cpu's pass 3 hits 21,376 GPU tokens of 50,240: 42.5%).
    share = page.locator('#results-table tr[data-run="gpu+cpu"][data-pass="3"] [data-col=gpu-hit-share]')
    expect(share).to_have_text("42.5% · 0.571\u00a0GiB")
    lines = share.evaluate("""td => { const r = document.createRange(); r.selectNodeContents(td);
        return new Set([...r.getClientRects()].map(c => Math.round(c.top))).size; }""")
    assert lines == 2


def test_on_a_phone_run_brings_the_lanes_into_view_under_a_short_playback_bar(page: Page, live_server: str) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(live_server + "/")
    _ready(page)
    # The playback bar is fixed to the window's foot and at most 80 px tall; each control in it is whole, in the window.
    playback = page.locator("#playback").bounding_box()
    assert playback is not None and playback["height"] <= 80, playback
    for control in ["button[data-action=run]", "button[data-action=step]", "button[data-action=play]",
                    "button[data-action=pause]", "#speed", "#player-status"]:
        expect(page.locator(control)).to_be_in_viewport(ratio=1)
    # The speed menu shows its whole choice (its text is no wider than the menu leaves for it).
    for value in ["1", "2", "5", "15", "max"]:
        page.select_option("#speed", value)
        assert page.evaluate("""(s => { const probe = document.createElement('span');
            probe.style.cssText = `font: ${getComputedStyle(s).font}; position: absolute; white-space: nowrap`;
            probe.textContent = s.selectedOptions[0].textContent; document.body.append(probe);
            const fits = probe.getBoundingClientRect().width <= s.clientWidth - 20; probe.remove(); return fits; })(document.getElementById('speed'))"""), value
    page.select_option("#speed", "max")
    assert page.evaluate("scrollY") == 0
    page.click("button[data-action=run]")
    # The form is above the lanes on a phone: after Run the lanes' panel is scrolled to, its first bar in the window
    # above the playback bar.
    lanes = page.locator(".panel-lanes")
    expect(lanes).to_be_in_viewport()
    page.wait_for_selector("#player-status[data-state=done]", timeout=60_000)
    bar = page.locator(".lane .bar").first.bounding_box()
    playback = page.locator("#playback").bounding_box()
    assert bar is not None and playback is not None
    assert 0 <= bar["y"] and bar["y"] + bar["height"] <= playback["y"], (bar, playback)
    # The per-pass table is wider than a phone: its box scrolls, and a line above it says so.
    wrap = page.locator(".panel-table .table-wrap")
    assert wrap.evaluate("w => w.scrollWidth > w.clientWidth")
    expect(wrap).to_have_attribute("data-scrolls", "")
    assert "Scroll sideways" in wrap.evaluate("w => getComputedStyle(w, '::before').content")


@pytest.mark.parametrize("path", ["/", "/replay", "/plan", "/live", "/fleet", "/runs"])
def test_on_a_phone_no_control_is_cut_off(page: Page, live_server: str, path: str) -> None:
    # Every visible input, select and button ends inside the window, unless it is in a table's box that scrolls
    # sideways and says so; a file input is wide enough for its button and "No file chosen" (in half a row it read
    # "N...en", 160 px).
    page.set_viewport_size({"width": 390, "height": 844})
    if path == "/runs":
        run_to_end(page, live_server, "/", (390, 844))  # a kept run, so that the list has its table
    page.goto(live_server + path)
    _ready(page)
    expect(page.locator(VIEWS[path][1])).to_be_visible()
    page.wait_for_timeout(500)
    cut = page.evaluate("""[...document.querySelectorAll('input:not([type=hidden]), select, button')]
        .filter(e => (e.offsetParent !== null || getComputedStyle(e).position === 'fixed') && !e.closest('.table-wrap[data-scrolls]'))
        .map(e => [e.id || e.name || e.textContent.trim().slice(0, 20), e.type, e.getBoundingClientRect()])
        .filter(([, type, r]) => r.width > 0 && (r.left < -0.5 || r.right > innerWidth + 0.5 || (type === 'file' && r.width < 240)))
        .map(([name, type, r]) => [name, type, Math.round(r.left), Math.round(r.right)])""")
    assert cut == []
    # Every table box too narrow for its table says that it scrolls.
    silent = page.evaluate("""[...document.querySelectorAll('.table-wrap')].filter(w => w.offsetParent !== null
        && w.scrollWidth > w.clientWidth + 1 && !w.hasAttribute('data-scrolls')).map(w => w.className)""")
    assert silent == []
    if path == "/runs":
        assert page.locator(".table-wrap[data-scrolls]").count() >= 1  # the kept runs' list is wider than a phone


def test_in_plan_enter_in_a_sidebar_field_posts_no_run(page: Page, live_server: str) -> None:
    # Plan shows the sidebar for its scenario, but no run to play it in: Enter in a field (which submits the form)
    # sends nothing, where it posted a Run whose answer had nowhere to go.
    posted: list[str] = []
    page.on("request", lambda r: posted.append(r.url) if r.method == "POST" else None)
    page.goto(live_server + "/plan")
    _ready(page)
    page.focus("#f-docs")
    page.keyboard.press("Enter")
    page.wait_for_timeout(500)
    assert posted == []
    expect(page.locator("main")).to_have_attribute("data-view", "plan")


def test_a_played_run_is_there_again_after_leaving_simulate(page: Page, live_server: str) -> None:
    # Before: Run, then Plan, then back showed Simulate's empty lanes: the run had only been in the page. Its stream's
    # X-Kvscope-Run names the run that keeps it, and Simulate's URL becomes that run's.
    run_to_end(page, live_server, "/", (1440, 900))
    page.wait_for_url(f"{live_server}/?run=*")
    kept = page.url.rsplit("=", 1)[1]
    assert kept.isdigit()
    page.click(".views-nav a[href='/plan']")
    page.wait_for_url(live_server + "/plan")
    page.go_back()
    page.wait_for_url(f"{live_server}/?run={kept}")
    expect(page.locator("[data-role=run-origin]")).to_contain_text(f"Kept run {kept}, replayed as it ran")
    expect(page.locator("#run-view")).to_have_attribute("data-stored-run", kept)
