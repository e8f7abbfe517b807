"""The page's analysis and planning area in headless Chromium: uploads, capacity curves with thresholds, what-ifs, sizing.

Expected values are derived from the seed (DESIGN.md and tests/sim/engine/test_seed.py): prompts of 5,024 tokens, a GPU of
1,344 usable blocks; the thresholds are the ones kvscope sweep reports for the same scenario.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from live_servers import run_kvscope
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

HEADER = "prompt_id,request_start,ttft,request_end,ttft_time"


def open_area(page: Page, url: str) -> None:
    page.goto(url + "/plan")
    page.wait_for_function("() => window.Plotly && window.htmx")
    expect(page.locator("#measure-form")).to_be_visible()


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("runs") / "seed.csv"
    assert run_kvscope(["simulate", "--out", str(path)]).returncode == 0
    done = run_kvscope(["analyze", str(path), "--json"])
    return path, json.loads(done.stdout)


@pytest.fixture(scope="module")
def sweep() -> dict:
    done = run_kvscope(["sweep", "--json"])
    assert done.returncode == 0
    return json.loads(done.stdout)


def test_upload_a_measurement_file_and_see_the_table(live_server: str, page: Page, seed_run: tuple[Path, dict]) -> None:
    path, report = seed_run
    open_area(page, live_server)
    page.set_input_files("#measure-file", str(path))
    page.click("#measure-form button[type=submit]")
    rows = page.locator("#measure-cells tbody tr")
    expect(rows).to_have_count(6)  # two configurations x three passes
    for cell in report["cells"]:
        row = page.locator(f'#measure-cells tr[data-config="{cell["config"]}"][data-pass="{cell["pass"]}"]')
        expect(row.locator('[data-col="p50"]')).to_have_text(f"{cell['p50_ms']:,.1f}")
        expect(row.locator('[data-col="mean"]')).to_have_text(f"{cell['mean_ms']:,.1f}")
    # Pass 2 of the seed: LMCache about 11.7x faster (the CLI's own figure, shown the page's way).
    pass2 = next(s for s in report["speedups"] if s["pass"] == 2)
    expect(page.locator('#measure-speedups tr[data-pass="2"] [data-col="p50"]')).to_have_text(f"{pass2['p50_speedup']:.1f}x")
    # The per-request chart: one series per configuration, 30 requests each.
    page.wait_for_selector("#measure-chart .main-svg")
    series = page.evaluate("[...document.getElementById('measure-chart').data].map(t => [t.name, t.x.length])")
    assert series == [["gpu", 30], ["gpu+cpu", 30]]
    # Numbered as the page numbers requests (a run's first request is seq 0 in the event log and on the run's TTFT
    # chart): each configuration's 30 requests at 0 to 29, overlaid, not end to end (0 to 29 and 30 to 59).
    xs = page.evaluate("[...document.getElementById('measure-chart').data].map(t => [...t.x])")
    assert xs == [list(range(30))] * 2


def test_a_long_doc_qa_pair_lands_in_the_same_table(live_server: str, page: Page, tmp_path: Path) -> None:
    warmup, query = tmp_path / "warmup_round.csv", tmp_path / "query_round.csv"
    warmup.write_text("\n".join([HEADER, "0,0,0.5,1,0.5", "1,1,0.7,2,1.7"]) + "\n")
    query.write_text("\n".join([HEADER, *(f"{i},{i},0.05,{i + 1},{i + 0.05}" for i in range(4))]) + "\n")
    open_area(page, live_server)
    page.click(".ldq summary")
    page.set_input_files("#measure-warmup", str(warmup))
    page.set_input_files("#measure-query", str(query))
    page.select_option("#measure-repeat-mode", "tile")
    page.click("#measure-form button[type=submit]")
    # Warmup 500 and 700 ms: p50 600; query 4 x 50 ms; the pass is labelled as long_doc_qa's tile x2.
    expect(page.locator('#measure-cells tr[data-pass="1"] [data-col="p50"]')).to_have_text("600.0")
    expect(page.locator('#measure-cells tr[data-pass="2"] td').first).to_have_text("2 tile*2")
    # long_doc_qa's TTFT gain: warmup mean 600 / query mean 50 = 12.
    expect(page.locator("#measure-pass-speedups tbody tr td")).to_have_text(["2 vs 1", "12.0x", "12.0x"])


def test_a_long_doc_qa_round_is_a_measurement_file_and_its_failed_requests_are_listed(
    live_server: str, page: Page, tmp_path: Path
) -> None:
    # The newer benchmark's columns: prompt 1 failed (successful False, ttft -1).
    query = tmp_path / "query_round.csv"
    header = "prompt_id,request_start,ttft,request_end,successful,is_miss,ttft_time"
    query.write_text("\n".join([header, "0,0,0.05,1,True,False,0.05", "1,1,-1,2,False,False,0", "2,2,0.07,3,True,False,2.07"]) + "\n")
    open_area(page, live_server)
    page.set_input_files("#measure-file", str(query))
    page.click("#measure-form button[type=submit]")
    # Two requests tabulated (50 and 70 ms: mean 60), the failure listed beside them.
    expect(page.locator('#measure-cells tr[data-pass="2"] [data-col="mean"]')).to_have_text("60.0")
    expect(page.locator("#measure-failures summary")).to_have_text("1 failed request, left out of the statistics")
    expect(page.locator("#measure-failures li")).to_contain_text("prompt_id 1 (query_round.csv line 3): successful is False")


def test_a_bad_file_shows_its_line_and_no_table(
    live_server: str, page: Page, tmp_path: Path, expected_console_errors: list[str]
) -> None:
    expected_console_errors.append("status of 422")
    bad = tmp_path / "bad.csv"
    bad.write_text("config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,570\ngpu,x,forward,1,1,5024,570\n")
    open_area(page, live_server)
    page.set_input_files("#measure-file", str(bad))
    page.click("#measure-form button[type=submit]")
    alert = page.locator("#measure-result [role=alert]")
    expect(alert).to_contain_text("bad.csv: line 3: column pass")
    expect(page.locator("#measure-cells")).to_have_count(0)  # not even the good first line was kept


def test_open_the_curves_and_see_the_threshold_marked(live_server: str, page: Page, sweep: dict) -> None:
    open_area(page, live_server)
    page.fill("#capacity-points", "12")
    page.click("#capacity-form button[type=submit]")
    block = sweep["gpu"]["block_granularity_tokens"]
    mark = page.locator('#capacity-marks li[data-mark="gpu_block"]')
    expect(mark).to_contain_text(f"same-order re-read first hits (blocks): {block:,} tokens")
    expect(page.locator('#capacity-marks li[data-mark="current"]')).to_contain_text("21,520 tokens")
    page.wait_for_selector("#capacity-hits .main-svg")
    # In the chart: a vertical line at the threshold, and pass 2's (blocks) line turning from 0 there.
    lines = page.evaluate("document.getElementById('capacity-hits').layout.shapes.map(s => [s.name, s.x0])")
    assert ["gpu_block", block] in lines
    pass2 = page.evaluate(
        "(() => { const t = [...document.getElementById('capacity-hits').data].find(t => t.meta === 'block:2');"
        " return t.x.map((x, i) => [x, t.y[i]]); })()"
    )
    assert all((hits > 0) == (x >= block) for x, hits in pass2)
    assert page.locator("#capacity-hits .shapelayer path").count() >= 3  # current and both thresholds drawn


def test_cpu_curves_mark_where_the_cpu_tier_serves_the_reread(live_server: str, page: Page, sweep: dict) -> None:
    open_area(page, live_server)
    page.select_option("#capacity-tier", "cpu")
    page.fill("#capacity-points", "8")
    page.click("#capacity-form button[type=submit]")
    served = sweep["cpu"]["all_served_tokens"]
    expect(page.locator('#capacity-marks li[data-mark="cpu_all_served"]')).to_contain_text(f"{served:,} tokens")
    page.wait_for_selector("#capacity-ttft .main-svg")
    assert page.evaluate("document.getElementById('capacity-ttft').layout.xaxis.title.text") == "CPU tier, GiB"


def test_the_curves_use_the_sidebars_scenario_and_name_its_errors(
    live_server: str, page: Page, expected_console_errors: list[str]
) -> None:
    expected_console_errors.append("status of 422")
    open_area(page, live_server)
    page.fill("#f-gpu-tokens", "10")
    page.click("#capacity-form button[type=submit]")
    expect(page.locator("#capacity-result [role=alert]")).to_contain_text("gpu_tokens")


def test_policy_what_if_shows_the_cyclic_pathology(live_server: str, page: Page) -> None:
    open_area(page, live_server)
    page.fill("#f-passes", "forward,forward")
    page.locator("#policies-form button[type=submit]").focus()
    page.keyboard.press("Enter")  # operable from the keyboard
    gpu_hit = lambda policy: page.locator(f'#policies-gpu tr[data-policy="{policy}"][data-pass="2"] [data-col="gpu-hit"]')  # noqa: E731
    expect(gpu_hit("lru")).to_have_text("0")  # the brief: LRU's same-order re-read gets nothing
    expect(gpu_hit("fifo")).to_have_text("0")
    mru, belady = (int(gpu_hit(p).inner_text().replace(",", "")) for p in ("mru", "belady"))
    assert 0 < mru <= belady <= 1344 * 16  # at most what the GPU's usable blocks hold
    expect(page.locator('#policies-gpu tr.current[data-policy="lru"]').first).to_contain_text("this scenario")
