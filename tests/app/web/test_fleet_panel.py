"""The Fleet view's form over a real uvicorn: ``POST /ui/fleet`` answers with the per-router table and one strip per
replica, or, refused, 422 with the error beside the field it names (its id ``fleet-FIELD-error``)."""

from __future__ import annotations

import re

import httpx
import pytest

# The seed lab (10 documents, 3 passes: 30 requests) served by 3 replicas in a closed loop of 4.
BASE = {"preset": "seed-lab", "replicas": "3", "concurrency": "4", "routers": ["round-robin", "affinity"]}


def _post(url: str, **changes: str | list[str]) -> httpx.Response:
    return httpx.post(f"{url}/ui/fleet", data={**BASE, **changes}, timeout=60)


def test_a_fleet_answers_a_row_per_router_and_a_strip_per_replica(live_server: str) -> None:
    response = _post(live_server)
    assert response.status_code == 200, response.text
    html = response.text
    assert re.findall(r'<tr data-router="([^"]+)">', html) == ["round-robin", "affinity"]
    # One stack per router, each of 3 strips; the 30 requests each on one replica of each stack: 60 marks in all.
    assert html.count('class="fleet-strip"') == 2 * 3
    assert len(re.findall(r'class="fleet-mark[ "]', html)) == 2 * 30
    assert "Served 30 requests through 3 replicas" in html


def test_the_cpu_rules_and_asynchronous_scheduling_reach_each_replica_as_the_apis_fields(live_server: str) -> None:
    # vLLM's native offloading scheduled ahead: the table is /api/fleet's for the same fields, and not the preset's
    # own (LMCache's, synchronous), whose TTFTs differ (LMCache saves in the step, vLLM copies stores out after it).
    response = _post(live_server, cpu_backend="vllm-native", async_scheduling="true")
    assert response.status_code == 200, response.text
    body = {**BASE, "replicas": 3, "concurrency": 4}
    api = httpx.post(f"{live_server}/api/fleet", json={**body, "cpu_backend": "vllm-native", "async_scheduling": True}, timeout=60)
    preset = httpx.post(f"{live_server}/api/fleet", json=body, timeout=60)
    assert api.status_code == preset.status_code == 200
    p50 = lambda result: ["{:,.1f}".format(e["summary"]["ttft_p50_ms"]) for e in result["routers"]]  # noqa: E731
    shown = re.findall(r'<td class="num" data-col="ttft-p50">([^<]*)</td>', response.text)
    assert shown == p50(api.json()) != p50(preset.json())


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"replicas": "0"}, "replicas", "greater than or equal to 1"),
        ({"routers": []}, "routers", "tick at least one router"),
        ({"docs": "0"}, "docs", "greater than or equal to 1"),
        ({"passes": "sideways"}, "passes", "unknown pass order"),
        # The seed lab's prompts are 5,008 tokens plus vLLM's null block of 16: 10 tokens cannot hold one.
        ({"gpu_tokens": "10"}, "gpu-tokens", "must hold one whole prompt"),
        ({"cpu_gb": "-1"}, "cpu-gb", "greater than 0"),
        ({"shared_tier": "remote:abc"}, "shared-tier", "valid number"),
        ({"preset": "nope"}, "preset", "unknown preset"),
        ({"cpu_backend": "nope"}, "cpu-backend", "Input should be &#39;lmcache&#39;"),  # the message's quotes escaped
        ({"cpu_backend": "vllm-native", "shared_tier": "remote:8"}, "shared-tier", "vllm-native offloads to its CPU tier alone"),
        # 2 routers over 16 replicas and 10,000 documents (3 passes: 30,000 requests): far past the web's budget of block steps, refused before it runs.
        ({"replicas": "16", "docs": "10000"}, "docs", "estimated work"),
    ],
)
def test_a_refused_field_is_named_beside_it(live_server: str, changes: dict, field: str, says: str) -> None:
    response = _post(live_server, **changes)
    assert response.status_code == 422
    errors = re.findall(r'<p class="field-error" id="fleet-([a-z-]+)-error">([^<]*)</p>', response.text)
    assert [name for name, _ in errors] == [field], errors
    assert says in errors[0][1]
    assert response.headers["hx-retarget"] == "#fleet-fields"


def test_both_arrivals_given_is_said_for_the_form(live_server: str) -> None:
    # "Requests in flight" and "a rate" are two ways to give arrivals: both at once names neither field alone.
    response = _post(live_server, rate="2")
    assert response.status_code == 422
    assert re.search(r'id="fleet-errors" role="alert"><p>give concurrency or rate, not both</p>', response.text)
