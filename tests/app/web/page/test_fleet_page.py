"""The Fleet view in headless Chromium: its URL opens it and the nav has it; a run draws the per-router table (one row
per router ticked), the TTFT chart (one line per router) and one strip per replica; a bad field is named beside it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from app.web.views import BY_NAME
from test_accessibility import SIZES, violations

pytestmark = pytest.mark.browser


def _open(page: Page, url: str) -> None:
    page.goto(url + BY_NAME["fleet"].path)
    page.wait_for_function("() => window.Plotly && window.htmx")
    expect(page.locator("#fleet-form")).to_be_visible()


def test_the_fleet_url_opens_the_fleet_view_and_the_nav_has_it(page: Page, live_server: str) -> None:
    _open(page, live_server)
    assert page.get_attribute("main", "data-view") == "fleet"
    link = page.locator(".views-nav a[data-view=fleet]")
    expect(link).to_have_text("Fleet")
    expect(link).to_have_attribute("aria-current", "page")
    # The fleet does not play the sidebar's scenario: it has its own preset and sizes.
    assert page.locator("aside.sidebar").count() == 0
    # From another view, the nav's link opens it too.
    page.goto(live_server + "/runs")
    page.click(".views-nav a[data-view=fleet]")
    page.wait_for_url(live_server + "/fleet")
    expect(page.locator("#fleet-form")).to_be_visible()


def test_a_run_draws_one_row_and_one_line_per_router_and_a_strip_per_replica(page: Page, live_server: str) -> None:
    _open(page, live_server)
    page.fill("#fleet-replicas", "3")
    # Three routers ticked (the form starts with round-robin and affinity): llm-d added.
    page.check("#fleet-fields input[name=routers][value=llm-d]")
    page.click("#fleet-form button[type=submit]")
    page.wait_for_selector("#fleet[data-state=done]", timeout=60_000)
    rows = page.locator("#fleet-table tbody tr")
    expect(rows).to_have_count(3)
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.router)") == ["round-robin", "affinity", "llm-d"]
    # Each row's hit ratio is at most the unbounded cache's (a cache that never evicts: no router beats it).
    for i in range(3):
        hit = float(rows.nth(i).locator("[data-col=hit-ratio]").inner_text().rstrip("%"))
        unbounded = float(rows.nth(i).locator("[data-col=unbounded]").inner_text().rstrip("%"))
        assert hit <= unbounded + 1e-9, (i, hit, unbounded)
    # The chart: one line per router, named by it.
    names = page.evaluate("document.getElementById('fleet-ttft-chart').data.map(t => t.name)")
    assert names == ["round-robin", "affinity", "llm-d"]
    # The strips: three replicas for the first router shown, the others' stacks hidden; every request is on exactly
    # one replica, so the marks of the shown stack number the requests the status line counts.
    shown = page.locator(".fleet-stack:not([hidden])")
    expect(shown).to_have_count(1)
    expect(shown).to_have_attribute("data-router", "round-robin")
    expect(shown.locator(".fleet-strip")).to_have_count(3)
    served = int(page.locator("#fleet-status").inner_text().split()[1].replace(",", ""))
    expect(shown.locator(".fleet-mark")).to_have_count(served)
    # Round-robin sends the k-th arrival to replica k mod 3; a closed loop issues the requests in their order, so the
    # k-th arrival is request k (the JSON's seq, from 0): replica 0 serves requests 0, 3, 6, ...
    first = shown.locator(".fleet-strip[data-replica='0'] .fleet-mark").evaluate_all("ms => ms.slice(0, 3).map(m => m.dataset.seq)")
    assert first == ["0", "3", "6"], first
    # Another router chosen in the strips' menu: its stack is shown instead.
    page.select_option("#fleet-lanes-router", "affinity")
    expect(page.locator(".fleet-stack:not([hidden])")).to_have_attribute("data-router", "affinity")


def test_a_bad_field_is_named_beside_it(page: Page, live_server: str, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 422")  # the refused fleets' answers
    _open(page, live_server)
    page.fill("#fleet-replicas", "0")  # at least one replica
    page.click("#fleet-form button[type=submit]")
    error = page.locator("[data-field=replicas] .field-error")
    expect(error).to_contain_text("greater than or equal to 1")
    expect(page.locator("#fleet-replicas")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#fleet-status")).to_contain_text("cannot be served")
    # No router ticked: refused at the routers' field, not served with the defaults.
    page.fill("#fleet-replicas", "2")
    for name in page.locator("#fleet-fields input[name=routers]:checked").evaluate_all("bs => bs.map(b => b.value)"):
        page.uncheck(f"#fleet-fields input[name=routers][value={name}]")
    page.click("#fleet-form button[type=submit]")
    expect(page.locator("[data-field=routers] .field-error")).to_have_text("tick at least one router")
    expect(page.locator("[data-field=replicas] .field-error")).to_have_count(0)


def test_native_offloading_scheduled_ahead_is_served_and_a_shared_tier_behind_it_refused_beside_it(
    page: Page, live_server: str, expected_console_errors: list[str],
) -> None:
    expected_console_errors.append("status of 422")  # the refused fleet's answer
    _open(page, live_server)
    page.select_option("#fleet-cpu-backend", "vllm-native")
    page.check("#fleet-async-scheduling")
    page.fill("#fleet-shared-tier", "remote:8")
    page.click("#fleet-form button[type=submit]")
    # vLLM's native offloading has its CPU tier alone: the shared tier is refused beside its field, and the redrawn
    # form keeps the choices made.
    expect(page.locator("[data-field=shared_tier] .field-error")).to_contain_text("vllm-native offloads to its CPU tier alone")
    expect(page.locator("#fleet-cpu-backend")).to_have_value("vllm-native")
    expect(page.locator("#fleet-async-scheduling")).to_be_checked()
    page.fill("#fleet-shared-tier", "")
    page.click("#fleet-form button[type=submit]")
    expect(page.locator("#fleet-table tbody tr")).to_have_count(len(page.locator("#fleet-fields input[name=routers]:checked").all()))
    expect(page.locator("#fleet-status")).to_contain_text("Served 30 requests")


def test_on_a_phone_the_nav_is_one_row_and_serve_brings_the_table_into_view(page: Page, live_server: str) -> None:
    # Six views' links at 390 px: the sixth wrapped to a second row under the first (at 0.8 rem with 5 px sides).
    page.set_viewport_size({"width": 390, "height": 844})
    _open(page, live_server)
    tops = page.locator(".views-nav a").evaluate_all("as => as.map(a => Math.round(a.getBoundingClientRect().top))")
    assert len(tops) == 6 and len(set(tops)) == 1, tops
    assert page.locator(".views-nav a").last.evaluate("a => a.getBoundingClientRect().right <= innerWidth")
    # The form is two screens tall on a phone: Serve brings its answer's table, every row of it, into the window (the
    # click itself only scrolls the button into view, leaving the rows under the window's foot).
    page.click("#fleet-form button[type=submit]")
    page.wait_for_selector("#fleet[data-state=done]", timeout=60_000)
    rows = page.locator("#fleet-table tbody tr").evaluate_all("rs => rs.map(r => [r.getBoundingClientRect().top, r.getBoundingClientRect().bottom])")
    assert rows and all(0 <= top and bottom <= 844 for top, bottom in rows), rows


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_axe_finds_no_serious_or_critical_violation_after_a_fleet_run(page: Page, live_server: str, width: int, height: int) -> None:
    # Every router ticked, so that the table, the chart's legend and the strips' menu are at their fullest.
    page.set_viewport_size({"width": width, "height": height})
    _open(page, live_server)
    for name in page.locator("#fleet-fields input[name=routers]:not(:checked)").evaluate_all("bs => bs.map(b => b.value)"):
        page.check(f"#fleet-fields input[name=routers][value={name}]")
    page.click("#fleet-form button[type=submit]")
    page.wait_for_selector("#fleet[data-state=done]", timeout=60_000)
    assert violations(page) == []
