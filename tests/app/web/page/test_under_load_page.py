"""The Simulate view under load, in headless Chromium: requests in flight pin blocks in the lanes, Step moves one
scheduler step, the strip counts running and waiting requests, the TTFT chart over arrival time has queueing, and
the per-pass table says time per output token.

Expected values come from the seed lab's arithmetic: 5,011 + 13 = 5,024-token prompts in 16-token blocks, and a
step's budget of 8,192 tokens (vllm serve's on an 80 GiB GPU, sim.sched.config) that one step spends in full.
"""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from sim.costs.model import default_costs

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"
GPU_BAR = '.lane[data-run="gpu"] .tier[data-tier="gpu"] [data-role=bar]'


def open_with(page: Page, url: str, **fields: str) -> None:
    page.goto(url + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.select_option("#speed", "max")
    if any(name not in ("concurrency", "rate") for name in fields):
        page.click("#more-settings summary")
    for name, value in fields.items():
        page.fill(f"#f-{name.replace('_', '-')}", value)


def step(page: Page, applied: int) -> None:
    page.click("button[data-action=step]")
    page.wait_for_selector(f"#player-status[data-applied='{applied}']", timeout=60_000)
    page.evaluate("() => window.kvscope.plot.settled()")


def trace_lengths(page: Page, chart: str) -> dict[str, int]:
    return dict(page.evaluate(f"[...document.getElementById('{chart}').data].map(t => [t.name, t.x.length])"))


def test_requests_in_flight_pin_blocks_and_step_moves_one_scheduler_step(page: Page, live_server: str) -> None:
    open_with(page, live_server, concurrency="4")
    step(page, 1)  # Step with no run yet starts one paused, and applies its first step
    expect(page.locator("#run-view")).to_have_attribute("data-unit", "step")
    # Step 1: four requests arrive at once. Request 0 is scheduled whole (5,024 tokens), request 1 gets the rest of
    # the budget, 8,192 - 5,024 = 3,168 tokens, and keeps running; 2 and 3 wait. Request 0 finishes with its one
    # token and its blocks are cached in the free queue; request 1's 3,168 tokens (198 blocks) are pinned.
    pinned = page.locator(f"{GPU_BAR} .tile[data-doc='1'] .pinned-part")
    expect(pinned).to_have_count(1)
    expect(page.locator(f"{GPU_BAR} .tile[data-doc='1']")).to_have_attribute("data-pinned", "3168")
    expect(page.locator(f"{GPU_BAR} .tile[data-doc='0'] .pinned-part")).to_have_count(0)
    expect(page.locator('.lane[data-run="gpu"] [data-role=pinned]')).to_have_text("3,168")
    expect(page.locator("[data-role=pinned-key]")).to_be_visible()
    # The pinned part is as wide as its share of the tile: 3,168 of its 3,168 tokens, the whole of doc 1's tile.
    # Its width eases in (a 0.35 s transition): read once it has settled, which a loaded machine may take longer for.
    page.wait_for_function(
        "(sel) => { const t = document.querySelector(sel); "
        "return Math.abs(t.querySelector('.pinned-part').getBoundingClientRect().width / t.getBoundingClientRect().width - 1) < 0.02; }",
        arg=f"{GPU_BAR} .tile[data-doc='1']",
    )
    # One request has its first token: one point per configuration in the TTFT chart, one step in the strip.
    chart = trace_lengths(page, "ttft-chart")
    assert (chart["gpu"], chart["gpu+cpu"]) == (1, 1)
    strip = trace_lengths(page, "steps-chart")
    assert strip["gpu: running"] == strip["gpu: waiting"] == 1
    running_waiting = page.evaluate("(() => { const d = document.getElementById('steps-chart').data; return [d[0].y[0], d[1].y[0]]; })()")
    # After step 1: request 1 runs; 2 and 3 wait, and 4 arrived when 0 finished (a closed loop of 4).
    assert running_waiting == [1, 3]
    expect(page.locator('.lane[data-run="gpu"] [data-role=step]')).to_contain_text("Step 1 at 0.0 ms")

    step(page, 2)
    # Step 2: request 1's last 5,024 - 3,168 = 1,856 tokens, request 2 whole (5,024), and 8,192 - 1,856 - 5,024 =
    # 1,312 tokens of request 3: requests 1 and 2 have their first tokens, so three points per configuration now.
    chart = trace_lengths(page, "ttft-chart")
    assert (chart["gpu"], chart["gpu+cpu"]) == (3, 3)
    expect(page.locator('.lane[data-run="gpu"] [data-role=step]')).to_contain_text("Step 2")
    expect(page.locator(f"{GPU_BAR} .tile[data-doc='3']")).to_have_attribute("data-pinned", "1312")
    expect(page.locator(f"{GPU_BAR} .tile[data-doc='1'] .pinned-part")).to_have_count(0)  # finished: cached, free
    expect(page.locator("#player-status")).to_contain_text("Step 2")


def test_the_ttft_chart_over_arrival_time_stacks_queueing_under_the_rest(page: Page, live_server: str) -> None:
    open_with(page, live_server, concurrency="4")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=120_000)
    page.evaluate("() => window.kvscope.plot.settled()")
    data = page.evaluate("[...document.getElementById('queue-chart').data].map(t => ({name: t.name, x: t.x, y: t.y, seq: t.customdata}))")
    by_name = {t["name"]: t for t in data}
    queued, rest = by_name["gpu: queued"], by_name["gpu: prefill and the rest"]

    def stroke(trace: dict, seq: int) -> tuple[float, float, float]:
        i = trace["seq"].index(seq)
        assert trace["y"][i + 2] is None  # each stroke ends in a gap, so strokes are not joined
        return trace["x"][i], trace["y"][i], trace["y"][i + 1]

    # Requests 2 and 3 arrived at 0 and waited for step 1 to end: step 1 computed 8,192 tokens, which costs what
    # one request computing 8,192 tokens costs (a step is priced by the request cost model, sim.sched.step_costs).
    step1_ms = default_costs().ttft_ms(8192)
    for seq in (2, 3):
        x, low, high = stroke(queued, seq)
        assert (x, low) == (0, 0)
        assert high == pytest.approx(step1_ms, abs=1e-3)
        # The rest is stacked on the queueing: it starts where the queueing ends.
        x, low, _ = stroke(rest, seq)
        assert (x, low) == (0, pytest.approx(step1_ms, abs=1e-3))
    # Requests 0 and 1 were admitted in step 1: they did not queue.
    for seq in (0, 1):
        assert seq not in queued["seq"]
        assert stroke(rest, seq)[1] == 0


