"""Live mode through the app: ``kvscope serve --target`` over real uvicorn, emulators as targets, and the browser.

The seed-lab facts used here are derived in tests/app/live/test_live_e2e.py's docstring: 5,024-token prompts; pass 2
gets no GPU hit; with the CPU tier, each pass-2 prompt loads its 19 full chunks (4,864 tokens) from CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from live_servers import KVSCOPE, ROOT, emulator, free_port, run_kvscope
from page_checks import WRAP, frames_per_chart
from playwright.sync_api import Page, expect

from sim.calibration import measurements

pytestmark = pytest.mark.slow

ServerFactory = Callable[..., AbstractContextManager[str]]


def stream_events(url: str, timeout_s: float = 120) -> list[dict]:
    """Every SSE message of a GET stream, as ``{"type": ..., ...}`` dicts."""
    events = []
    with httpx.stream("GET", url, timeout=timeout_s) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:].strip()))
    return events


@pytest.fixture(scope="module")
def emulators() -> Iterator[dict[str, str]]:
    with emulator("--no-cpu-tier", "--speed", "20") as gpu, emulator("--cpu-gb", "1.5", "--speed", "20") as cpu:
        yield {"gpu": gpu, "gpu+cpu": cpu}


@pytest.fixture(scope="module")
def app_url(emulators: dict[str, str], live_server_factory: ServerFactory) -> Iterator[str]:
    down = f"http://127.0.0.1:{free_port()}"
    with live_server_factory(
        "--target", f"gpu={emulators['gpu']}", "--target", f"gpu+cpu={emulators['gpu+cpu']}", "--target", f"down={down}"
    ) as url:
        yield url


# -- the API ---------------------------------------------------------------------


def test_targets_show_health_model_and_capacity_but_never_urls(app_url: str) -> None:
    answer = httpx.get(app_url + "/api/live/targets", timeout=30)
    assert answer.status_code == 200
    targets = {t["name"]: t for t in answer.json()}
    assert targets["gpu"]["healthy"] and targets["gpu+cpu"]["healthy"]
    assert targets["gpu"]["model"] == "qwen2.5-1.5b" and targets["gpu"]["capacity_tokens"] == 21_520
    # Both export the external counters (vLLM does, as 0, without a connector); the CPU tier is read from the
    # configuration the server reports instead.
    assert targets["gpu+cpu"]["external_metrics"] and targets["gpu"]["external_metrics"]
    assert (targets["gpu+cpu"]["cpu_tier"], targets["gpu"]["cpu_tier"]) == ("lmcache, 1.5 GiB", "none")
    assert not targets["down"]["healthy"] and "cannot connect" in targets["down"]["error"]
    assert "127.0.0.1" not in answer.text


def test_a_seed_lab_live_run_through_the_app(app_url: str, emulators: dict[str, str]) -> None:
    before = {name: httpx.get(url + "/kvscope/emulator").json()["counters"] for name, url in emulators.items()}
    created = httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu", "gpu+cpu"], "preset": "seed-lab"}, timeout=30)
    assert created.status_code == 201, created.text
    run = created.json()
    events = stream_events(app_url + run["events"])
    measured = [e for e in events if e["type"] == "measured"]
    assert len(measured) == 60 and not [e for e in events if e["type"] == "error"]
    pass2 = {(e["run"], e["doc"]): e for e in measured if e["pass"] == 2}
    assert all(pass2[("gpu", d)]["gpu_hit_tokens"] == 0 for d in range(10))
    assert all((pass2[("gpu+cpu", d)]["gpu_hit_tokens"], pass2[("gpu+cpu", d)]["cpu_hit_tokens"]) == (0, 4864) for d in range(10))
    # Each request's prediction (its shadow ttft) comes before its measurement.
    for run_name in ("gpu", "gpu+cpu"):
        kinds = [e["type"] for e in events if e.get("run") == run_name and e["type"] in ("ttft", "measured")]
        assert kinds == ["ttft", "measured"] * 30
    passes = [e for e in events if e["type"] == "pass"]
    assert len(passes) == 6 and all("predicted" in e["summary"] for e in passes)
    # What the counters said, summed, is what each emulator's engine did during the run.
    for name, url in emulators.items():
        after = httpx.get(url + "/kvscope/emulator").json()["counters"]
        mine = [e for e in measured if e["run"] == name]
        assert sum(e["gpu_hit_tokens"] for e in mine) == after["prefix_cache_hits"] - before[name]["prefix_cache_hits"]
        if name == "gpu+cpu":
            moved = after["external_prefix_cache_hits"] - before[name]["external_prefix_cache_hits"]
            assert sum(e["cpu_hit_tokens"] for e in mine) == moved
    # The records: the measurement file, with target names, never URLs.
    records = httpx.get(app_url + run["records"], params={"format": "csv"}, timeout=30)
    assert records.status_code == 200 and "127.0.0.1" not in records.text
    rows = measurements.parse_text(records.text)
    assert len(rows) == 60 and {r.target for r in rows} == {"gpu", "gpu+cpu"}
    assert httpx.get(app_url + f"/api/live/runs/{run['id']}").json()["state"] == "finished"
    # A run streams once.
    assert httpx.get(app_url + run["events"], timeout=30).status_code == 409


def test_a_live_run_whose_client_leaves_is_stopped_and_sends_no_more_requests(app_url: str) -> None:
    created = httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu", "gpu+cpu"], "preset": "seed-lab"}, timeout=30)
    assert created.status_code == 201, created.text
    run = created.json()
    with httpx.stream("GET", app_url + run["events"], timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and json.loads(line[5:])["type"] == "measured":
                break  # one request measured of 60; then the client goes
    state_url = app_url + f"/api/live/runs/{run['id']}"
    deadline = time.monotonic() + 10
    while httpx.get(state_url, timeout=5).json()["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped = httpx.get(state_url, timeout=5).json()
    assert stopped["state"] == "stopped"
    assert httpx.get(app_url + "/healthz", timeout=5).json()["streams"]["open"] == 0
    time.sleep(1.0)  # at the emulators' speed, a run still going would measure several more requests by now
    after = httpx.get(state_url, timeout=5).json()
    assert after["measured"] == stopped["measured"] < 60
    # The targets are free again.
    again = httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu"], "docs": 2}, timeout=30)
    assert again.status_code == 201
    stream_events(app_url + again.json()["events"])


def test_a_target_that_is_down_gives_an_error_event_without_its_url(app_url: str) -> None:
    created = httpx.post(app_url + "/api/live/runs", json={"targets": ["down"], "docs": 2}, timeout=30)
    assert created.status_code == 201
    events = stream_events(app_url + created.json()["events"])
    assert [e["type"] for e in events] == ["error"]
    assert events[0]["run"] == "down" and "cannot connect" in events[0]["message"]
    assert "127.0.0.1" not in events[0]["message"]


def test_a_target_in_use_by_another_run_is_refused(app_url: str) -> None:
    first = httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu"], "docs": 2}, timeout=30)
    assert first.status_code == 201
    second = httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu", "gpu+cpu"], "docs": 2}, timeout=30)
    assert second.status_code == 409 and "gpu" in second.json()["detail"]
    stream_events(app_url + first.json()["events"])  # streaming it to the end releases the target
    third = httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu"], "docs": 2}, timeout=30)
    assert third.status_code == 201
    stream_events(app_url + third.json()["events"])


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"targets": ["gpu"], "docs": 0}, "docs"),
        ({"targets": []}, "targets"),
        ({"targets": ["gpu", "gpu"]}, "named twice"),
        ({"targets": ["gpu"], "concurrency": 65}, "concurrency"),
        ({"targets": ["gpu"], "docs": 500}, "docs"),
    ],
)
def test_bad_live_runs_are_refused_with_422(app_url: str, body: dict, fragment: str) -> None:
    answer = httpx.post(app_url + "/api/live/runs", json=body, timeout=30)
    assert answer.status_code == 422
    assert fragment in answer.text


# -- no URL from a browser ----------------------------------------------------------


@contextmanager
def canary() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server that records every request it gets; nothing in these tests may reach it."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            hits.append(f"GET {self.path}")
            self.send_response(200)
            self.end_headers()

        do_POST = do_GET  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def test_the_browser_can_never_make_the_server_contact_an_unconfigured_url(app_url: str) -> None:
    with canary() as (bait, hits):
        attempts = [
            httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu"], "url": bait}),
            httpx.post(app_url + "/api/live/runs", json={"targets": [bait]}),
            httpx.post(app_url + "/api/live/runs", json={"targets": ["gpu"], "target": {"name": "x", "url": bait}}),
            httpx.post(app_url + "/api/live/runs", json={"targets": [f"gpu={bait}"]}),
            httpx.post(app_url + "/ui/live/run", data={"targets": bait, "preset": "seed-lab"}),
            httpx.post(app_url + "/ui/live/run", data={"targets": "gpu", "url": bait, "preset": "seed-lab"}),
        ]
        for answer in attempts:
            assert answer.status_code == 422, answer.text
        assert httpx.get(app_url + "/api/live/targets", params={"url": bait}, timeout=30).status_code == 200
        assert httpx.get(app_url + "/ui/live/targets", params={"target": bait}, timeout=30).status_code == 200
        assert httpx.get(app_url + "/api/live/runs/" + bait.replace("/", "%2F") + "/events").status_code == 404
        assert hits == []


def test_non_http_targets_are_refused_at_start_up() -> None:
    result = run_kvscope(["serve", "--port", str(free_port()), "--target", "gpu=file:///etc/passwd"], timeout_s=30)
    assert result.returncode == 2 and "not an http:// or https:// URL" in result.stderr
    env = {**os.environ, "KVSCOPE_TARGETS": "gpu=ftp://example.org/"}
    result = subprocess.run(
        [*KVSCOPE, "serve", "--port", str(free_port())], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and "KVSCOPE_TARGETS" in result.stderr


# -- the page ------------------------------------------------------------------------


@pytest.mark.browser
def test_a_live_seed_lab_run_from_the_page(page: Page, app_url: str, artifacts: Path) -> None:
    page.goto(app_url + "/live")
    page.wait_for_function("() => window.Plotly && window.htmx")
    rows = page.locator("#live-targets tr")
    expect(rows.filter(has_text="gpu+cpu").locator(".live-up")).to_have_text("up")
    expect(rows.filter(has_text="down").locator(".live-down")).to_have_text("down")
    # The down target is not ticked; the two emulators are.
    expect(page.locator('#live-targets input[value="down"]')).not_to_be_checked()
    page.select_option("#live-preset", "seed-lab")
    page.evaluate(WRAP)
    page.get_by_role("button", name="Run live").click()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "done", timeout=60_000)
    points = page.evaluate("[...document.getElementById('live-chart').data].map(t => [t.name, t.x.length])")
    assert dict(points) == {"gpu measured": 30, "gpu simulated": 30, "gpu+cpu measured": 30, "gpu+cpu simulated": 30}
    # The 120 points reached Plotly at most once per animation frame, and in frames, but for the drain at the end.
    outside, twice = frames_per_chart(page.evaluate("window.__calls"), "live-chart")
    assert outside <= 1 and twice == 0, (outside, twice)
    drawn = page.evaluate("[...document.querySelectorAll('#live-chart .scatterlayer .trace')].map(t => t.querySelectorAll('.points path').length)")
    assert drawn == [30, 30, 30, 30]
    # Pass boundaries as on the TTFT chart: each target's requests numbered from 1, 10 per pass.
    expect(page.locator("#live-chart .annotation-text")).to_have_text(["pass 1 · forward", "pass 2 · forward", "pass 3 · reverse"])
    assert page.evaluate("document.getElementById('live-chart').layout.shapes.map(s => s.x0)") == [10.5, 20.5]
    # Table: measured beside predicted; pass 2 with the CPU tier loads 10 x 4,864 = 48,640 tokens from CPU.
    expect(page.locator("#live-table tbody tr")).to_have_count(6)
    row = page.locator('#live-table tr[data-run="gpu+cpu"][data-pass="2"]')
    expect(row.locator("[data-col=cpu-hit]")).to_have_text("48,640")
    expect(row.locator("[data-col=sim-cpu-hit]")).to_have_text("48,640")
    expect(page.locator('#live-table tr[data-run="gpu"][data-pass="2"] [data-col=gpu-hit]')).to_have_text("0")
    page.screenshot(path=str(artifacts / "live-seed-lab.png"), full_page=True)


@pytest.mark.browser
def test_a_target_named_for_a_configuration_has_its_colour_in_any_order(
    page: Page, emulators: dict[str, str], live_server_factory: ServerFactory
) -> None:
    # Listed gpu+cpu first, the targets took colours by position: gpu+cpu the vermillion that means gpu on every other
    # chart and badge. A configuration's name keeps its colour (--run-0 gpu, --run-1 gpu+cpu); another name, its place.
    with live_server_factory(
        "--target", f"gpu+cpu={emulators['gpu+cpu']}", "--target", f"gpu={emulators['gpu']}", "--target", f"mine={emulators['gpu']}"
    ) as url:
        page.goto(url + "/live")
        page.wait_for_function("() => window.Plotly && window.htmx")
        expect(page.locator('#live-targets input[value="mine"]')).to_be_checked()
        page.fill("#live-docs", "1")
        page.get_by_role("button", name="Run live").click()
        expect(page.locator("#live-status")).to_have_attribute("data-state", "done", timeout=60_000)
        lines = dict(page.evaluate("[...document.getElementById('live-chart').data].map(t => [t.name, t.line.color.toUpperCase()])"))
        run = page.evaluate("[0, 1, 2].map(i => getComputedStyle(document.documentElement).getPropertyValue(`--run-${i}`).trim().toUpperCase())")
        assert (lines["gpu measured"], lines["gpu+cpu measured"], lines["mine measured"]) == (run[0], run[1], run[2])
        badges = page.evaluate("Object.fromEntries([...document.querySelectorAll('#live-table .live-badge')].map(b => [b.textContent, b.className]))")
        assert badges == {"gpu+cpu": "live-badge live-run-1", "gpu": "live-badge live-run-0", "mine": "live-badge live-run-2"}


def _apart(a: dict, b: dict) -> bool:
    return a["right"] <= b["left"] or b["right"] <= a["left"] or a["bottom"] <= b["top"] or b["bottom"] <= a["top"]


@pytest.mark.browser
@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)], ids=["1440x900", "390x844"])
def test_the_live_panel_fits_and_its_legend_clears_the_pass_labels(page: Page, app_url: str, width: int, height: int) -> None:
    """The live chart's pass labels sat on the plot's top edge, under its legend ("pass 1 · forward" across "gpu
    measured"); on a phone the targets table and the preset's long name made the page 519 px wide. Four documents:
    three passes of four requests each."""
    page.set_viewport_size({"width": width, "height": height})
    page.goto(app_url + "/live")
    page.wait_for_function("() => window.Plotly && window.htmx")
    expect(page.locator("#live-targets .live-up").first).to_be_visible()
    page.uncheck('#live-targets input[value="down"]')
    page.fill("#live-docs", "4")
    page.get_by_role("button", name="Run live").click()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "done", timeout=60_000)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    labels = page.evaluate("[...document.querySelectorAll('#live-chart .annotation')].map(a => a.getBoundingClientRect().toJSON())")
    legend = page.evaluate("document.querySelector('#live-chart .legend').getBoundingClientRect().toJSON()")
    assert len(labels) == 3
    for label in labels:
        assert _apart(label, legend), (label, legend)
    for i, a in enumerate(labels):  # on a phone too, each label clears the next
        for b in labels[i + 1:]:
            assert _apart(a, b), (a, b)


@pytest.mark.browser
def test_the_live_panel_is_keyboard_operable(page: Page, app_url: str) -> None:
    page.goto(app_url + "/live")
    page.wait_for_function("() => window.htmx")
    expect(page.locator("#live-targets .live-up").first).to_be_visible()
    page.focus('#live-targets input[value="gpu"]')
    page.keyboard.press("Space")  # untick gpu
    expect(page.locator('#live-targets input[value="gpu"]')).not_to_be_checked()
    page.focus("#live-docs")
    page.keyboard.type("2")
    page.focus("#live-form button.primary")
    page.keyboard.press("Enter")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "done", timeout=60_000)
    expect(page.locator("#live-table tbody tr")).to_have_count(3)  # gpu+cpu only, three passes


@pytest.mark.browser
def test_a_live_run_without_targets_says_why_it_cannot_start(page: Page, app_url: str, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 422")
    page.goto(app_url + "/live")
    page.wait_for_function("() => window.htmx")
    expect(page.locator("#live-targets .live-up").first).to_be_visible()
    for box in page.locator("#live-targets input[type=checkbox]").all():
        box.uncheck()
    page.get_by_role("button", name="Run live").click()
    expect(page.locator("#live-run [role=alert]")).to_contain_text("targets")
    expect(page.locator("#live-view")).to_have_count(0)


@pytest.mark.browser
def test_without_targets_the_panel_says_how_to_configure_them(page: Page, live_server: str) -> None:
    page.goto(live_server + "/live")
    expect(page.locator(".live-none")).to_contain_text("kvscope serve --target")
