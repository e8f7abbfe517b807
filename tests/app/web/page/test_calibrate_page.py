"""Calibrating the cost model in the page (headless Chromium): fit a measurement file, use its costs, a saved profile,
bad files named inline.

The measurement file is simulated under chosen constants (CHOSEN), so the fit must give them back; the seed lab's
predicted p50s under them are derived by hand from its token counts (tests/sim/engine/test_seed.py has the derivations): a
prompt is 5,024 tokens; pass 1 computes all of it; pass 2 with the CPU tier loads its 19 full 256-token chunks
(4,864 tokens) and computes the other 160 (not a full chunk, so nothing is written through); a computed prompt
writes its 4,864 chunked tokens through to CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from live_servers import run_kvscope
from page_tour import goto_view, open_view

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"
CHOSEN = {
    "overhead_ms": 10.0,
    "prefill_ms_per_token": 0.1,
    "load_cpu_ms_per_token": 0.002,
    "load_disk_ms_per_token": 0.01,
    "store_ms_per_token": 0.004,
}
# Under CHOSEN: pass 1 on the GPU alone, 10 + 0.1 x 5,024; with the CPU tier, plus 0.004 x 4,864 written through;
# pass 2 with the CPU tier, 10 + 0.002 x 4,864 loaded + 0.1 x 160 computed.
GPU_PASS1_P50 = 10 + 0.1 * 5024  # 512.4
CPU_PASS1_P50 = GPU_PASS1_P50 + 0.004 * 4864  # 531.856
CPU_PASS2_P50 = 10 + 0.002 * 4864 + 0.1 * 160  # 35.728


@pytest.fixture(scope="module")
def chosen_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(measurement file simulated under CHOSEN, the profile kvscope calibrate saves for it)."""
    folder = tmp_path_factory.mktemp("calibrate")
    (folder / "chosen.json").write_text(json.dumps({"costs": CHOSEN}))
    run = folder / "run.csv"
    done = run_kvscope(["simulate", "--costs", str(folder / "chosen.json"), "--out", str(run)])
    assert done.returncode == 0, done.stderr
    saved = folder / "cli.costs.json"
    done = run_kvscope(["calibrate", str(run), "--out", str(saved)])
    assert done.returncode == 0, done.stderr
    return run, saved


def open_page(page: Page, url: str) -> None:
    """The Plan view, where the calibration panel is."""
    goto_view(page, url, "plan")
    expect(page.locator("#calibrate-form")).to_be_visible()


def p50(page: Page, run: str, number: int) -> float:
    return float(page.text_content(f'#results-table tr[data-run="{run}"][data-pass="{number}"] [data-col=p50]').replace(",", ""))


def run_to_the_end(page: Page) -> None:
    # The status still says "done" from the previous run until the new one starts: mark it stale first,
    # so that only the new run's end can satisfy the wait.
    page.evaluate("document.querySelector('#player-status').dataset.state = 'stale'")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)


