"""The dashboard in headless Chromium: the seed lab played to the end, Step, inline errors, presets, the keyboard.

Expected states come from the seed's arithmetic (tests/sim/engine/test_seed.py has the derivations): a prompt is 5,024
tokens, the GPU holds 21,504 = 4.28 prompts, and eviction takes a document's tail before its head.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from live_servers import ROOT
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

PROMPT = 5024
DONE = "#player-status[data-state=done]"


def open_dashboard(page: Page, url: str, speed: str = "max") -> None:
    page.goto(url + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.select_option("#speed", speed)


def run_points(page: Page) -> dict[str, int]:
    """Points per configuration in the TTFT chart's data, and drawn as markers in its SVG."""
    # The chart draws a step's points on the next animation frame, after the step is applied: on a loaded machine
    # that frame can come after the status says so. Read once nothing is left to draw.
    page.evaluate("() => window.kvscope.plot.settled()")
    data = page.evaluate("[...document.getElementById('ttft-chart').data].filter(t => t.meta === 'run').map(t => [t.name, t.x.length])")
    drawn = page.evaluate("[...document.querySelectorAll('#ttft-chart .scatterlayer .trace')].map(t => t.querySelectorAll('.points path').length)")
    points = dict(data)
    assert list(points.values()) == drawn[: len(points)]  # the shape-legend traces come after, without points
    return points


def gpu_tiles(page: Page, run: str) -> list[tuple[int, int]]:
    """(document, cached tokens) of the tiles in a lane's GPU bar, least recently used first."""
    tiles = page.evaluate(
        """run => [...document.querySelectorAll(`.lane[data-run="${run}"] .tier[data-tier=gpu] .tile:not(.leaving)`)]
                  .map(t => [Number(t.dataset.doc), Number(t.dataset.tokens)])""",
        run,
    )
    return [(doc, tokens) for doc, tokens in tiles]


def cell(page: Page, run: str, number: int, col: str) -> str:
    return page.inner_text(f'#results-table tr[data-run="{run}"][data-pass="{number}"] [data-col={col}]').strip()


def test_seed_lab_plays_to_the_end(page: Page, live_server: str, artifacts: Path) -> None:
    open_dashboard(page, live_server)
    # Record every distinct state of the gpu lane's GPU bar while the run plays, as each step is applied (at full speed
    # the player applies several steps per 12 ms slice, so the DOM is not observed between them by a MutationObserver).
    page.evaluate(
        """() => {
          window.__gpuBars = new Set();
          document.addEventListener('kvscope:step', () => {
            const tiles = document.querySelectorAll('.lane[data-run="gpu"] .tier[data-tier=gpu] .tile:not(.leaving)');
            window.__gpuBars.add([...tiles].map(t => t.dataset.doc).join(','));
          });
        }"""
    )
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)

    assert run_points(page) == {"gpu": 30, "gpu+cpu": 30}
    # Pass 3 reads 9..0, so the GPU ends with 3, 2, 1, 0 whole and what is left of 4 (its head) oldest:
    # 21,504 - 4 x 5,024 = 1,408 tokens.
    assert gpu_tiles(page, "gpu") == [(4, 21_504 - 4 * PROMPT), (3, PROMPT), (2, PROMPT), (1, PROMPT), (0, PROMPT)]
    # The bar changed with the requests: at least one state per document of pass 1 as it filled up.
    assert page.evaluate("window.__gpuBars.size") >= 10

    # All six rows, pass 2 of gpu with zero GPU hits, and the CPU tier's speed-up near the brief's 11.9x.
    assert page.locator("#results-table tbody tr:visible").count() == 6
    assert cell(page, "gpu", 2, "gpu-hit") == "0"
    speedup = float(re.match(r"([\d.]+)x", cell(page, "gpu+cpu", 2, "speedup")).group(1))
    assert 10.7 < speedup < 13.1
    # The lab's measurements beside the predictions (BRIEF.md's table).
    assert (cell(page, "gpu", 2, "measured-p50"), cell(page, "gpu+cpu", 2, "measured-p50")) == ("576.2", "48.6")
    assert cell(page, "gpu+cpu", 2, "measured-speedup") == "11.9x"  # 576.2 / 48.6 = 11.86

    # The log has one line per request and configuration, in words.
    assert page.locator("#event-log li[data-seq]").count() == 60
    line = page.inner_text('#event-log li[data-run="gpu+cpu"][data-seq="10"]')
    assert "req 10 · pass 2 · doc 0: GPU miss, CPU hit: loaded 4,864 tokens (19 chunks)" in line
    page.wait_for_timeout(800)  # let the last tiles finish sliding in and out before the picture
    page.screenshot(path=str(artifacts / "dashboard-seed-lab.png"), full_page=True)


