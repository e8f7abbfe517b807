"""A Run is simulated once, by its stream: ``/ui/run`` answers with the panels planned from the scenario (no numbers
in the table), and the table is filled in from the stream's own events. In headless Chromium; the expected numbers
come from ``POST /api/simulate`` (the JSON result) for the same scenario, formatted as the page formats them."""

from __future__ import annotations

import html
import json
import re

import httpx
import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.browser

DONE = "#player-status[data-state=done]"
SCENARIO = {"docs": 6, "passes": "forward,forward,reverse", "cpu_gb": 0.5}


def ms(value: float) -> str:
    return f"{value:,.1f}"


def quantile(values: list[float], q: float) -> float:
    # Linear interpolation between the closest ranks (numpy's default), as every quantile of kvscope.
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def test_the_run_answer_has_no_numbers_until_its_stream_brings_them(live_server: str, page: Page) -> None:
    form = {"preset": "seed-lab", **{k: str(v) for k, v in SCENARIO.items()}}
    planned = httpx.post(f"{live_server}/ui/run", data=form, headers={"Origin": live_server}, timeout=30)
    assert planned.status_code == 200, planned.text
    # The table's rows are there, pending, their numbers not yet known: nothing was simulated to answer.
    assert planned.text.count("data-pending") == 6  # gpu and gpu+cpu x three passes
    assert 'data-col="p50">–<' in planned.text

    expected = httpx.post(f"{live_server}/api/simulate", json=SCENARIO, timeout=30).json()
    page.goto(live_server + "/")
    page.wait_for_function("() => window.Plotly && window.htmx")
    page.fill("#f-docs", "6")
    page.fill("#f-cpu-gb", "0.5")
    page.select_option("#speed", "max")
    page.click("button[data-action=run]")
    page.wait_for_selector(DONE, timeout=30_000)

    def cell(run: str, number: int, col: str) -> str:
        return page.inner_text(f'#results-table tr[data-run="{run}"][data-pass="{number}"] [data-col="{col}"]').strip()

    speedups = {(c["candidate"], c["pass"]): c for c in expected["comparison"]}
    for run in expected["runs"]:
        for p in run["passes"]:
            n = p["pass"]
            assert cell(run["name"], n, "p50") == ms(p["p50_ms"])
            assert cell(run["name"], n, "mean") == ms(p["mean_ms"])
            assert cell(run["name"], n, "p90") == ms(p["p90_ms"])
            ttfts = [r["ttft_ms"] for r in run["requests"] if r["pass"] == n]
            assert cell(run["name"], n, "p99") == ms(round(quantile(ttfts, 0.99), 3))
            assert cell(run["name"], n, "gpu-hit") == f"{p['gpu_hit_tokens']:,}"
            assert cell(run["name"], n, "computed") == f"{p['computed_tokens']:,}"
            prompt = sum(r["prompt_tokens"] for r in run["requests"] if r["pass"] == n)
            rate = 100 * p["gpu_hit_tokens"] / prompt
            gib = p["gpu_hit_tokens"] * expected["scenario"]["kv_bytes_per_token"] / 2**30
            # A no-break space keeps GiB with its number when the cell wraps to two lines.
            assert cell(run["name"], n, "gpu-hit-share") == f"{rate:.1f}% · {gib:.3f}\u00a0GiB"
            if run["name"] != "gpu":
                assert cell(run["name"], n, "cpu-hit") == f"{p['tier_hits'].get('cpu', 0):,}"
                s = speedups[(run["name"], n)]
                shown = f"{s['p50_speedup']:.2f}x" if s["p50_speedup"] < 2 else f"{s['p50_speedup']:.1f}x"
                assert cell(run["name"], n, "speedup").startswith(shown)


def test_the_chart_axis_is_bounded_before_any_point(live_server: str, page: Page) -> None:
    # No request can take longer than every prompt token at the dearest of computing or loading, written through too:
    # overhead + prompt x (max(prefill, load cpu, load disk) + store), with the costs the result reports.
    costs = httpx.post(f"{live_server}/api/simulate", json={}, timeout=30).json()["scenario"]["costs"]
    dearest = max(costs["prefill_ms_per_token"], costs["load_cpu_ms_per_token"], costs["load_disk_ms_per_token"])
    bound = costs["overhead_ms"] + 5024 * (dearest + costs["store_ms_per_token"])
    page.goto(live_server + "/")
    page.wait_for_function("() => window.htmx")
    page.click("button[data-action=step]")
    page.wait_for_selector('#run-stream[data-player="attached"]', state="attached")
    assert float(page.get_attribute("#ttft-chart", "data-ttft-max-ms") or "nan") == pytest.approx(bound, abs=0.001)


def test_the_checked_run_is_streamed_once_from_its_token(live_server: str) -> None:
    # /ui/run leaves the checked scenario under a token: the stream takes it without the scenario being sent again,
    # and a token is good for one stream only.
    form = {"preset": "seed-lab", "docs": "2", "passes": "forward"}
    planned = httpx.post(f"{live_server}/ui/run", data=form, headers={"Origin": live_server}, timeout=30)
    found = re.search(r'hx-post="/ui/run/stream"[^>]*hx-vals="([^"]+)"', planned.text)
    assert found, planned.text[:500]
    token = json.loads(html.unescape(found.group(1)))["token"]
    assert "/api/simulate/stream" not in planned.text
    with httpx.stream("POST", f"{live_server}/ui/run/stream", json={"token": token}, headers={"Origin": live_server}, timeout=30) as response:
        assert response.status_code == 200
        kinds = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")]
    # Two runs (gpu, gpu+cpu) of two requests each: a ttft per request, a pass and a done per run.
    assert kinds.count("ttft") == 4 and kinds.count("pass") == 2 and kinds.count("done") == 2
    again = httpx.post(f"{live_server}/ui/run/stream", json={"token": token}, headers={"Origin": live_server}, timeout=30)
    assert again.status_code == 410
    assert httpx.post(f"{live_server}/ui/run/stream", json={"token": "nothing"}, headers={"Origin": live_server}, timeout=30).status_code == 410
