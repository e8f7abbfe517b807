"""``POST /api/fleet`` over a real uvicorn: ``kvscope fleet --json``'s result from the same fields; bad bodies 422."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main


@pytest.fixture(scope="module")
def server(live_server_factory: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    # Its own server with a 60 s deadline, as the stepped simulation's API test: the workers run at a lower priority.
    with live_server_factory("--budget", "seconds=60") as url:
        yield url


def post(url: str, body: object, **kw: object) -> httpx.Response:
    return httpx.post(f"{url}/api/fleet", json=body, timeout=120, **kw)  # type: ignore[arg-type]


def test_the_body_takes_the_cli_flags_and_gives_its_json(server: str) -> None:
    body = {"docs": 4, "doc_tokens": 600, "gpu_tokens": 2000, "cpu_tokens": 2048, "replicas": 2,
            "routers": ["round-robin", "affinity"], "shared_tier": "remote:8192t:lru:0.01", "concurrency": 2}
    response = post(server, body)
    assert response.status_code == 200, response.text
    cli = CliRunner().invoke(main, [
        "fleet", "--no-save", "--json", "--docs", "4", "--doc-tokens", "600", "--gpu-tokens", "2000", "--cpu-tokens",
        "2048", "--replicas", "2", "--router", "round-robin", "--router", "affinity", "--shared-tier",
        "remote:8192t:lru:0.01", "--concurrency", "2",
    ])
    assert cli.exit_code == 0, cli.output
    api = response.json()
    assert api == json.loads(cli.output)
    assert api["fleet"]["run"] == "gpu+cpu+remote" and [e["router"] for e in api["routers"]] == ["round-robin", "affinity"]
    assert {r["replica"] for r in api["routers"][0]["requests"]} == {0, 1}


def test_native_offloading_scheduled_ahead_is_served_as_the_cli_serves_it(server: str) -> None:
    # vLLM's native offloading and asynchronous scheduling on each replica: the body's fields are the CLI's flags.
    body = {"docs": 4, "doc_tokens": 600, "gpu_tokens": 2000, "cpu_tokens": 2048, "cpu_backend": "vllm-native",
            "async_scheduling": True, "replicas": 2, "routers": ["round-robin"], "concurrency": 2}
    response = post(server, body)
    assert response.status_code == 200, response.text
    cli = CliRunner().invoke(main, [
        "fleet", "--no-save", "--json", "--docs", "4", "--doc-tokens", "600", "--gpu-tokens", "2000", "--cpu-tokens",
        "2048", "--cpu-backend", "vllm-native", "--async-scheduling", "--replicas", "2", "--router", "round-robin",
        "--concurrency", "2",
    ])
    assert cli.exit_code == 0, cli.output
    assert response.json() == json.loads(cli.output)


@pytest.mark.parametrize(
    ("body", "loc", "message"),
    [
        ({"replicas": 0}, ["body", "replicas"], "Input should be greater than or equal to 1"),
        ({"replicas": 257}, ["body", "replicas"], "Input should be less than or equal to 256"),
        ({"routers": ["nginx"]}, ["body", "routers"], "unknown router 'nginx'; known: round-robin"),
        ({"routers": []}, ["body", "routers"], "at least 1 item"),
        ({"no_cpu": True, "shared_tier": "remote:4096t"}, ["body", "shared_tier"], "tier remote: needs a CPU tier on each replica"),
        ({"cpu_backend": "vllm-native", "shared_tier": "remote:4096t"}, ["body", "shared_tier"],
         "tier remote: vllm-native offloads to its CPU tier alone"),
        ({"shared_tier": "cpu:4096t"}, ["body", "shared_tier"], "none of gpu, cpu, disk: cpu"),
        ({"replicas": "2"}, ["body", "replicas"], "Input should be a valid integer"),  # strict JSON: no string for a number
        # Refused by the replicas' stepping: before the worker, not in it (a fuzzer's fleet refused there raised an
        # error that did not unpickle, which stopped the pool from answering anything after).
        ({"gpu_policy": "belady"}, ["body", "gpu_policy"], "gpu_policy belady: it plans from every request"),
    ],
)
def test_a_bad_body_is_a_422_naming_the_field_and_the_limit(server: str, body: dict, loc: list, message: str) -> None:
    response = post(server, body)
    assert response.status_code == 422, response.text
    details = response.json()["detail"]
    assert any(d["loc"] == loc and message in d["msg"] for d in details), details
    assert post(server, {"docs": 2, "doc_tokens": 600, "replicas": 2}).status_code == 200  # and the workers still answer


def test_a_fleet_over_the_budget_is_a_422_and_the_server_still_answers(server: str) -> None:
    # 2,000 seed-lab documents read three times by 8 routers over 64 replicas: far over the per-request work budget.
    response = post(server, {"docs": 2000, "replicas": 64, "routers": ["round-robin", "random", "vllm-dp", "affinity",
                                                                       "sglang", "llm-d", "llm-d-approx", "dynamo"]})
    assert response.status_code == 422, response.text
    assert "limit" in json.dumps(response.json()["detail"])
    assert httpx.get(f"{server}/healthz", timeout=10).status_code == 200