def test_pass_boundaries_are_drawn_and_labelled(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    # The seed lab reads 10 documents per pass, requests numbered by their seq from 0: passes 2 and 3 start at
    # requests 10 and 20, so their boundaries sit between two requests, at 9.5 and 19.5; every pass is labelled at its start.
    expect(page.locator("#ttft-chart .annotation-text")).to_have_text(["pass 1 · forward", "pass 2 · forward", "pass 3 · reverse"])
    assert page.evaluate("document.getElementById('ttft-chart').layout.shapes.map(s => s.x0)") == [9.5, 19.5]
    expect(page.locator("#ttft-chart .shapelayer path")).to_have_count(2)


def test_step_advances_exactly_one_request(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    status = page.locator("#player-status")
    page.click("button[data-action=step]")
    expect(status).to_have_attribute("data-applied", "1")
    expect(status).to_have_attribute("data-state", "paused")
    assert run_points(page) == {"gpu": 1, "gpu+cpu": 1}
    assert page.locator("#event-log li[data-seq]").count() == 2
    assert gpu_tiles(page, "gpu") == [(0, PROMPT)]

    page.click("button[data-action=step]")
    expect(status).to_have_attribute("data-applied", "2")
    page.wait_for_timeout(600)  # paused: nothing more may happen on its own
    expect(status).to_have_attribute("data-applied", "2")
    assert run_points(page) == {"gpu": 2, "gpu+cpu": 2}
    assert gpu_tiles(page, "gpu") == [(0, PROMPT), (1, PROMPT)]
    # The CPU tier holds a prompt's full 256-token chunks only: 19 x 256 = 4,864 tokens each.
    cpu = page.evaluate("[...document.querySelectorAll('.lane[data-run=\"gpu+cpu\"] .tier[data-tier=cpu] .tile')].map(t => Number(t.dataset.tokens))")
    assert cpu == [4864, 4864]
    expect(status).to_contain_text("Request 1 (2 of 30)")  # seq 1, the second played


def test_pause_stops_and_play_goes_on(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server, speed="5")
    page.click("button[data-action=run]")
    status = page.locator("#player-status")
    expect(status).to_have_attribute("data-state", "playing")
    page.wait_for_function("() => Number(document.getElementById('player-status').dataset.applied) >= 2")
    page.click("button[data-action=pause]")
    expect(status).to_have_attribute("data-state", "paused")
    held = status.get_attribute("data-applied")
    page.wait_for_timeout(700)  # at 5 requests/s, three more would have been applied
    assert status.get_attribute("data-applied") == held
    page.select_option("#speed", "max")
    page.click("button[data-action=play]")
    page.wait_for_selector(DONE, timeout=30_000)


def test_invalid_field_shows_an_inline_error(page: Page, live_server: str, expected_console_errors: list[str]) -> None:
    expected_console_errors.append(r"status of 422")  # Chromium logs every 4xx response
    open_dashboard(page, live_server)
    page.fill("#f-docs", "0")
    page.click("button[data-action=run]")
    error = page.locator("#f-docs-error")
    expect(error).to_contain_text("greater than or equal to 1")
    expect(page.locator("#f-docs")).to_have_attribute("aria-invalid", "true")
    # The rest of the page is still there.
    expect(page.locator("#run-view .lane")).to_have_count(2)
    expect(page.locator("#player-status")).to_have_attribute("data-state", "idle")

    # A problem of the combination is shown at the field to change, naming the rule.
    page.fill("#f-docs", "10")
    page.fill("#f-chunk-size", "100")
    page.click("button[data-action=run]")
    expect(page.locator("#f-chunk-size-error")).to_contain_text("must be a multiple of block_size (16)")
    expect(error).to_have_count(0)

    page.fill("#f-chunk-size", "256")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    expect(page.locator("#f-chunk-size-error")).to_have_count(0)


def test_preset_menu_fills_the_fields(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    page.select_option("#f-preset", "three-tiers")
    expect(page.locator("#f-docs")).to_have_value("20")
    expect(page.locator("#f-passes")).to_have_value("forward,random@1,random@2")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    # 20 documents x 3 passes, and a third lane with a disk tier.
    assert run_points(page) == {"gpu": 60, "gpu+cpu": 60, "gpu+cpu+disk": 60}
    expect(page.locator('.lane[data-run="gpu+cpu+disk"] .tier[data-tier=disk]')).to_have_count(1)
    # Not the lab's scenario: no measured columns.
    expect(page.locator("#results-table th.measured")).to_have_count(0)


def test_the_log_names_the_disk_tier_as_the_table_does(page: Page, live_server: str) -> None:
    # three-tiers: 20 documents, 1 GB CPU (about 7 documents), 4 GB disk (all 20); the random passes re-read documents
    # neither GPU nor CPU still holds, so the disk serves some. The log's words for the tier are the table's header's
    # (one definition, sim.engine.events.TIER_LABELS, carried to the scripts by the body's data-tier-labels).
    open_dashboard(page, live_server)
    page.select_option("#f-preset", "three-tiers")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    headers = page.locator("#results-table thead th").all_inner_texts()
    assert any(h.startswith("Disk hit tokens") for h in headers), headers
    lines = page.locator('#event-log li[data-run="gpu+cpu+disk"]').all_inner_texts()
    assert any("Disk hit: loaded" in line for line in lines), lines[:5]
    assert not any("disk hit" in line for line in lines)


def legend_sources(page: Page) -> list[str]:
    """The TTFT chart's legend entries for the marker shapes (the traces without points, after the runs')."""
    return page.evaluate("[...document.getElementById('ttft-chart').data].filter(t => t.meta === 'legend').map(t => t.name)")


def test_the_ttft_legend_names_only_the_sources_the_run_can_have(page: Page, live_server: str) -> None:
    """The legend listed "loaded from disk" for the seed lab, whose configurations are gpu and gpu+cpu: no request can
    come from a disk there. With the three-tiers preset (a gpu+cpu+disk lane) it can, and the legend says so."""
    open_dashboard(page, live_server)
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    assert set(run_points(page)) == {"gpu", "gpu+cpu"}
    assert legend_sources(page) == ["GPU hit", "loaded from CPU", "computed"]
    page.select_option("#f-preset", "three-tiers")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)
    assert set(run_points(page)) == {"gpu", "gpu+cpu", "gpu+cpu+disk"}
    assert legend_sources(page) == ["GPU hit", "loaded from CPU", "loaded from disk", "computed"]


def test_keyboard_alone_runs_the_dashboard(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    page.focus("#f-docs")
    page.keyboard.press("Tab")  # to tokens per document
    expect(page.locator("#f-doc-tokens")).to_be_focused()
    page.focus("button[data-action=step]")
    page.keyboard.press("Enter")
    expect(page.locator("#player-status")).to_have_attribute("data-applied", "1")
    page.focus("button[data-action=play]")
    page.keyboard.press("Space")
    page.wait_for_selector(DONE, timeout=30_000)
    # Every control has a label.
    unlabelled = page.evaluate(
        """[...document.querySelectorAll('input, select')].filter(e => !(e.labels && e.labels.length)).map(e => e.id || e.name)"""
    )
    assert unlabelled == []


def test_vendored_htmx_is_the_pinned_release() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "vendor_assets.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_table_help_names_every_ttft_figure_the_table_shows(page: Page, live_server: str) -> None:
    open_dashboard(page, live_server)
    headers = [h.strip() for h in page.locator("#results-table thead th").all_inner_texts()]
    # The TTFT columns are the predicted ones in ms ("p50 ms", ...; the lab's columns are "measured ... ms").
    figures = [h.removesuffix(" ms") for h in headers if h.endswith(" ms") and not h.startswith("measured")]
    assert figures == ["p50", "mean", "p90", "p99"]  # what the table shows: the reviewed page's four columns
    help_text = " ".join(page.text_content(".panel-table .panel-help").split())
    lead, sep, _ = help_text.partition(" TTFT per configuration and pass")
    assert sep, help_text
    assert re.split(r", | and ", lead) == figures, help_text  # every figure the table shows, in its order
