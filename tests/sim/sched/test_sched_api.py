"""``POST /api/simulate`` under load, over a real uvicorn: the CLI's serving flags as snake-case body fields."""

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
    # A server of its own with a 60 s deadline: the workers run at a lower priority, and on a loaded machine the
    # default 4 s passed before a worker had started (503), whatever the run's size.
    with live_server_factory("--budget", "seconds=60") as url:
        yield url


def post(url: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{url}/api/simulate", json=body, timeout=120)


def test_the_body_takes_the_cli_flags_in_snake_case(server: str) -> None:
    # Four seed-lab documents read once.
    body = {"docs": 4, "passes": "forward", "concurrency": 4, "max_num_batched_tokens": 2048, "max_num_seqs": 256, "no_cpu": True}
    response = post(server, body)
    assert response.status_code == 200, response.text
    api = response.json()
    cli = CliRunner().invoke(
        main, ["simulate", "--no-save", "--json", "--docs", "4", "--passes", "forward", "--no-cpu", "--concurrency", "4",
               "--max-num-batched-tokens", "2048", "--max-num-seqs", "256"],
    )
    assert api == json.loads(cli.output)
    assert api["scenario"]["serving"]["concurrency"] == 4
    # Request 0 prefills over three steps (2,048, 2,048, 928 tokens); request 1 is admitted for the rest of the third
    # step's budget, so it waited two steps, and its first token comes after request 0's.
    first, second = api["runs"][0]["requests"][:2]
    assert (first["first_token_step"], first["queue_ms"]) == (3, 0.0)
    assert second["first_token_step"] > 3 and second["queue_ms"] > 0


def test_without_serving_fields_the_answer_is_unchanged(server: str) -> None:
    response = post(server, {"docs": 4, "passes": "forward", "no_cpu": True})
    assert response.status_code == 200
    run = response.json()["runs"][0]
    assert "serving" not in run and "queue_ms" not in run["requests"][0]


def test_bad_serving_fields_are_422_naming_them(server: str) -> None:
    response = post(server, {"concurrency": 2, "rate": 1})
    assert response.status_code == 422
    assert response.json()["detail"] == [{"type": "value_error", "loc": ["body"], "msg": "give concurrency or rate, not both"}]
    response = post(server, {"max_num_seqs": 0})
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "max_num_seqs"] and "greater than or equal to 1" in detail["msg"]
    response = post(server, {"max_num_batched_tokens": 100, "max_num_seqs": 101})
    assert response.status_code == 422
    assert "max_num_batched_tokens (100) must be at least max_num_seqs (101)" in response.text


def test_vllm_native_under_load_is_served(server: str) -> None:
    # Its loads are asynchronous (WAITING_FOR_REMOTE_KVS, sim.sched.offloading): served under load as one request
    # at a time. Two documents read once each: nothing to hit, both computed whole.
    body = {"docs": 2, "passes": "forward", "cpu_backend": "vllm-native", "concurrency": 2}
    response = post(server, body)
    assert response.status_code == 200
    runs = {r["name"]: r for r in response.json()["runs"]}
    assert [r["cpu_hit_tokens"] for r in runs["gpu+cpu"]["requests"]] == [0, 0]


def test_async_scheduling_is_served(server: str) -> None:
    # Modelled now (tests/sim/sched/test_sched_async.py): accepted, and the result's serving settings say so.
    response = post(server, {"docs": 2, "passes": "forward", "concurrency": 2, "async_scheduling": True})
    assert response.status_code == 200
    assert response.json()["scenario"]["serving"]["async_scheduling"] is True


def test_what_the_scheduler_cannot_serve_is_422_at_its_field(server: str) -> None:
    # The fuzzer's body: granularity doc caches whole documents, which vLLM's scheduler (blocks) never does; it was a
    # 500 from inside the stepped engine.
    response = post(server, {"enable_chunked_prefill": False, "granularity": "doc", "seed": None})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "granularity"]
    # Without chunked prefill a 5,024-token prompt under a 2,048-token budget is never scheduled whole: vLLM refuses
    # that budget at start-up; it was a RuntimeError ("scheduled nothing").
    response = post(server, {"enable_chunked_prefill": False, "max_num_batched_tokens": 2048})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "max_num_batched_tokens"] and "5,024" in detail["msg"], detail


def test_a_rate_too_small_to_give_finite_times_is_422(server: str) -> None:
    # The fuzzer's 5e-324 requests/s: the second request arrived at infinity, every TTFT was NaN (kept as null) and
    # comparing that run with another was a 500. One request in 1,000 s is the least rate taken.
    response = post(server, {"rate": 5e-324, "docs": 2, "passes": "forward"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "rate"] and "0.001" in detail["msg"], detail
    assert post(server, {"rate": 0.001, "docs": 2, "passes": "forward", "no_cpu": True}).status_code == 200
