"""axe-core (tests/vendor/axe.min.js, pinned by scripts/vendor_assets.py, never shipped) over the dashboard in headless
Chromium, at a desktop and a phone width, after load, after a seed-lab Run, and with every panel used (replay, each
analysis form, a live run on two emulators, the kept runs compared, a file imported): no violation of serious or
critical impact. The script is evaluated from the test (the page's CSP allows no other origin and no inline script)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from live_servers import ROOT, emulator, run_kvscope

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
def test_no_serious_or_critical_violation_after_load_and_after_a_run(page: Page, live_server: str, width: int, height: int) -> None:
    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    assert violations(page) == []
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    page.wait_for_timeout(600)  # the tiles' width transitions and the eviction lines settle
    assert violations(page) == []


@pytest.fixture(scope="module")
def live_app(live_server_factory: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    """A dashboard with two live targets (emulators, fast), so that the live panel has its form and a run to show."""
    with emulator("--no-cpu-tier", "--speed", "50") as gpu, emulator("--cpu-gb", "1.5", "--speed", "50") as cpu, \
            live_server_factory("--target", f"gpu={gpu}", "--target", f"gpu+cpu={cpu}") as url:
        yield url


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("a11y") / "seed.csv"
    assert run_kvscope(["simulate", "--out", str(path)]).returncode == 0
    return path


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_no_serious_or_critical_violation_with_every_panel_used(page: Page, live_app: str, seed_file: Path, width: int, height: int) -> None:
    # Each state's findings are gathered and asserted together, so that one run names every panel that fails.
    found: dict[str, list[dict[str, Any]]] = {}

    def check(state: str) -> None:
        found[state] = violations(page)

    page.set_viewport_size({"width": width, "height": height})
    page.goto(live_app + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=60_000)
    page.click("#replay-form button[type=submit]")
    page.wait_for_selector("#replay[data-state=done]", timeout=60_000)
    check("replay")
    page.set_input_files("#measure-file", str(seed_file))
    page.click("#measure-form button[type=submit]")
    expect(page.locator("#versus-passes")).to_be_visible(timeout=60_000)
    check("measurements")
    page.set_input_files("#calibrate-file", str(seed_file))
    page.click("#calibrate-form button[type=submit]")
    expect(page.locator("#calibrate-cells")).to_be_visible(timeout=60_000)
    check("calibration")
    page.click("#capacity-form button[type=submit]")
    page.wait_for_selector("#capacity-result .main-svg", timeout=60_000)
    page.click("#policies-form button[type=submit]")
    page.wait_for_selector("#policies-result table", timeout=60_000)
    page.fill("#advise-points", "3")
    page.click("#advise-form button[type=submit]")
    page.wait_for_selector("#advise-table tbody tr", timeout=90_000)
    check("curves, what-if, advisor")
    page.fill("#live-docs", "2")
    page.click("#live-form button[type=submit]")
    expect(page.locator("#live-table")).to_be_visible(timeout=60_000)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "done", timeout=60_000)
    check("live run")
    page.click("#runs-area [data-role=refresh]")
    picks = page.locator("#runs-compare input[name=pick]")
    expect(picks.nth(1)).to_be_attached()
    picks.nth(0).check()
    picks.nth(1).check()
    page.click("#runs-compare [data-role=compare]")
    page.wait_for_selector("#runs-detail .runs-passes", timeout=30_000)
    page.set_input_files("#runs-import-file", str(seed_file))
    page.click("#runs-import button[type=submit]")
    expect(page.locator("#runs-list-box")).to_contain_text("kept")
    page.wait_for_timeout(600)  # the tiles' width transitions and the eviction lines settle
    check("runs compared and imported")
    assert {state: v for state, v in found.items() if v} == {}


def test_axe_finds_a_violation_it_must(page: Page) -> None:
    # The check above could not fail if axe were not running: a page with white text on the old orange badge
    # (#E69F00, 2.0:1) and an unlabelled input must be reported.
    page.set_content('<html lang="en"><title>t</title><main><p style="color:#fff;background:#E69F00">gpu</p>'
                     '<input type="text"></main></html>')
    assert {"color-contrast", "label"} <= {v["rule"] for v in violations(page)}