def test_calibrate_a_file_download_its_profile_and_run_with_its_costs(
    page: Page, live_server: str, chosen_run: tuple[Path, Path], tmp_path: Path
) -> None:
    run, saved = chosen_run
    goto_view(page, live_server, "simulate")
    page.select_option("#speed", "max")
    server_p50 = p50(page, "gpu", 1)  # the page's first table, with the server's costs
    expect(page.locator("#scenario-costs")).to_contain_text("Costs: the server's")
    open_view(page, "plan")

    page.set_input_files("#calibrate-file", str(run))
    page.click("#calibrate-form button[type=submit]")
    expect(page.locator("#calibrate-summary")).to_contain_text("run.csv: fit per request, hit tokens from the file, 60 requests")
    # The constants the file was made with come back (within 2%), and the fit is (nearly) exact.
    for name in ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token"):
        shown = float(page.get_attribute(f'#calibrate-constants tr[data-name="{name}"] [data-value]', "data-value") or "nan")
        assert shown == pytest.approx(CHOSEN[name], rel=0.02), name
    expect(page.locator('#calibrate-constants tr[data-name="load_disk_ms_per_token"]')).to_contain_text("not in the data")
    assert float(page.inner_text('#calibrate-summary [data-value="r2"]')) > 0.999
    # The per-cell table: two configurations x three passes, each within a percent of what was measured.
    expect(page.locator("#calibrate-cells tbody tr")).to_have_count(6)
    for error in page.locator("#calibrate-cells [data-col$=-error]").all_inner_texts():
        assert abs(float(error.rstrip("%"))) < 1.0
    expect(page.locator('#calibrate-cells tr[data-config="gpu"][data-pass="1"] [data-col=p50]')).to_have_text(f"{GPU_PASS1_P50:.1f}")
    # Those errors are in-sample (the fit was made from this very file): the panel says so, and where a prediction is tested.
    expect(page.locator("#calibrate-cells caption")).to_contain_text("in-sample")
    expect(page.locator("#calibrate-result [data-role=in-sample]")).to_contain_text("made from these very measurements")

    # The download is the very file kvscope calibrate saves for the same measurements.
    with page.expect_download() as download:
        page.click("#calibrate-download")
    assert download.value.suggested_filename == "run.costs.json"
    download.value.save_as(tmp_path / "page.costs.json")
    assert (tmp_path / "page.costs.json").read_bytes() == saved.read_bytes()

    page.click("#calibrate-use")
    costs_line = page.locator("#scenario-costs")
    expect(costs_line).to_contain_text("Costs: calibrated from run.csv (R²")
    # The run Simulate shows was simulated with the earlier costs: it says so, and both places say to press Run.
    expect(page.locator("#calibrate-use-status")).to_contain_text("Press Run")
    expect(page.locator("section:has(> .panel-head #policies-title) [data-role=sidebar-scenario]")).to_contain_text("costs: calibrated from run.csv")
    open_view(page, "simulate")
    expect(costs_line).to_contain_text("Costs: calibrated from run.csv (R²")  # the sidebar, kept between the views
    expect(page.locator("#run > .stale-note")).to_contain_text("press Run to simulate with them")
    page.select_option("#speed", "max")
    run_to_the_end(page)
    expect(page.locator("#run > .stale-note")).to_have_count(0)
    assert p50(page, "gpu", 1) == pytest.approx(GPU_PASS1_P50, abs=0.15)
    assert p50(page, "gpu+cpu", 1) == pytest.approx(CPU_PASS1_P50, abs=0.15)
    assert p50(page, "gpu+cpu", 2) == pytest.approx(CPU_PASS2_P50, abs=0.15)
    assert server_p50 != pytest.approx(GPU_PASS1_P50, abs=1)  # the costs did change the prediction
    # Still the lab's scenario, but these costs were fitted to another measurement (run.csv), not the lab's: the lab's
    # numbers are no longer put beside the prediction as if it stood for them; the table says why and where to go.
    expect(page.locator("#results-table [data-col=measured-p50]")).to_have_count(0)
    expect(page.locator("[data-role=lab-hidden]")).to_contain_text("these are calibrated from run.csv")
    expect(page.locator("[data-role=table-costs]")).to_contain_text("calibrated from run.csv")

    # Reset: the server's costs again, as before calibrating.
    page.click("#scenario-costs button")
    expect(costs_line).to_contain_text("Costs: the server's")
    expect(page.locator("#scenario-form input[name=costs]")).to_have_count(0)
    run_to_the_end(page)
    assert p50(page, "gpu", 1) == server_p50
    # The server's costs are the fit to the lab's table: its measurement is beside the prediction again (BRIEF.md).
    expect(page.locator('#results-table tr[data-run="gpu"][data-pass="2"] [data-col=measured-p50]')).to_have_text("576.2")


def test_a_saved_profile_is_used_at_once(page: Page, live_server: str, tmp_path: Path) -> None:
    bare = tmp_path / "mine.json"
    bare.write_text(json.dumps(CHOSEN))  # the constants alone, without "costs" and "fit"
    open_page(page, live_server)
    page.set_input_files("#profile-file", str(bare))
    page.click("#profile-form button[type=submit]")
    expect(page.locator("#profile-summary")).to_contain_text("mine.json is in the sidebar's form")
    expect(page.locator('#profile-constants tr[data-name="overhead_ms"] [data-value]')).to_have_text("10")
    expect(page.locator("#scenario-costs")).to_contain_text("Costs: profile mine.json")
    open_view(page, "simulate")
    page.select_option("#speed", "max")
    run_to_the_end(page)
    assert p50(page, "gpu", 1) == pytest.approx(GPU_PASS1_P50, abs=0.05)
    # The analysis panels take the sidebar's costs too: the what-if's LRU row is this very run.
    open_view(page, "plan")
    page.click("#policies-form button[type=submit]")
    expect(page.locator('#policies-gpu tr[data-policy="lru"][data-pass="1"] td.num').nth(2)).to_have_text(f"{GPU_PASS1_P50:.1f}")


