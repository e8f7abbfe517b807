"""A tour of the dashboard with every panel used, for the page tests that check each state (axe, the phone layout):
a seed-lab Run, a replay, a measurement file beside its prediction, a calibration, the curves, the what-if, the
advisor, a live run on two emulators, a fleet served, two kept runs compared and a file imported, each in its view (the nav bar moves
between them). ``check(state)`` runs after each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from app.web.views import BY_NAME
from live_servers import emulator, run_kvscope

DONE = "#player-status[data-state=done]"


@pytest.fixture(scope="module")
def live_app(live_server_factory: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    """A dashboard with two live targets (emulators, fast), so that the live panel has its form and a run to show."""
    with emulator("--no-cpu-tier", "--speed", "50") as gpu, emulator("--cpu-gb", "1.5", "--speed", "50") as cpu, \
            live_server_factory("--target", f"gpu={gpu}", "--target", f"gpu+cpu={cpu}") as url:
        yield url


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed lab's requests as a measurement file (``kvscope simulate --out``)."""
    path = tmp_path_factory.mktemp("tour") / "seed.csv"
    assert run_kvscope(["simulate", "--out", str(path)]).returncode == 0
    return path


def run_to_end(page: Page, url: str, path: str = "/", size: tuple[int, int] | None = None) -> None:
    """The page at ``path`` (at this window size, if given), its scenario run at full speed to its end."""
    if size is not None:
        page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url + path)
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.select_option("#speed", "max")
    if "?scenario=" not in path:  # a scenario link plays by itself: a second Run would race it, and DONE could be
        page.click("button[data-action=run]")  # the first one's while the second plays
    page.wait_for_selector(DONE, timeout=120_000)


def open_view(page: Page, name: str) -> None:
    """The view ``name`` opened from the nav bar (htmx swaps the page's body), once its main is there."""
    page.click(f".views-nav a[data-view={name}]")
    expect(page.locator("main")).to_have_attribute("data-view", name)


def goto_view(page: Page, url: str, name: str) -> None:
    """The view ``name`` loaded at its own URL, its scripts ready."""
    page.goto(url + BY_NAME[name].path)
    page.wait_for_function("() => window.Plotly && window.htmx")


def run_seed_lab(page: Page, url: str, width: int, height: int) -> None:
    """The page at this size, the seed lab run at full speed to its end."""
    run_to_end(page, url, "/", (width, height))


def compare_two_runs(page: Page) -> None:
    """In the Runs view: the list refreshed, its two newest runs picked and compared, the comparison's chart drawn."""
    page.click("#runs-area [data-role=refresh]")
    picks = page.locator("#runs-compare input[name=pick]")
    expect(picks.nth(1)).to_be_attached()
    picks.nth(0).check()
    picks.nth(1).check()
    page.click("#runs-compare [data-role=compare]")
    page.wait_for_selector("#runs-compare-chart .main-svg", timeout=30_000)


def use_every_panel(page: Page, url: str, seed_file: Path, width: int, height: int, check: Callable[[str], None]) -> None:
    run_seed_lab(page, url, width, height)
    check("run")
    open_view(page, "replay")
    page.click("#replay-form button[type=submit]")
    page.wait_for_selector("#replay[data-state=done]", timeout=60_000)
    check("replay")
    open_view(page, "plan")
    page.set_input_files("#measure-file", str(seed_file))
    page.click("#measure-form button[type=submit]")
    expect(page.locator("#versus-passes")).to_be_visible(timeout=60_000)
    page.wait_for_selector("#versus-chart .main-svg")
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
    page.wait_for_selector("#advise-result .main-svg", timeout=90_000)
    check("curves, what-if, advisor")
    open_view(page, "live")
    page.fill("#live-docs", "2")
    page.click("#live-form button[type=submit]")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "done", timeout=60_000)
    check("live run")
    open_view(page, "fleet")
    page.click("#fleet-form button[type=submit]")
    page.wait_for_selector("#fleet[data-state=done]", timeout=60_000)
    check("fleet served")
    open_view(page, "runs")
    compare_two_runs(page)
    check("runs compared")
    page.set_input_files("#runs-import-file", str(seed_file))
    page.click("#runs-import button[type=submit]")
    expect(page.locator("#runs-list-box")).to_contain_text("kept")
    page.wait_for_timeout(600)  # the tiles' width transitions and the eviction lines settle
    check("file imported")
