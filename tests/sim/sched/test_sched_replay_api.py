"""``POST /api/replay`` under load, over a real uvicorn: ``kvscope replay``'s serving flags as form fields in snake case."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main
from app.scenario_input import SimulateInput
from app.web.routes.replay import ReplayInput
from sim.costs.model import default_costs
from sim.sched.replay_serving import ReplayServing
from sim.sched.serving import Serving

# Mooncake lines, 512-token blocks: A (8,192 tokens, ids 0-15) and B (512 tokens, id 100) at 0 ms, C (4,096 tokens:
# A's first 4 ids, then 4 of its own) at 10 s. One output token each.
LINES = [
    {"timestamp": 0, "input_length": 8192, "output_length": 1, "hash_ids": list(range(16))},
    {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [100]},
    {"timestamp": 10_000, "input_length": 4096, "output_length": 1, "hash_ids": [0, 1, 2, 3, 200, 201, 202, 203]},
]
TEXT = "".join(json.dumps(line) + "\n" for line in LINES)


@pytest.fixture(scope="module")
def server(live_server_factory: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with live_server_factory("--budget", "seconds=60") as url:  # a loaded machine's workers start late (see test_sched_api)
        yield url


def post(url: str, fields: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/api/replay", data={"gpu_blocks": "40", **fields}, files={"file": ("t.jsonl", TEXT.encode())},
                      timeout=120)


def test_every_serving_field_is_a_field_of_both_bodies() -> None:
    # One definition: the API bodies take each field by the name the CLI flag is made from.
    assert set(Serving.model_fields) <= set(SimulateInput.model_fields)
    assert set(ReplayServing.model_fields) <= set(ReplayInput.model_fields)
    for name in ("concurrency", "rate", "max_num_batched_tokens", "max_num_seqs", "long_prefill_token_threshold",
                 "enable_chunked_prefill", "scheduler_reserve_full_isl", "async_scheduling"):
        assert name in SimulateInput.model_fields and name in ReplayInput.model_fields
    assert {"timed", "speedup"} <= set(ReplayInput.model_fields)


def test_a_timed_replay_over_http_queues_as_the_cli_says(server: str, tmp_path: Path) -> None:
    # Under a 4,096-token budget A's 8,192 tokens take two steps of 4,096 each (chunked prefill), the whole budget
    # both times, so B, arrived with it, waits for step 3. C arrives at 10 s / 2 (speedup 2) = 5 s to an idle server.
    c = default_costs()
    chunk = c.overhead_ms + 4096 * c.prefill_ms_per_token
    step3 = c.overhead_ms + 512 * c.prefill_ms_per_token
    response = post(server, {"timed": "true", "speedup": "2", "max_num_batched_tokens": "4096"})
    assert response.status_code == 200, response.text
    api = response.json()
    a, b, c_ = api["requests"]
    assert (a["first_token_step"], a["ttft_ms"]) == (2, pytest.approx(2 * chunk, abs=0.001))
    assert (b["first_token_step"], b["queue_ms"]) == (3, pytest.approx(2 * chunk, abs=0.001))
    assert b["ttft_ms"] == pytest.approx(2 * chunk + step3, abs=0.001)
    assert (c_["arrival_ms"], c_["queue_ms"]) == (5_000.0, 0.0)
    assert api["serving"]["arrivals"] == "timestamps" and api["serving"]["speedup"] == 2
    assert api["serving"]["max_num_batched_tokens"] == 4096
    # The same flags on the command line give the same answer.
    path = tmp_path / "t.jsonl"
    path.write_text(TEXT)
    cli = CliRunner().invoke(main, ["replay", str(path), "--no-save", "--gpu-blocks", "40", "--json", "--timed",
                                    "--speedup", "2", "--max-num-batched-tokens", "4096"])
    assert cli.exit_code == 0, cli.output
    cli_json = json.loads(cli.output)
    cli_json["trace"]["name"] = "t.jsonl"
    assert api == cli_json


def test_a_closed_loop_and_a_scheduler_flag_alone_serve_step_by_step(server: str) -> None:
    # max_num_seqs 1 at concurrency 2: A and B are both in flight from the start, but one runs at a time, so B's
    # first token comes a step after A's (A: one 8,192-token step under the default 8,192 budget).
    response = post(server, {"concurrency": "2", "max_num_seqs": "1"})
    assert response.status_code == 200, response.text
    a, b, _ = response.json()["requests"]
    assert (a["first_token_step"], b["first_token_step"]) == (1, 2)


def test_serving_fields_that_do_not_combine_are_422_naming_them(server: str) -> None:
    response = post(server, {"speedup": "2"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "speedup"]
    assert response.json()["detail"][0]["msg"] == "needs timed"
    response = post(server, {"timed": "true", "rate": "3"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "timed"]
    response = post(server, {"max_num_seqs": "0"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "max_num_seqs"]
    # A pool too small for A's 16 blocks: refused at gpu_blocks, as one request at a time.
    response = post(server, {"timed": "true", "gpu_blocks": "8"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "gpu_blocks"]
    # vLLM's native offloading is served at the timestamps too (its loads asynchronous, sim.sched.offloading).
    response = post(server, {"timed": "true", "cpu_blocks": "64", "cpu_backend": "vllm-native"})
    assert response.status_code == 200, response.text