def test_bad_files_are_named_inline_and_nothing_is_lost(
    page: Page, live_server: str, chosen_run: tuple[Path, Path], tmp_path: Path, expected_console_errors: list[str]
) -> None:
    expected_console_errors.append("status of 422")
    run, saved = chosen_run
    open_page(page, live_server)
    page.set_input_files("#profile-file", str(saved))
    page.click("#profile-form button[type=submit]")
    costs_line = page.locator("#scenario-costs")
    expect(costs_line).to_contain_text("Costs: profile cli.costs.json (R² 1.0000)")

    bad = tmp_path / "bad.csv"
    lines = run.read_text().splitlines()
    fields = lines[2].split(",")
    fields[6] = "fast"  # ttft_ms of the second request
    lines[2] = ",".join(fields)
    bad.write_text("\n".join(lines) + "\n")
    page.set_input_files("#calibrate-file", str(bad))
    page.click("#calibrate-form button[type=submit]")
    expect(page.locator("#calibrate-result [role=alert]")).to_contain_text("bad.csv: line 3: column ttft_ms: 'fast' is not valid")
    expect(page.locator("#calibrate-constants")).to_have_count(0)

    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"costs": {**CHOSEN, "overhead_ms": -5}}))
    page.set_input_files("#profile-file", str(wrong))
    page.click("#profile-form button[type=submit]")
    expect(page.locator("#profile-result [role=alert]")).to_contain_text(
        "wrong.json: not a cost profile (costs.overhead_ms: Input should be greater than or equal to 0)"
    )
    # Neither error touched the costs in use, the other panel's message, or the run area (in Simulate).
    expect(costs_line).to_contain_text("Costs: profile cli.costs.json")
    expect(page.locator("#calibrate-result [role=alert]")).to_contain_text("bad.csv: line 3")
    open_view(page, "simulate")
    expect(page.locator("#run-view .lane")).to_have_count(2)
    expect(costs_line).to_contain_text("Costs: profile cli.costs.json")


def test_a_fit_the_measurements_cannot_determine_is_flagged_with_what_would_determine_it(
    live_server: str, page: Page, tmp_path: Path
) -> None:
    # A long_doc_qa warmup round of the sidebar's seed lab (10 documents): every request computes and writes
    # through a whole prompt, one request shape for the three constants it touches.
    round_file = tmp_path / "warmup_round.csv"
    lines = ["prompt_id,request_start,ttft,request_end,ttft_time"] + [f"{i},{i},0.6,{i + 1},{i + 0.6}" for i in range(10)]
    round_file.write_text("\n".join(lines) + "\n")
    open_page(page, live_server)
    page.set_input_files("#calibrate-file", str(round_file))
    page.click("#calibrate-form button[type=submit]")
    expect(page.locator("#calibrate-identifiability")).to_contain_text("1 request shape for 3 constants (rank 1)")
    expect(page.locator("#calibrate-identifiability li").first).to_contain_text("overhead_ms is not determined")
    expect(page.locator('#calibrate-constants tr[data-name="store_ms_per_token"] [data-undetermined]')).to_have_text("not determined")


def test_the_fitted_constants_fit_the_panel_at_1024(page: Page, live_server: str, chosen_run: tuple[Path, Path]) -> None:
    """At 1024 wide the analysis area is about 640 px: the constants table's last column ("writing one computed token
    through to CPU", "loading one token of KV from disk" and its "not in the data" tag) was one line each and ran out
    of the box. It wraps as prose, so the whole table is in view."""
    run, _ = chosen_run
    page.set_viewport_size({"width": 1024, "height": 768})
    open_page(page, live_server)
    page.set_input_files("#calibrate-file", str(run))
    page.click("#calibrate-form button[type=submit]")
    expect(page.locator('#calibrate-constants tr[data-name="load_disk_ms_per_token"]')).to_contain_text("not in the data")
    box = page.locator("#calibrate-constants").locator("xpath=..")
    assert box.evaluate("w => w.scrollWidth <= w.clientWidth"), box.evaluate("w => [w.scrollWidth, w.clientWidth]")