def test_the_table_says_time_per_output_token_when_requests_decode(page: Page, live_server: str) -> None:
    # One request at a time, served by the stepped engine (a scheduler flag is given), each generating 3 tokens:
    # after its prefill step, two decode steps of one request each, which cost a step's fixed cost alone (the seed
    # fit has no decode constant): the time per output token is the overhead.
    open_with(page, live_server, output_tokens="3", max_num_seqs="8")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=120_000)
    expect(page.locator("#run-view")).to_have_attribute("data-unit", "request")
    tpot = page.inner_text('#results-table tr[data-run="gpu"][data-pass="1"] [data-col=tpot]')
    assert tpot == f"{default_costs().overhead_ms:,.1f}"
    assert page.inner_text('#results-table tr[data-run="gpu"][data-pass="1"] [data-col=throughput]') != "–"


def test_one_request_at_a_time_shows_the_page_as_before(page: Page, live_server: str) -> None:
    # Empty or 1 in flight: the sequential engine, request by request, with none of the load panels.
    for concurrency in ("", "1"):
        open_with(page, live_server, concurrency=concurrency)
        step(page, 1)
        expect(page.locator("#run-view")).to_have_attribute("data-unit", "request")
        expect(page.locator("#player-status")).to_contain_text("Request 0 (1 of 30)")
        for gone in ("#steps-chart", "#queue-chart", "[data-role=pinned-key]", "[data-role=pinned]", "[data-col=tpot]", ".pinned-part"):
            expect(page.locator(gone)).to_have_count(0)
        expect(page.locator("#causes-chart")).to_have_count(1)


def test_a_kept_run_under_load_opens_as_it_ran(page: Page, live_server: str) -> None:
    # The run keeps how it was served: its link opens it step by step again, its form says 4 in flight, and its
    # first stored step pins request 1's 3,168 tokens as the run itself did (the first test's derivation).
    open_with(page, live_server, concurrency="4")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=120_000)
    kept = httpx.get(live_server + "/api/runs", params={"limit": 1}, timeout=30).json()[0]
    assert kept["name"].endswith(" · 4 in flight")
    page.goto(f"{live_server}/?run={kept['id']}")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.wait_for_selector(DONE, timeout=120_000)
    expect(page.locator("#run-view")).to_have_attribute("data-unit", "step")
    expect(page.locator("#f-concurrency")).to_have_value("4")
    expect(page.locator("#player-status")).to_contain_text("scheduler steps")
    # Played again from its start, a step a second, paused after the first.
    page.select_option("#speed", "1")
    page.click("button[data-action=play]")
    page.wait_for_selector("#player-status[data-applied='1']", timeout=30_000)
    page.click("button[data-action=pause]")
    expect(page.locator("#player-status")).to_have_attribute("data-applied", "1")
    expect(page.locator(f"{GPU_BAR} .tile[data-doc='1']")).to_have_attribute("data-pinned", "3168")
    expect(page.locator('.lane[data-run="gpu"] [data-role=step]')).to_contain_text("Step 1 at 0.0 ms")


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)], ids=["1440x900", "390x844"])
def test_no_serious_or_critical_violation_under_load(page: Page, live_server: str, width: int, height: int) -> None:
    from tests.app.web.page.test_accessibility import violations

    page.set_viewport_size({"width": width, "height": height})
    open_with(page, live_server, concurrency="4", output_tokens="4")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=120_000)
    page.wait_for_timeout(600)  # the tiles' width transitions settle
    assert violations(page) == []
