"""The page's "Measured against predicted" in headless Chromium: an uploaded file beside the prediction, both runs.

The file is the seed lab as ``kvscope simulate --out`` writes it (a 1.5 GiB CPU tier that holds every document:
pass 2 of gpu+cpu loads from CPU). The sidebar is given a 0.5 GiB CPU tier instead: 0.5 GiB / 28,672 B per token =
18,724 tokens, fewer than the 10 x 4,864 chunked tokens the documents need, so under LRU a second pass in the same
order finds each document's chunks evicted (the cyclic scan, as on the GPU) and computes every prompt again, as in
pass 1: the prediction for gpu+cpu pass 2 is pass 1's, far above what the file measured.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from test_analysis_page import seed_run  # noqa: F401  (the fixture: the seed lab's file and its analysis)

pytestmark = pytest.mark.browser


def cell(report: dict, config: str, number: int) -> dict:
    return next(c for c in report["cells"] if c["config"] == config and c["pass"] == number)


def test_the_file_beside_the_prediction_of_a_smaller_cpu_tier(live_server: str, page: Page, seed_run: tuple[Path, dict]) -> None:
    path, report = seed_run
    page.goto(live_server + "/plan")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.fill("#f-cpu-gb", "0.5")
    page.set_input_files("#measure-file", str(path))
    page.click("#measure-form button[type=submit]")
    scope = page.locator("[data-role=versus-scope]")
    expect(scope).to_contain_text("CPU 18,724 tokens")
    expect(scope).to_have_attribute("data-source", "file")
    rows = page.locator("#versus-passes tbody tr")
    expect(rows).to_have_count(6)  # gpu and gpu+cpu x three passes
    pass1 = page.locator('#versus-passes tr[data-run="gpu+cpu"][data-pass="1"]')
    pass2 = page.locator('#versus-passes tr[data-run="gpu+cpu"][data-pass="2"]')
    # Measured: the file's own p50, as kvscope analyze reads it.
    measured = cell(report, "gpu+cpu", 2)["p50_ms"]
    expect(pass2.locator('[data-col="p50-measured"]')).to_have_text(f"{measured:,.1f}")
    # Predicted: pass 2 computes every prompt again, as pass 1 did (the small CPU tier evicted each in time).
    predicted = pass1.locator('[data-col="p50-predicted"]').inner_text()
    expect(pass2.locator('[data-col="p50-predicted"]')).to_have_text(predicted)
    error = float(predicted.replace(",", "")) - measured
    shown = pass2.locator('[data-col="p50-error"]').inner_text().split()[0]
    assert shown.startswith("+") and float(shown.replace(",", "")) == pytest.approx(error, abs=0.11)
    pct = float(pass2.locator('[data-col="p50-error"] .pct').inner_text().rstrip("%"))
    assert pct == pytest.approx(100 * error / measured, abs=0.2)  # the page's predicted is rounded to 0.1 ms
    # The p99 column is there too; gpu alone is untouched by the CPU size: no error.
    expect(page.locator('#versus-passes tr[data-run="gpu"][data-pass="2"] [data-col="p99-error"]')).to_contain_text("+0.0")
    # One chart: measured markers and a predicted line per configuration, every request of each.
    page.wait_for_selector("#versus-chart .main-svg")
    traces = page.evaluate("[...document.getElementById('versus-chart').data].map(t => [t.name, t.x.length])")
    assert traces == [["gpu measured", 30], ["gpu predicted", 30], ["gpu+cpu measured", 30], ["gpu+cpu predicted", 30]]
    # Every request listed: request 11 (seq) is gpu+cpu's second of pass 2.
    page.click("#versus-requests summary")
    expect(page.locator('#versus-requests tr[data-run="gpu+cpu"][data-seq="11"] [data-col="measured"]')).to_have_text(f"{measured:,.1f}")


def test_a_file_the_sidebar_cannot_match_is_still_analysed(live_server: str, page: Page, tmp_path: Path) -> None:
    # Unknown documents: the sidebar's seed lab (30 requests per run) is simulated whole, and 3 requests do not fit.
    path = tmp_path / "short.csv"
    path.write_text("config,pass,order,seq,doc,prompt_tokens,ttft_ms\n" + "".join(f"gpu,1,forward,{i},-1,5024,500\n" for i in range(3)))
    page.goto(live_server + "/plan")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.set_input_files("#measure-file", str(path))
    page.click("#measure-form button[type=submit]")
    expect(page.locator("[data-role=versus-problem]")).to_contain_text("3 measured requests but the scenario has 30")
    expect(page.locator('#measure-cells tr[data-config="gpu"] [data-col="p50"]')).to_have_text("500.0")
