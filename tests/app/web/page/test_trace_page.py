"""The page's trace-replay panel in headless Chromium: the same records as the CLI, field errors, uploads, keyboard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from page_checks import select_room
from playwright.sync_api import Page, expect

from app.cli import main
from sim.simulation.replay import MAX_CHUNK_BLOCKS

pytestmark = pytest.mark.browser


@pytest.fixture()
def panel(page: Page, live_server: str) -> Page:
    """The dashboard with its trace-replay panel loaded."""
    page.goto(live_server + "/replay")
    page.wait_for_selector("#replay-form")
    page.wait_for_function("() => window.Plotly")
    return page


def replay_on_page(page: Page, gpu_blocks: str, cpu_blocks: str) -> None:
    page.fill("#replay-gpu-blocks", gpu_blocks)
    page.fill("#replay-cpu-blocks", cpu_blocks)
    page.click("#replay-form button[type=submit]")
    page.wait_for_selector("#replay[data-state=done]", timeout=60_000)


def cli(*args: str) -> dict:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_before_a_replay_the_panel_shows_no_empty_table_or_charts(panel: Page, artifacts: Path) -> None:
    result = panel.locator("#replay-result")
    expect(result).to_be_hidden()
    # The whole panel is its form and a one-line status: far shorter than the two charts alone (320 + 340 px).
    form_height = panel.locator("#replay-form").bounding_box()["height"]
    panel_height = panel.locator("#replay").bounding_box()["height"]
    assert panel_height < form_height + 150, (panel_height, form_height)
    panel.locator("#replay").screenshot(path=str(artifacts / "replay-empty.png"))
    replay_on_page(panel, "1000", "8000")
    expect(result).to_be_visible()
    expect(panel.locator("#replay-tiers tbody tr")).to_have_count(2)
    assert panel.locator("#replay-hit-chart").bounding_box()["height"] >= 300


def test_page_shows_the_clis_records_for_the_bundled_trace(panel: Page) -> None:
    replay_on_page(panel, "1000", "8000")
    expected = cli("replay", "mooncake-synthetic", "--gpu-blocks", "1000", "--cpu-blocks", "8000", "--json")
    # Every request is one point of the TTFT chart, whose hover data carries its record's numbers.
    points = panel.evaluate(
        """() => document.getElementById('replay-ttft-chart').data.flatMap(t =>
             t.customdata.map((c, i) => ({seq: c[0], prompt: c[1], gpu: c[2], cpu: c[3], computed: c[4],
                                          ttft: t.y[i], at_s: t.x[i], source: t.meta})))"""
    )
    assert len(points) == len(expected["requests"]) == 3993
    by_seq = {p["seq"]: p for p in points}
    for r in expected["requests"]:
        p = by_seq[r["seq"]]
        assert (p["prompt"], p["gpu"], p["cpu"], p["computed"], p["ttft"], p["source"]) == (
            r["prompt_tokens"], r["gpu_hit_tokens"], r["cpu_hit_tokens"], r["computed_tokens"], r["ttft_ms"], r["source"],
        )
        assert p["at_s"] == r["timestamp_ms"] / 1000
    # The hover names a request by its seq (customdata[0]), as the event log and the CLI do.
    assert all("request %{customdata[0]} ·" in t for t in panel.evaluate("document.getElementById('replay-ttft-chart').data.map(t => t.hovertemplate)"))
    # The tier table and the hit-ratio chart show the CLI's tiers and timeline.
    rows = panel.eval_on_selector_all("#replay-tiers tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert rows == [
        [t["name"].upper(), f"{t['capacity_blocks']:,}", f"{t['lookup_blocks']:,}", f"{t['hit_blocks']:,}", f"{100 * t['hit_ratio']:.1f}%"]
        for t in expected["tiers"]
    ]
    series = panel.evaluate("() => document.getElementById('replay-hit-chart').data.map(t => t.y)")
    assert series == [[w["tiers"][i]["hit_ratio"] for w in expected["timeline"]] for i in range(2)]


def test_a_field_error_is_shown_beside_the_field(panel: Page, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 422")  # the browser logs the refused request
    panel.fill("#replay-gpu-blocks", "100")
    panel.click("#replay-form button[type=submit]")
    error = panel.wait_for_selector("#replay-gpu-blocks-error")
    assert "at least 374 blocks" in error.inner_text()
    assert panel.get_attribute("#replay-gpu-blocks", "aria-invalid") == "true"
    assert "replay-gpu-blocks-error" in (panel.get_attribute("#replay-gpu-blocks", "aria-describedby") or "")
    # Corrected, the error goes and the replay runs.
    replay_on_page(panel, "400", "")
    assert panel.query_selector("#replay-gpu-blocks-error") is None
    assert panel.eval_on_selector_all("#replay-tiers tbody tr", "rows => rows.map(r => r.dataset.tier)") == ["gpu"]


def test_an_uploaded_trace_is_replayed_and_its_bad_line_named(panel: Page, tmp_path: Path, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 422")  # the browser logs the refused upload
    good = tmp_path / "mine.jsonl"
    good.write_text("\n".join(json.dumps({"timestamp": t, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}) for t in (0, 1000)))
    panel.set_input_files("#replay-file", str(good))
    replay_on_page(panel, "4", "")
    assert "of mine.jsonl" in panel.inner_text("#replay-status")
    # Two reads of one 2-block prompt: the second hits block 1 (the last-token rule keeps block 2 out): 1 of 4, 25.0%.
    assert panel.eval_on_selector_all("#replay-tiers tbody td", "cells => cells.map(c => c.textContent)") == [
        "GPU", "4", "4", "1", "25.0%",
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\nnot json\n')
    panel.set_input_files("#replay-file", str(bad))
    panel.click("#replay-form button[type=submit]")
    error = panel.wait_for_selector("#replay-file-error")
    assert "bad.jsonl: line 2: not JSON" in error.inner_text()


def test_the_form_works_from_the_keyboard(panel: Page) -> None:
    panel.focus("#replay-gpu-blocks")
    panel.keyboard.press("Control+A")
    panel.keyboard.type("500")
    panel.keyboard.press("Enter")  # submits the form, as a native form does
    panel.wait_for_selector("#replay[data-state=done]", timeout=60_000)
    assert panel.eval_on_selector_all("#replay-tiers tbody tr", "rows => rows.map(r => r.dataset.tier)") == ["gpu", "cpu"]


def test_a_refused_field_is_named_by_the_server_and_the_earlier_result_marked_stale(
    panel: Page, expected_console_errors: list[str]
) -> None:
    expected_console_errors.append("status of 422")
    replay_on_page(panel, "1000", "8000")
    # One more block per chunk than ReplayForm allows (its limit is sim.simulation.replay's MAX_CHUNK_BLOCKS; the input's max
    # attribute says so too, but the form is novalidate so the server is the one to refuse it).
    too_many = MAX_CHUNK_BLOCKS + 1
    assert panel.get_attribute("#replay-chunk-blocks", "max") == str(MAX_CHUNK_BLOCKS)
    panel.fill("#replay-chunk-blocks", str(too_many))
    with panel.expect_response(lambda r: r.url.endswith("/ui/replay") and r.request.method == "POST") as answer:
        panel.click("#replay-form button[type=submit]")
    # The server's answer is the fields redrawn (HTML), not JSON for a script to draw.
    assert answer.value.status == 422
    assert answer.value.headers["content-type"].startswith("text/html")
    error = panel.wait_for_selector("#replay-chunk-blocks-error")
    assert "chunk_blocks" in error.inner_text() and str(MAX_CHUNK_BLOCKS) in error.inner_text()
    assert panel.get_attribute("#replay-chunk-blocks", "aria-invalid") == "true"
    assert panel.input_value("#replay-chunk-blocks") == str(too_many)  # what was typed stays, to be corrected
    expect(panel.locator("#replay-status")).to_have_text("The trace cannot be replayed with these settings.")
    # The earlier answer is still there, marked as out of date, and the button works again.
    expect(panel.locator("#replay-result > .stale-note")).to_contain_text("the input was refused")
    expect(panel.locator("#replay-tiers tbody tr")).to_have_count(2)
    expect(panel.locator("#replay-form button[type=submit]")).to_be_enabled()


def test_the_ttft_axis_writes_every_tick_one_way(panel: Page) -> None:
    """The log axis of TTFTs spans 100 ms to over 10 s on the bundled trace; Plotly wrote its ticks "100", "1000",
    "10k": one number written two ways. Every tick is a plain number with thousands separated."""
    replay_on_page(panel, "2000", "20000")
    ticks = panel.evaluate("[...document.querySelectorAll('#replay-ttft-chart .ytick text')].map(t => t.textContent)")
    assert "1,000" in ticks and "10,000" in ticks, ticks
    assert all(t.replace(",", "").isdigit() for t in ticks), ticks


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (390, 844)], ids=["1024x768", "390x844"])
def test_the_trace_name_and_the_tier_table_are_whole(panel: Page, width: int, height: int) -> None:
    """At 1024 and 390 the select showed "mooncake-synthe…" (one of two columns of its fieldset), and on a phone the
    tier table ran past the panel's edge. The select is wide enough for its longest name (text, padding and arrow), and
    the table sits in a box of its own that ends inside the window (it scrolls there if it must)."""
    panel.set_viewport_size({"width": width, "height": height})
    fits = select_room(panel, "replay-trace")
    assert fits[0] <= fits[1], fits
    replay_on_page(panel, "2000", "20000")
    box = panel.evaluate(
        """() => { const w = document.getElementById('replay-tiers').closest('.table-wrap');
             return w && [getComputedStyle(w).overflowX, w.getBoundingClientRect().right, document.documentElement.scrollWidth]; }"""
    )
    assert box is not None, "the tier table has no box of its own"
    assert box[0] == "auto" and box[1] <= width and box[2] <= width, box


def test_a_tier_behind_the_cpu_gets_its_row_and_its_series(panel: Page) -> None:
    # The bundled trace through 1,000 GPU blocks, 2,000 CPU blocks (LRU) and an nvme tier of 20,000 blocks of
    # 512 tokens behind them: three rows, three hit-ratio series, and every request one TTFT point, those served
    # from nvme drawn as nvme's.
    panel.select_option("#replay-cpu-backend", "lmcache")
    panel.fill("#replay-storage-tiers", "nvme:10240000t")
    replay_on_page(panel, "1000", "2000")
    expected = cli("replay", "mooncake-synthetic", "--gpu-blocks", "1000", "--cpu-blocks", "2000",
                   "--storage-tier", "nvme:10240000t", "--json", "--no-save")
    assert panel.eval_on_selector_all("#replay-tiers tbody tr", "rows => rows.map(r => r.dataset.tier)") == ["gpu", "cpu", "nvme"]
    assert [t["name"] for t in expected["tiers"]] == ["gpu", "cpu", "nvme"] and expected["tiers"][2]["hit_blocks"] > 0
    names = panel.evaluate("() => document.getElementById('replay-hit-chart').data.map(t => t.name)")
    assert names == ["GPU hit ratio", "CPU hit ratio", "nvme hit ratio"]
    # The tier table names each tier as the chart does (sim.engine.events.tier_label: a storage tier by its own name).
    assert panel.eval_on_selector_all("#replay-tiers tbody tr", "rows => rows.map(r => r.cells[0].textContent)") == ["GPU", "CPU", "nvme"]
    series = panel.evaluate("() => document.getElementById('replay-hit-chart').data.map(t => t.y)")
    assert series == [[w["tiers"][i]["hit_ratio"] for w in expected["timeline"]] for i in range(3)]
    points = panel.evaluate("() => document.getElementById('replay-ttft-chart').data.map(t => [t.meta, t.x.length])")
    counts = {source: n for source, n in points}
    assert sum(counts.values()) == len(expected["requests"]) == 3993
    assert counts["nvme"] == sum(r["source"] == "nvme" for r in expected["requests"]) > 0
    # Hovering a request says what the tiers behind the CPU served it, beside the GPU, the CPU and the computed.
    served = panel.evaluate("() => document.getElementById('replay-ttft-chart').data.flatMap(t => t.customdata.map(c => [c[0], c[5]]))")
    assert sorted(served) == sorted([r["seq"], r["disk_hit_tokens"]] for r in expected["requests"])
    hovers = panel.evaluate("() => document.getElementById('replay-ttft-chart').data.map(t => t.hovertemplate)")
    assert all("behind the CPU %{customdata[5]:,}" in h for h in hovers)
