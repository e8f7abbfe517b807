"""The sizing advisor over HTTP (a real uvicorn) and on the page (headless Chromium): the CLI's answer, progress, the chart."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from tests.sim.advise.test_advise import cli


def test_api_equals_the_cli(live_server: str) -> None:
    body = {"scenario": {"preset": "seed-lab"}, "p50_ms": 100, "pass": 2, "buy": ["gpu", "cpu"], "policies": ["lru"], "points": 4,
            "prices": {"gpu_hour": 8, "dram_gib_hour": 0.01}, "top": 3}
    response = httpx.post(f"{live_server}/api/advise", json=body, timeout=120)
    assert response.status_code == 200, response.text
    got = response.json()
    code, out = cli("--preset", "seed-lab", "--p50-ms", "100", "--pass", "2", "--buy", "gpu,cpu", "--policies", "lru", "--points", "4",
                    "--gpu-hour", "8", "--dram-gib-hour", "0.01", "--top", "3", "--json", "--workers", "1")
    assert code == 0
    expected = json.loads(out[out.index("{"):])
    assert {k: got[k] for k in expected} == expected
    # The seed lab's answer: GPU at its least (5,040 tokens), CPU 48,640 tokens = 1.299 GiB (see test_advise).
    assert (got["meets"][0]["config"]["gpu_tokens"], got["meets"][0]["config"]["cpu_tokens"]) == (5_040, 48_640)


def test_api_names_the_bad_field(live_server: str) -> None:
    for body, field in (
        ({"p50_ms": 100, "prices": {"gpu_hour": -1, "dram_gib_hour": 0.01}}, "gpu_hour"),
        ({"p50_ms": 100, "prices": {"gpu_hour": 2}}, "dram_gib_hour"),
        ({"p50_ms": 100, "buy": ["tape"]}, "buy"),
        ({"p50_ms": 100, "points": 500}, "points"),
        ({"p50_ms": 100, "policies": ["clock"]}, "policies"),
        ({}, "p50_ms"),
    ):
        response = httpx.post(f"{live_server}/api/advise", json=body, timeout=60)
        assert response.status_code == 422, (body, response.text)
        assert field in response.text, (body, response.text)


def test_panel_names_the_field_of_a_search_over_the_budget(live_server: str) -> None:
    # The search's estimate is made in the worker, after the panel answered with its progress: the poll's 422 still
    # names the panel's field to lower (advise_points), as a refusal before the search would.
    started = httpx.post(f"{live_server}/ui/analysis/advise", data={"docs": "2000", "doc_tokens": "10000", "advise_p50_ms": "100"}, timeout=30)
    assert started.status_code == 200, started.text[:300]
    poll = started.text.split('hx-get="', 1)[1].split('"', 1)[0]
    for _ in range(100):
        answer = httpx.get(f"{live_server}{poll}", timeout=30)
        if 'class="advise-progress"' not in answer.text:
            break
        time.sleep(0.1)
    assert answer.status_code == 422
    assert 'data-field="advise_points"' in answer.text and "the limit here is" in answer.text


def open_area(page: Page, url: str) -> None:
    page.goto(url + "/plan")
    page.wait_for_function("() => window.Plotly && window.htmx")
    expect(page.locator("#advise-form")).to_be_visible()


def test_panel_ranks_draws_and_starts(live_server: str, page: Page, tmp_path: Path) -> None:
    open_area(page, live_server)
    page.check('#advise-form input[name="advise_buy_cpu"]')
    page.select_option("#advise-policy", "lru")
    page.fill("#advise-gpu-hour", "8")
    page.fill("#advise-dram", "0.01")
    page.click("#advise-form button[type=submit]")
    # The form's answer is the progress first (it polls every half second), then the table replaces it.
    expect(page.locator("#advise-progress")).to_be_attached()
    # The sidebar's seed lab, pass 2 p50 <= 100 ms: GPU 5,040 tokens and CPU 48,640 tokens first (derived in test_advise).
    first = page.locator("#advise-table tbody tr").first
    expect(first).to_have_attribute("data-gpu-tokens", "5040", timeout=60_000)
    expect(first).to_have_attribute("data-cpu-tokens", "48640")
    # The hit column is headed by the tiers' display names, as the results and runs tables head theirs
    # (sim.engine.events.TIER_LABELS), not by their lower-case keys.
    expect(page.locator("#advise-table thead th").nth(9)).to_have_text("hit % GPU / CPU / Disk")
    # Hit ratios read as percentages (as the replay's do), each a share of the prompt tokens, so together at most 100.
    shares = [float(x) for x in first.locator("td").nth(9).inner_text().split(" / ")]
    assert len(shares) == 3 and all(0 <= x <= 100 for x in shares) and sum(shares) <= 100.05, shares
    assert shares[1] > 1, shares  # the 48,640-token CPU tier serves pass 2: a share a 0.00-0.99 ratio would not reach
    expect(page.locator("#advise-pareto .main-svg").first).to_be_attached()
    expect(page.locator("#advise-lmcache")).to_contain_text("LMCACHE_MAX_LOCAL_CPU_SIZE=1.3")
    expect(page.locator("#advise-vllm")).to_contain_text("--kv-offloading-size 1.3")
    # The scenario's backend is LMCache, so the note says which of the two commands the figures describe.
    expect(page.locator("#advise-vllm").locator("xpath=preceding-sibling::p[1]")).to_contain_text(
        "simulated under LMCache's rules; vllm_native starts these sizes under vLLM's own offloading, not simulated here"
    )
    # The CPU tier is sized here, so the front's note names no tier kept at the scenario's size.
    expect(page.locator("#advise-front-note")).not_to_contain_text("keeps the scenario's")
    # A config.json changes the KV size: Llama-3.1-8B's 131,072 B per token.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}))
    page.set_input_files("#advise-config", str(config))
    page.click("#advise-form button[type=submit]")
    expect(page.locator(".advise-summary")).to_contain_text("131,072 B of KV per token", timeout=60_000)


def test_panel_says_when_nothing_meets_and_names_a_bad_price(live_server: str, page: Page, expected_console_errors: list[str]) -> None:
    expected_console_errors.append("status of 422")  # the bad price's answer
    open_area(page, live_server)
    page.fill("#advise-p50", "1")
    page.fill("#advise-points", "3")
    page.click("#advise-form button[type=submit]")
    expect(page.locator(".advise-none")).to_contain_text("No configuration meets the target; the closest is", timeout=60_000)
    page.fill("#advise-p50", "100")
    page.fill("#advise-gpu-hour", "-2")
    page.fill("#advise-dram", "0.01")
    page.click("#advise-form button[type=submit]")
    expect(page.locator(".analysis-problem")).to_contain_text("gpu_hour")


def test_front_note_says_what_the_front_holds(live_server: str, page: Page) -> None:
    """The form's defaults (seed lab, pass 2 p50 <= 100 ms, only the GPU sized, no prices) give a front of two points,
    both above 1.5 GiB, and the note under the chart says why.

    By hand: the seed lab has a 1.5 GiB CPU tier (sim/workloads/presets.py, cpu_gb 1.5); the CPU box is not ticked, so every
    candidate keeps it and each one's memory is its GPU GiB + 1.5: none costs less than 1.5 GiB. The GPU sizes run
    from one request (5,040 tokens) up; below 45,248 GPU tokens pass 2 never hits in the GPU (README, the advisor's
    example) and its prompts load from the 1.5 GiB CPU tier, which holds the 48,640 tokens pass 2 needs: the same p50
    at every such size. From 49,568 GPU tokens up the GPU alone serves pass 2: a lower p50, again the same at every
    bigger size. A dearer candidate enters the front only with a lower p50 than every cheaper one, so the front is
    the smallest GPU (5,040 tokens, CPU-served) and the smallest grid GPU of at least 49,568 tokens: two points.
    """
    open_area(page, live_server)
    page.click("#advise-form button[type=submit]")
    note = page.locator("#advise-front-note")
    expect(note).to_contain_text("The front holds 2 points", timeout=60_000)
    expect(note).to_contain_text("keeps the scenario's cpu tier of 1.50 GiB, counted in its memory")
    front = json.loads(page.locator("#advise-pareto").get_attribute("data-pareto") or "{}")["front"]
    assert len(front) == 2
    first, second = (p["config"] for p in front)
    assert first["gpu_tokens"] == 5_040 and second["gpu_tokens"] >= 49_568
    assert all(p["config"]["cpu_gib_total"] == 1.5 and p["cost"] > 1.5 for p in front)
    assert front[1]["p50_ms"] < front[0]["p50_ms"]
