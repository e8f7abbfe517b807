"""Every form's working state in headless Chromium (static/js/forms.js): busy while its request runs, its submit
disabled; a result that a failed request did not replace is marked stale, and the next answer clears the mark."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, Route, expect

from app.web.views import BY_NAME
from page_tour import open_view

pytestmark = pytest.mark.browser


# Each view's form the tests wait for: the what-if's in Plan, the replay's, the sidebar's in Simulate.
FORMS = {"plan": "#policies-form", "replay": "#replay-form", "simulate": "#scenario-form"}


def open_page(page: Page, url: str, view: str = "plan") -> None:
    page.goto(url + BY_NAME[view].path)
    page.wait_for_function("() => window.Plotly && window.htmx && window.kvscope?.forms")
    page.wait_for_selector(FORMS[view])


def test_a_form_is_busy_until_its_answer_arrives(live_server: str, page: Page) -> None:
    open_page(page, live_server)
    held: list[Route] = []
    page.route("**/ui/analysis/policies", lambda route: held.append(route))  # the request waits here until released
    button = page.locator("#policies-form button[type=submit]")
    button.click()
    expect(button).to_be_disabled()
    expect(page.locator("#policies-form")).to_have_attribute("aria-busy", "true")
    expect(page.locator("#policies-result")).to_have_attribute("aria-busy", "true")
    assert len(held) == 1  # one click, one request: the disabled button cannot send another
    button.click(force=True)
    page.wait_for_timeout(200)
    assert len(held) == 1
    held[0].continue_()
    page.unroute("**/ui/analysis/policies")
    expect(page.locator("#policies-result table").first).to_be_visible()
    expect(button).to_be_enabled()
    expect(page.locator("#policies-form")).not_to_have_attribute("aria-busy", "true")
    expect(page.locator("#policies-result")).not_to_have_attribute("aria-busy", "true")


def test_a_failed_request_marks_the_earlier_result_stale(live_server: str, page: Page, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 503")
    open_page(page, live_server)
    page.click("#policies-form button[type=submit]")
    table = page.locator("#policies-result table").first
    expect(table).to_be_visible()
    # A busy server's 503 (not one of the page's partials) is not swapped in: the earlier table stays, marked stale.
    page.route("**/ui/analysis/policies", lambda route: route.fulfill(status=503, body='{"detail": "busy"}', content_type="application/json"))
    page.click("#policies-form button[type=submit]")
    note = page.locator("#policies-result > .stale-note")
    # The note carries what the server said (its JSON detail), not the status alone.
    expect(note).to_have_text("Out of date: the server answered 503: busy. What is shown below is the earlier result.")
    expect(page.locator("#policies-result")).to_have_attribute("data-stale", "true")
    expect(table).to_be_visible()
    expect(page.locator("#policies-result > :not(.stale-note)")).not_to_contain_text("busy")
    # The next answer replaces it, and the mark goes.
    page.unroute("**/ui/analysis/policies")
    page.click("#policies-form button[type=submit]")
    expect(note).to_have_count(0)
    expect(page.locator("#policies-result")).not_to_have_attribute("data-stale", "true")


def test_a_first_request_that_fails_says_so_where_its_answer_would_be(
    live_server: str, page: Page, expected_console_errors: list[str]
) -> None:
    # With no earlier result to mark stale, a busy server's 503 left the area empty: the click seemed to do nothing.
    expected_console_errors.append("status of 503")
    open_page(page, live_server)
    page.route("**/ui/analysis/capacity", lambda route: route.fulfill(status=503, body='{"detail": "busy"}', content_type="application/json"))
    page.click("#capacity-form button[type=submit]")
    note = page.locator("#capacity-result > .stale-note")
    expect(note).to_have_text("No answer: the server answered 503: busy. Try again.")
    expect(page.locator("#capacity-result")).not_to_have_attribute("data-stale", "true")  # nothing under it to grey
    # A second failure says the same, not that the note is an earlier result; the next answer replaces the note.
    page.click("#capacity-form button[type=submit]")
    expect(note).to_have_text("No answer: the server answered 503: busy. Try again.")
    page.unroute("**/ui/analysis/capacity")
    page.click("#capacity-form button[type=submit]")
    expect(page.locator("#capacity-result .main-svg").first).to_be_attached(timeout=60_000)
    expect(note).to_have_count(0)


def test_a_refusal_shown_in_the_result_area_replaces_the_result_with_no_stale_note(
    live_server: str, page: Page, expected_console_errors: list[str]
) -> None:
    # The analysis forms answer a bad field with their problem partial (422, HTML) in the result's own place: the earlier
    # curves are gone, so no note may say "what is shown below is the earlier result" above the error.
    expected_console_errors.append("status of 422")
    open_page(page, live_server)
    page.click("#capacity-form button[type=submit]")
    expect(page.locator("#capacity-result .main-svg").first).to_be_attached(timeout=60_000)
    page.fill("#capacity-points", "0")
    page.click("#capacity-form button[type=submit]")
    expect(page.locator("#capacity-result .analysis-problem")).to_contain_text("curve_points")
    expect(page.locator("#capacity-result .main-svg")).to_have_count(0)
    expect(page.locator("#capacity-result > .stale-note")).to_have_count(0)
    expect(page.locator("#capacity-result")).not_to_have_attribute("data-stale", "true")
    expect(page.locator("#capacity-form button[type=submit]")).to_be_enabled()


def test_a_refused_run_marks_the_run_shown_stale(live_server: str, page: Page, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 422")
    open_page(page, live_server, "simulate")
    page.fill("#f-docs", "0")
    page.click("#scenario-form [data-action=run]")
    expect(page.locator("#f-docs-error")).to_be_visible()  # the errors go beside the fields ...
    expect(page.locator("#run > .stale-note")).to_contain_text("the input was refused")  # ... and the old run is marked
    expect(page.locator("#scenario-form [data-action=run]")).to_be_enabled()
    page.fill("#f-docs", "3")
    page.click("#scenario-form [data-action=run]")
    expect(page.locator("#run-view")).to_have_attribute("data-requests", "9")  # 3 documents x 3 passes
    expect(page.locator("#run > .stale-note")).to_have_count(0)


def test_a_failed_replay_marks_its_earlier_result_stale(live_server: str, page: Page, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 500")
    open_page(page, live_server, "replay")
    page.click("#replay-form button[type=submit]")
    expect(page.locator("#replay-result")).to_be_visible(timeout=30_000)
    page.route("**/ui/replay", lambda route: route.fulfill(status=500, body="{}", content_type="application/json"))
    page.click("#replay-form button[type=submit]")
    expect(page.locator("#replay-result > .stale-note")).to_contain_text("the server answered 500")
    expect(page.locator("#replay-form button[type=submit]")).to_be_enabled()


def test_a_replay_past_its_deadline_says_what_the_server_said(
    live_server: str, page: Page, expected_console_errors: list[str]
) -> None:
    # A loaded server stops a replay at its deadline with a 503 whose body (the error partial) says so and what to do;
    # the status line said only "the server answered 503", which left a user guessing.
    expected_console_errors.append("status of 503")
    open_page(page, live_server, "replay")
    said = "stopped after 4 s (the deadline passed); the limit here is 4 s: ask for less"
    page.route("**/ui/replay", lambda route: route.fulfill(
        status=503, body=f'<p class="error" role="alert">{said}</p>', content_type="text/html"))
    page.click("#replay-form button[type=submit]")
    expect(page.locator("#replay")).to_have_attribute("data-state", "failed")
    expect(page.locator("#replay-status")).to_have_text(f"Replay failed: the server answered 503: {said}")


def test_each_panel_says_which_scenario_it_simulates(live_server: str, page: Page) -> None:
    open_page(page, live_server)
    capacity = page.locator("section:has(> .panel-head #capacity-title) [data-role=sidebar-scenario]")
    expect(capacity).to_contain_text("seed-lab · 10 documents of 5,011 tokens · GPU 21,520 tokens · CPU 1.5 GiB")
    page.fill("#f-docs", "12")  # the line follows the sidebar as it is edited
    expect(capacity).to_contain_text("12 documents of 5,011 tokens")
    expect(capacity).to_contain_text("costs: the server's")
    # Views with fields of their own say what they simulate, and name no sidebar: theirs have none.
    open_view(page, "replay")
    expect(page.locator("#replay [data-role=scope]")).to_contain_text("the trace and tier sizes below")
    expect(page.locator("#replay [data-role=scope]")).not_to_contain_text("sidebar")
