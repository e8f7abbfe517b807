"""axe-core (tests/vendor/axe.min.js, pinned by scripts/vendor_assets.py, never shipped) over the dashboard in headless
Chromium, at a desktop and a phone width, after load, after a seed-lab Run (in every view), and with every panel used (replay, each
analysis form, a live run on two emulators, a fleet served, the kept runs compared, a file imported): no violation of serious or
critical impact. The script is evaluated from the test (the page's CSP allows no other origin and no inline script)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from live_servers import ROOT
from app.web.views import VIEWS
from page_tour import live_app, open_view, seed_file, use_every_panel  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

AXE = ROOT / "tests" / "vendor" / "axe.min.js"
DONE = "#player-status[data-state=done]"
SIZES = [(1440, 900), (390, 844)]
BLOCKING = {"serious", "critical"}


def violations(page: Page) -> list[dict[str, Any]]:
    """axe's serious and critical findings: rule, impact and the first few nodes with axe's summary of each."""
    if not page.evaluate("typeof window.axe === 'object'"):
        # Evaluated through the DevTools protocol, which the page's CSP does not govern (a <script> tag would be refused).
        page.evaluate(AXE.read_text() + "\n;undefined")
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [
        {"rule": v["id"], "impact": v["impact"], "nodes": len(v["nodes"]),
         "first": [(n["target"], n.get("failureSummary", "")[:160]) for n in v["nodes"][:3]]}
        for v in found if v["impact"] in BLOCKING
    ]


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_no_serious_or_critical_violation_after_load_and_after_a_run_in_every_view(page: Page, live_server: str, width: int, height: int) -> None:
    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    assert violations(page) == []
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    page.wait_for_timeout(600)  # the tiles' width transitions and the eviction lines settle
    found = {"simulate": violations(page)}
    # Then every other view, from the nav bar, once its areas have loaded themselves.
    for view in VIEWS[1:]:
        open_view(page, view.name)
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(300)
        found[view.name] = violations(page)
    assert {name: v for name, v in found.items() if v} == {}


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_no_serious_or_critical_violation_with_every_panel_used(page: Page, live_app: str, seed_file: Path, width: int, height: int) -> None:
    # Each state's findings are gathered and asserted together, so that one run names every panel that fails.
    found: dict[str, list[dict[str, Any]]] = {}
    use_every_panel(page, live_app, seed_file, width, height, lambda state: found.update({state: violations(page)}))
    assert {state: v for state, v in found.items() if v} == {}


def test_axe_finds_a_violation_it_must(page: Page) -> None:
    # The check above could not fail if axe were not running: a page with white text on the old orange badge
    # (#E69F00, 2.0:1) and an unlabelled input must be reported.
    page.set_content('<html lang="en"><title>t</title><main><p style="color:#fff;background:#E69F00">gpu</p>'
                     '<input type="text"></main></html>')
    assert {"color-contrast", "label"} <= {v["rule"] for v in violations(page)}
