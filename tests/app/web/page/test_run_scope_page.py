"""The run's panels (lanes, TTFT chart, log, table) say which scenario they show, as every other panel does: the
sidebar's as Run sent it, in its own numbers, and a kept run's as it ran."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from app.web.views import VIEWS
from page_tour import goto_view, open_view, run_to_end

pytestmark = pytest.mark.browser


def test_the_run_says_it_is_the_sidebars_scenario_as_run_sent_it(page: Page, live_server: str) -> None:
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    scope = page.locator("#run [data-role=scope]")
    # The seed lab: 10 documents of 5,011 tokens, read in 3 passes: 30 requests per configuration.
    expect(scope).to_contain_text("the sidebar's")
    expect(scope).to_contain_text("10 documents of 5,011 tokens, 30 requests")
    page.fill("#f-docs", "4")
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    expect(page.locator("#player-status")).to_have_attribute("data-state", "done", timeout=60_000)
    expect(scope).to_contain_text("4 documents of 5,011 tokens, 12 requests")


def test_a_kept_run_says_it_is_the_kept_runs_scenario(page: Page, live_server: str) -> None:
    run_to_end(page, live_server)
    open_view(page, "runs")
    link = page.locator("#runs-list-box a[href^='/?run=']").first
    expect(link).to_be_attached(timeout=15_000)
    page.goto(live_server + link.get_attribute("href"))
    expect(page.locator("#run [data-role=scope]")).to_contain_text("Kept run")


def test_every_panel_names_its_scenario(page: Page, live_server: str) -> None:
    # The areas that load themselves, each in its view; in each view, each panel's head (or, for the run's panels, the
    # run's origin line above them) has a "Scenario:" line.
    loads = {"simulate": (), "replay": ("#replay-form",), "plan": ("#analysis-title",), "live": ("#watch-title", "#live-title"),
             "fleet": ("#fleet-form",), "runs": ("#runs-title",)}
    missing: dict[str, list[str]] = {}
    for view in VIEWS:
        goto_view(page, live_server, view.name)
        for loaded in loads[view.name]:
            expect(page.locator(loaded).first).to_be_attached(timeout=15_000)
        missing[view.name] = page.evaluate("""() => [...document.querySelectorAll('.panel-head')]
          .filter((head) => !head.closest('#run-view') && !head.querySelector('[data-role=scope]'))
          .map((head) => head.querySelector('h2, h3')?.textContent.trim())""")
        if view.name == "simulate":
            assert page.locator("#run-view > .run-origin [data-role=scope]").count() == 1
    assert {name: m for name, m in missing.items() if m} == {}
