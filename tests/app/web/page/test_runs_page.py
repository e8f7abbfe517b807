"""The Runs area in headless Chromium: a run is listed when it has played, reopens from its link and replays from its
stored events to the same end state, two runs compare pass by pass, a run is deleted, a scenario link runs it.

Figures: the seed lab (README, tests/sim/engine/test_seed.py): 30 requests per configuration; pass 2 with the CPU tier loads
48,640 tokens from CPU; without a CPU tier (or with too small a one) it loads none.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from page_tour import goto_view, open_view

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"
ServerFactory = Callable[..., AbstractContextManager[str]]


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture()
def url(db: Path, live_server_factory: ServerFactory) -> Iterator[str]:
    """A server with a database of its own for each test: the list starts empty."""
    with live_server_factory("--db", str(db)) as base:
        yield base


def open_page(page: Page, address: str) -> None:
    page.goto(address)
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.select_option("#speed", "max")


def chart_points(page: Page) -> dict[str, list[float]]:
    return dict(page.evaluate(
        "[...document.getElementById('ttft-chart').data].filter(t => t.meta === 'run').map(t => [t.name, t.y])"
    ))


def run_rows(page: Page) -> list[str]:
    return page.eval_on_selector_all("#runs-list-box tr[data-run]", "rows => rows.map(r => r.dataset.run)")


def test_a_played_run_is_listed_and_replays_from_its_link(page: Page, url: str) -> None:
    goto_view(page, url, "runs")
    expect(page.locator("[data-role=runs-empty]")).to_be_visible()
    open_view(page, "simulate")
    page.select_option("#speed", "max")
    page.click("[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    played = chart_points(page)
    # The Runs view lists the run that has played: one simulation, kept while it streamed.
    open_view(page, "runs")
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(1)
    row = page.locator("#runs-list-box tr[data-run]").first
    expect(row).to_contain_text("simulate")
    expect(row).to_contain_text("10 docs x 5,011 tok")
    expect(row).to_contain_text("pass 2: gpu+cpu 11.7x p50 over gpu")
    run_id = row.get_attribute("data-run")

    row.locator("[data-role=open]").click()
    page.wait_for_url(f"**/?run={run_id}")
    page.select_option("#speed", "max")
    page.wait_for_selector(DONE, timeout=60_000)
    expect(page.locator("[data-role=run-origin]")).to_contain_text(f"Kept run {run_id}, replayed as it ran")
    # Replayed from the stored events: every TTFT as it was played, and the table filled in the same.
    assert chart_points(page) == played
    expect(page.locator("#player-status")).to_contain_text("Done: 30 requests")
    # No new run: replaying keeps nothing more.
    assert len(httpx.get(f"{url}/api/runs").json()) == 1


def test_two_runs_compare_with_differences_highlighted(page: Page, url: str) -> None:
    for cpu in (1.5, 0.5):
        httpx.post(f"{url}/api/simulate", json={"passes": "forward,forward", "cpu_gb": cpu}, timeout=60)
    goto_view(page, url, "runs")
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(2)
    compare = page.locator("#runs-compare [data-role=compare]")
    expect(compare).to_be_disabled()
    page.locator("#runs-list-box input[name=pick]").nth(0).check()
    expect(compare).to_be_disabled()  # two, not one
    page.locator("#runs-list-box input[name=pick]").nth(1).check()
    expect(compare).to_be_enabled()
    compare.click()
    view = page.locator("[data-role=runs-compare]")
    expect(view).to_be_visible()
    expect(view.locator("[data-role=scenario-changes]")).to_contain_text("cpu_gb")
    # Without a CPU tier the runs are alike; with 0.5 GiB, pass 2 loses its CPU hits (48,640 tokens -> 0).
    expect(view.locator('tr[data-config="gpu"][data-pass="2"]')).not_to_have_class("differs")
    changed = view.locator('tr[data-config="gpu+cpu"][data-pass="2"]')
    expect(changed).to_have_class("differs")
    expect(changed.locator("td.changed").last).to_have_text("48,640 / 0")
    # Both runs' TTFTs overlaid: 2 runs x 2 configurations, 20 requests each.
    page.wait_for_function("() => document.getElementById('runs-compare-chart')?.data?.length === 4")
    lengths = page.evaluate("document.getElementById('runs-compare-chart').data.map(t => [t.name, t.x.length, t.line.dash])")
    assert sorted(lengths) == sorted([["run 1 · gpu", 20, "solid"], ["run 1 · gpu+cpu", 20, "solid"],
                                      ["run 2 · gpu", 20, "dash"], ["run 2 · gpu+cpu", 20, "dash"]])


def test_comparing_a_watch_says_why_it_cannot_and_marks_nothing_stale(page: Page, url: str, db: Path, expected_console_errors: list[str]) -> None:
    from app.runs.store import NewRun, RunStore

    expected_console_errors.append("status of 422")
    sim = httpx.post(f"{url}/api/simulate", json={"docs": 2}, timeout=60).headers["X-Kvscope-Run"]
    store = RunStore(db)  # a kvscope watch beside the server: KV events, no requests
    watch = store.save(NewRun("watch", name="KV events"), records=[{"seq": 0, "ts": 1.0, "event": {"type": "AllBlocksCleared"}}])
    store.close()
    goto_view(page, url, "runs")
    page.check(f"#pick-{sim}")
    page.check(f"#pick-{watch}")
    page.locator("#runs-compare [data-role=compare]").click()
    detail = page.locator("#runs-detail")
    expect(detail.locator("[data-role=runs-problem]")).to_have_text(f"run {watch} (watch) cannot be compared: it keeps KV events, not requests")
    # The answer is the problem itself, not an earlier result gone stale: no "Out of date ... see the fields" line.
    expect(detail.locator(".stale-note")).to_have_count(0)
    assert detail.get_attribute("data-stale") is None


def test_delete_removes_the_run(page: Page, url: str) -> None:
    ids = [httpx.post(f"{url}/api/simulate", json={"docs": 2}, timeout=60).headers["X-Kvscope-Run"] for _ in range(2)]
    goto_view(page, url, "runs")
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(2)
    page.locator(f'#runs-list-box tr[data-run="{ids[0]}"] [data-role=delete]').click()
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(1)
    assert run_rows(page) == [ids[1]]
    assert httpx.get(f"{url}/api/runs/{ids[0]}").status_code == 404


def test_a_scenario_link_runs_that_scenario(page: Page, url: str) -> None:
    open_page(page, url + "/?scenario=seed-lab&docs=4&passes=forward,reverse")
    page.select_option("#speed", "max")
    page.wait_for_selector(DONE, timeout=60_000)
    expect(page.locator("#f-docs")).to_have_value("4")
    expect(page.locator("#f-passes")).to_have_value("forward,reverse")
    # 4 documents x 2 passes = 8 requests per configuration.
    assert {name: len(ys) for name, ys in chart_points(page).items()} == {"gpu": 8, "gpu+cpu": 8}
    link = page.locator("[data-role=scenario-link]").get_attribute("href")
    assert link is not None and "scenario=seed-lab" in link and "docs=4" in link


def test_a_scenario_link_plays_however_late_the_scripts_after_htmx_arrive(page: Page, url: str) -> None:
    # A link's run starts its stream as soon as htmx runs, and the player draws as its events come: a script it draws
    # with that came after htmx in the page (the playback bar's, held here for a second) was not there yet, and the
    # first draw threw "Cannot read properties of undefined (reading 'buttons')" (the fixture fails on a page error).
    def late(route) -> None:
        time.sleep(1.0)
        route.continue_()

    page.route("**/static/js/playback.js*", late)
    open_page(page, url + "/?scenario=seed-lab&docs=2&passes=forward")
    page.wait_for_selector(DONE, timeout=60_000)
    assert {name: len(ys) for name, ys in chart_points(page).items()} == {"gpu": 2, "gpu+cpu": 2}


def test_a_bad_scenario_link_shows_the_field_and_its_limit(page: Page, url: str, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 422")
    page.goto(url + "/?scenario=seed-lab&docs=0")
    expect(page.locator(".field.invalid .field-error")).to_contain_text("greater than or equal to 1")
    # A field out of sight (More settings) is named above the lanes, where the page opens.
    page.goto(url + "/?scenario=seed-lab&gpu_policy=bogus")
    expect(page.locator("[data-role=run-origin]")).to_contain_text("This link's scenario was refused (gpu_policy: ")


def test_links_to_runs_that_do_not_exist_or_are_not_ids_say_so(page: Page, url: str, expected_console_errors: list[str]) -> None:
    expected_console_errors += ["status of 404", "status of 422"]
    page.goto(url + "/?run=12345")
    # Said in the Runs view, which the link opens (no Simulate view beneath it to say it above the lanes).
    expect(page).to_have_url(url + "/runs?run=12345")
    expect(page.locator("[data-role=runs-notice]")).to_contain_text("no run 12345: it was deleted")
    page.goto(url + "/?run=%3Cscript%3Ealert(1)%3C/script%3E")
    expect(page.locator("[data-role=runs-notice]")).to_contain_text("run id must be a positive whole number")
    assert page.locator("#runs-area script:not([src])").count() == 0


def test_a_measurement_run_opens_in_the_runs_area(page: Page, url: str, tmp_path: Path) -> None:
    rows = "config,pass,order,seq,doc,prompt_tokens,ttft_ms\n" + "".join(
        f"gpu,{p},forward,{i},{i},5024,{100 + 10 * p}\n" for p in (1, 2) for i in range(3)
    )
    answer = httpx.post(f"{url}/api/runs/import", files={"file": ("<b>mine</b>.csv", rows.encode(), "text/csv")})
    run_id = answer.json()["id"]
    page.goto(url + f"/?run={run_id}")
    detail = page.locator("[data-role=runs-compare]")
    expect(detail).to_contain_text(f"Run {run_id}: import")
    expect(page).to_have_url(url + f"/runs?run={run_id}")  # the link opens the Runs view
    expect(detail).to_contain_text("<b>mine</b>.csv")  # the name as text, not as markup
    # Pass 2's three requests at 120 ms: p50 120.0.
    expect(detail.locator('tr[data-config="gpu"][data-pass="2"] td').nth(3)).to_have_text("120.0")


def test_a_kept_replay_opens_in_the_replay_panel_as_it_ran(page: Page, url: str) -> None:
    answer = httpx.post(f"{url}/api/replay", data={"gpu_blocks": "400", "cpu_blocks": "2000", "timeline_buckets": "20"}, timeout=120)
    assert answer.status_code == 200 and "X-Kvscope-Run" in answer.headers, (answer.status_code, answer.headers, answer.text[:300])
    run_id, ran = answer.headers["X-Kvscope-Run"], answer.json()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(f"{r.method} {r.url}"))
    page.goto(url + f"/?run={run_id}")
    expect(page).to_have_url(url + f"/replay?run={run_id}")  # the link opens the Trace replay view
    status = page.locator("#replay-status")
    expect(status).to_contain_text(f"Kept run {run_id}, as it ran")
    expect(status).to_contain_text(f"replayed {ran['trace']['requests']:,} requests")
    # The tier table holds the answer the replay gave when it ran (hits per tier, as /api/replay answered them).
    for tier in ran["tiers"]:
        row = page.locator(f'#replay-tiers tr[data-tier="{tier["name"]}"] td')
        expect(row.nth(1)).to_have_text(f"{tier['capacity_blocks']:,}")
        expect(row.nth(3)).to_have_text(f"{tier['hit_blocks']:,}")
    # Both charts drawn from it: the timeline's 20 windows (those with requests) and every request's TTFT.
    page.wait_for_function("() => document.getElementById('replay-ttft-chart')?.data")
    windows = page.evaluate("document.getElementById('replay-hit-chart').data[0].x.length")
    assert windows == len(ran["timeline"]) and 0 < windows <= 20
    points = page.evaluate("document.getElementById('replay-ttft-chart').data.reduce((n, t) => n + t.x.length, 0)")
    assert points == len(ran["requests"])
    # The fields say what it ran with, and nothing was replayed again.
    assert page.input_value("#replay-gpu-blocks") == "400" and page.input_value("#replay-cpu-blocks") == "2000"
    assert not [a for a in asked if a.startswith("POST") or "/api/replay" in a]


def test_refresh_shows_runs_kept_elsewhere(page: Page, url: str) -> None:
    goto_view(page, url, "runs")
    expect(page.locator("[data-role=runs-empty]")).to_be_visible()
    run_id = httpx.post(f"{url}/api/simulate", json={"docs": 2}, timeout=60).headers["X-Kvscope-Run"]
    page.click("[data-role=refresh]")
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(1)
    assert run_rows(page) == [run_id]


@pytest.mark.slow
def test_a_kept_live_run_replays_in_the_live_panel(page: Page, tmp_path: Path, live_server_factory: ServerFactory) -> None:
    from live_servers import emulator

    with emulator("--no-cpu-tier", "--speed", "20") as gpu, \
            live_server_factory("--db", str(tmp_path / "runs.db"), "--target", f"gpu={gpu}") as base:
        created = httpx.post(f"{base}/api/live/runs", json={"targets": ["gpu"], "docs": 3, "passes": "forward,reverse"}, timeout=30).json()
        with httpx.stream("GET", base + created["events"], timeout=120) as r:
            sent = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
        run_id = created["run_id"]
        # The stream as it was sent is what the kept run gives back.
        with httpx.stream("GET", f"{base}/api/runs/{run_id}/events", timeout=60) as r:
            assert [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")] == sent

        page.goto(f"{base}/?run={run_id}")
        expect(page.locator("[data-role=kept-live-run]")).to_contain_text(f"Kept live run {run_id}")
        expect(page).to_have_url(f"{base}/live?run={run_id}")  # the link opens the Live & Watch view
        # 3 documents x 2 passes, one target: 6 requests measured, as they were.
        expect(page.locator("#live-status")).to_have_text("Done: 6 requests measured on gpu.", timeout=30_000)
        measured = [e["ttft_ms"] for e in sent if e["type"] == "measured"]
        assert page.evaluate("document.getElementById('live-chart').data[0].y") == measured
        assert page.locator("#live-table tbody tr").count() == 2  # one row per pass


@pytest.mark.slow
def test_a_kvscope_live_run_replays_in_the_live_panel(page: Page, tmp_path: Path, live_server_factory: ServerFactory) -> None:
    """The command line's live run keeps its stream's events too (a request's as it is answered), so the page replays
    it as it does the page's own: no re-measuring, no simulation."""
    import subprocess

    from live_servers import KVSCOPE, ROOT, emulator

    db = str(tmp_path / "runs.db")
    with emulator("--no-cpu-tier", "--speed", "20") as gpu:
        done = subprocess.run([*KVSCOPE, "live", "--db", db, "--target", f"gpu={gpu}", "--docs", "3", "--passes", "forward,reverse"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "kept as run 1 (kvscope runs show 1)" in done.stderr, done.stderr
    with live_server_factory("--db", db) as base:
        run = httpx.get(f"{base}/api/runs/1").json()
        # 3 documents x 2 passes against one target: 6 requests, each its own batch of events.
        assert (run["kind"], run["records"]) == ("live", 6) and run["event_batches"] >= 6
        # The records (kept by the measuring's sink) and the events (kept from its stream) tell the same TTFTs.
        rows = httpx.get(f"{base}/api/runs/1/export?format=jsonl").text.splitlines()
        measured = [json.loads(line)["ttft_ms"] for line in rows]
        page.goto(f"{base}/?run=1")
        expect(page.locator("[data-role=kept-live-run]")).to_contain_text("Kept live run 1")
        expect(page.locator("#live-status")).to_have_text("Done: 6 requests measured on gpu.", timeout=30_000)
        assert page.evaluate("document.getElementById('live-chart').data[0].y") == measured


# The pieces of each runs-table cell that must never be broken across lines: words, and the parts of a comma list
# ("forward,forward,reverse" may wrap after a comma). For each, whether its text's boxes sit on more than one line.
BROKEN_WORDS = """() => { const broken = [];
  for (const cell of document.querySelectorAll('#runs-list-box td')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[^\\s,]+,?/g)) {
        const r = document.createRange(); r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
        const tops = new Set([...r.getClientRects()].filter(c => c.width > 0).map(c => Math.round(c.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken; }"""


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (1024, 768), (390, 844)], ids=["1440x900", "1024x768", "390x844"])
def test_the_list_wraps_between_words(page: Page, url: str, width: int, height: int) -> None:
    """At 1024 wide the Runs area is about 640 px and its scenario column was squeezed to 60 px: "forward,forward,reverse"
    came out as "forward,for / ward,revers / e" and the date as "2026-12- / 01". Words stay whole at every width."""
    httpx.post(f"{url}/api/simulate", json={"passes": "forward,forward,reverse"}, timeout=60)
    page.set_viewport_size({"width": width, "height": height})
    goto_view(page, url, "runs")
    row = page.locator("#runs-list-box tr[data-run]").first
    expect(row).to_contain_text("forward,forward,reverse")
    assert page.evaluate(BROKEN_WORDS) == []
    # Every row stays a readable height: no cell squeezed into a column of a word or two per line. The scenario,
    # "10 docs x 5,011 tok · GPU 21,520 tok · CPU 1.5 GiB · forward,forward,reverse", takes five lines at most.
    line = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#runs-list-box td')).lineHeight)")
    heights = page.eval_on_selector_all("#runs-list-box tr[data-run]", "rows => rows.map(r => r.getBoundingClientRect().height)")
    assert max(heights) <= 5 * line + 12, (heights, line)
    # A number stays on the line of its unit: at 1440 wide "1.5 / GiB" came out on two lines.
    split = page.evaluate(
        """() => [...document.querySelectorAll('#runs-list-box tr[data-run] td')].flatMap(td => {
             const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT), out = [];
             for (let n = walker.nextNode(); n; n = walker.nextNode()) {
               for (const m of n.data.matchAll(/\\d[\\d,.]*\\s(tok|GiB|docs|requests)\\b/g)) {
                 const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
                 if (new Set([...r.getClientRects()].filter(c => c.width > 0).map(c => Math.round(c.top))).size > 1) out.push(m[0]);
               }
             }
             return out; })"""
    )
    assert split == [], split
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    if width >= 1024:  # the whole list fits the area: Open and Delete in view without scrolling it sideways
        assert page.evaluate("(w => w.scrollWidth <= w.clientWidth)(document.querySelector('#runs-list-box .table-wrap'))")


def test_two_runs_compared_on_a_phone_keep_each_cell_on_one_line(page: Page, url: str) -> None:
    """At 390 px the pass-by-pass table squeezed its cells: "1 / forward", "21,376 / / 21,376" on two or three lines,
    rows three lines tall. Each cell is one line; the table scrolls in its own box and the page stays 390 wide."""
    for cpu in (1.5, 0.5):
        httpx.post(f"{url}/api/simulate", json={"passes": "forward,forward,reverse", "cpu_gb": cpu}, timeout=60)
    page.set_viewport_size({"width": 390, "height": 844})
    goto_view(page, url, "runs")
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(2)
    for i in (0, 1):
        page.locator("#runs-list-box input[name=pick]").nth(i).check()
    page.locator("#runs-compare [data-role=compare]").click()
    table = page.locator("[data-role=pass-table]")
    expect(table.locator("tbody tr")).to_have_count(6)
    wrapped = table.evaluate(
        """t => [...t.querySelectorAll('tbody td')].filter(td => { const r = document.createRange(); r.selectNodeContents(td);
             return new Set([...r.getClientRects()].map(c => Math.round(c.top))).size > 1; }).map(td => td.textContent.trim())"""
    )
    assert wrapped == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_the_runs_buttons_look_like_the_pages_other_buttons(page: Page, url: str) -> None:
    """Refresh, Compare and Import were the browser's grey native buttons, the only ones on the page: every button but
    the Delete links has the page's rounded border and card background, as Step and Play do."""
    httpx.post(f"{url}/api/simulate", json={"passes": "forward"}, timeout=60)
    open_page(page, url + "/")
    step = page.evaluate("(s => [s.borderTopLeftRadius, s.backgroundColor])(getComputedStyle(document.querySelector('button[data-action=step]')))")
    open_view(page, "runs")
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(1)
    odd = page.evaluate(
        """(want) => [...document.querySelectorAll('#runs-area button:not(.link)')].filter(b => b.offsetParent !== null)
             .map(b => [b.textContent.trim(), getComputedStyle(b).borderTopLeftRadius, getComputedStyle(b).backgroundColor])
             .filter(([, radius, bg]) => radius !== want[0] || bg !== want[1])""",
        step,
    )
    assert page.locator("#runs-area button:not(.link)").count() >= 3
    assert odd == []


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (390, 844)], ids=["1024x768", "390x844"])
def test_a_long_list_scrolls_in_its_own_named_box(page: Page, url: str, width: int, height: int) -> None:
    """With 50 runs listed the Runs area was 5,679 px tall at 1024 px: the page below it (the import form) was a long
    scroll away. The list scrolls in a box of its own, at most the window's height, that Tab reaches and a screen
    reader names, as the page's other scrolling table boxes are; the import form follows it within a window."""
    rows = "config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,100\n"
    for n in range(50):
        assert httpx.post(f"{url}/api/runs/import", files={"file": (f"r{n}.csv", rows.encode(), "text/csv")}).status_code == 201
    page.set_viewport_size({"width": width, "height": height})
    goto_view(page, url, "runs")
    expect(page.locator("#runs-list-box tr[data-run]")).to_have_count(50)
    box = page.locator("#runs-list-box [role=region]")
    expect(box).to_have_attribute("tabindex", "0")
    expect(box).to_have_attribute("aria-label", re.compile(r"\w"))
    sizes = box.evaluate("b => ({ client: b.clientHeight, scroll: b.scrollHeight })")
    assert sizes["client"] <= height and sizes["scroll"] > sizes["client"], sizes  # the rows scroll inside it
    area = page.locator("#runs-area").bounding_box()
    form = page.locator("#runs-import").bounding_box()
    assert area is not None and form is not None
    assert form["y"] - area["y"] <= 2 * height, (area, form)  # the import form is no longer screens below the list
    # Nothing of the scrolled-away rows reaches past the page's end: each row's visually hidden label (placed
    # absolutely) escaped the box and made the page thousands of pixels longer than its content, blank below it, and
    # the sidebar's playback bar left the window there.
    # With the panels after the Runs area put aside, the page ends with the area, as the rows scroll inside its box.
    ends = page.evaluate("""() => {
      const area = document.querySelector('#runs-area');
      for (const el of document.querySelectorAll('main > *')) if (!el.contains(area)) el.style.display = 'none';
      return [document.documentElement.scrollHeight, Math.ceil(document.body.getBoundingClientRect().height)];
    }""")
    assert ends[0] <= ends[1] + 1, ends
    # The keyboard reaches it and scrolls it: its last row comes into the box.
    box.focus()
    page.keyboard.press("End")
    page.wait_for_function("b => b.scrollTop + b.clientHeight >= b.scrollHeight - 1", arg=box.element_handle())  # scrolls smoothly
    last = page.locator("#runs-list-box tr[data-run]").last.bounding_box()
    inside = box.bounding_box()
    assert last is not None and inside is not None and last["y"] + last["height"] <= inside["y"] + inside["height"] + 1
