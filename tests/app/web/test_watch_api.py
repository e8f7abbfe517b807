"""The watch of an upstream (``kvscope serve --upstream --kv-events``) against ``kvscope emulate --kv-events``:
each proxied request measured and predicted by the twin, the server's blocks from its KV events set against the
twin's, the divergence when traffic bypasses the proxy, and the SSE stream in the simulator's vocabulary."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import httpx
import pytest
from live_servers import emulator, free_port

from sim.explain import PRECEDENCE

Serve = Callable[..., AbstractContextManager[str]]


def words(tag: str, n: int) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))  # the emulator: one token per word


@pytest.fixture(scope="module")
def watched(live_server_factory: Serve) -> Iterator[tuple[str, str]]:
    """(the emulator's URL, kvscope's URL proxying to it and watching its KV events)."""
    live, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    with emulator("--kv-events", live, "--kv-events-replay", replay, "--speed", "20") as emu:
        with live_server_factory("--upstream", f"emu={emu}", "--kv-events", f"emu={live}",
                                 "--kv-events-replay", f"emu={replay}") as url:
            yield emu, url


def send(url: str, prompt: str, stream: bool) -> dict[str, Any]:
    """One request through the proxy; returns its record once the watch has accounted for it."""
    before = len(httpx.get(url + "/api/watch/emu").json()["requests"])
    body = {"prompt": prompt, "max_tokens": 2, "stream": stream}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200
        r.read()
    deadline = time.monotonic() + 10
    while True:
        state = httpx.get(url + "/api/watch/emu").json()
        if len(state["requests"]) > before:
            return state["requests"][-1]
        assert time.monotonic() < deadline, "the request was never accounted for"
        time.sleep(0.05)


def test_twin_and_server_agree_while_all_traffic_passes_the_proxy(watched: tuple[str, str]) -> None:
    emu, url = watched
    a = words("a", 300)
    first = send(url, a, stream=True)
    # 300 tokens: nothing cached yet, so nothing hit, measured (/metrics deltas) and predicted alike.
    assert first["prompt_tokens"] == 300 and first["ttft_ms"] > 0
    assert (first["gpu_hit_tokens"], first["cpu_hit_tokens"]) == (0, 0)
    assert (first["predicted_gpu_hit_tokens"], first["predicted_cpu_hit_tokens"]) == (0, 0)
    # The twin's misses by cause (sim.explain): 300 = 18 full blocks of 16 (288, never seen) + 12 past the last full
    # block; for the whole stack, one full 256-token chunk (never seen) + 44 past it (the twin's CPU stores full chunks).
    assert first["gpu_miss"] == {"partial-block": 12, "first-seen": 288}
    assert first["computed"] == {"partial-chunk": 44, "first-seen": 256}
    assert first["evicted_misses"] == [] and first["infinite_hit_tokens"] == 0
    second = send(url, a, stream=False)
    # The same prompt: at most 299 tokens can hit, so 18 full blocks = 288 tokens from the GPU; the CPU's one full
    # 256-token chunk lies inside them, so nothing from the CPU.
    assert (second["gpu_hit_tokens"], second["cpu_hit_tokens"]) == (288, 0)
    assert (second["predicted_gpu_hit_tokens"], second["predicted_cpu_hit_tokens"]) == (288, 0)
    # The 12 tokens past the last full block miss in every tier; unbounded tiers would have served the same 288.
    assert second["gpu_miss"] == {"partial-block": 12} and second["computed"] == {"partial-chunk": 12}
    assert second["infinite_hit_tokens"] == 288
    assert second["ttft_ms"] is None and second["latency_ms"] > 0  # not streamed: no first token to time
    state = httpx.get(url + "/api/watch/emu").json()
    assert state["media"]["GPU"]["blocks"] == state["twin"]["gpu_blocks"] == 18
    assert state["media"]["CPU"]["tokens"] == state["twin"]["cpu_tokens"] == 256
    assert state["divergence"]["differ"] == 0 and state["divergence"]["exact"] is True
    assert state["divergence"]["first_parted"] is None


def test_traffic_that_bypasses_the_proxy_shows_as_divergence(watched: tuple[str, str]) -> None:
    emu, url = watched
    state = httpx.get(url + "/api/watch/emu").json()
    server_blocks = state["media"]["GPU"]["blocks"]
    # Straight to the emulator: 100 tokens, 6 full blocks the server caches and the twin never sees.
    httpx.post(emu + "/v1/completions", json={"prompt": words("direct", 100), "max_tokens": 1}).raise_for_status()
    record = send(url, words("b", 50), stream=True)  # 3 full blocks, seen by both
    state = httpx.get(url + "/api/watch/emu").json()
    d = state["divergence"]
    assert d["server_blocks"] == server_blocks + 6 + 3 and d["twin_blocks"] == server_blocks + 3
    assert d["differ"] == 6 and d["first_parted"] == record["seq"]


def test_the_stream_speaks_the_simulators_vocabulary(watched: tuple[str, str]) -> None:
    _, url = watched
    kinds: dict[str, dict[str, Any]] = {}
    with httpx.stream("GET", url + "/api/watch/emu/stream", timeout=10) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event:
                kinds.setdefault(event, json.loads(line[5:]))
            if {"store", "occupancy", "measured", "ttft", "divergence", "explain"} <= set(kinds):
                break
    assert kinds["store"]["tier"] in ("gpu", "cpu") and kinds["store"]["run"] == "emu"
    assert kinds["measured"]["order"] == "proxy" and kinds["ttft"]["run"] == "emu twin"
    assert kinds["explain"]["run"] == "emu twin" and set(kinds["explain"]["gpu_miss"]) <= set(PRECEDENCE)
    assert kinds["occupancy"]["capacity_tokens"] == 21_504  # the twin's GPU: (1,345 - 1 null block) x 16


def test_unknown_upstream_is_404(watched: tuple[str, str]) -> None:
    _, url = watched
    assert httpx.get(url + "/api/watch/nope").status_code == 404
    assert httpx.get(url + "/api/watch").json() == [{"name": "emu", "kv_events": True}]


def two_at_once(url: str) -> None:
    """Two 400-token prompts through the proxy, each streaming 2,000 tokens, the second sent once the first's
    first token is back: both are in flight together however slowly the threads start on a loaded machine."""
    import concurrent.futures
    import threading

    first_streaming = threading.Event()

    def one(tag: str) -> None:
        if tag == "d":
            assert first_streaming.wait(30)
        body = {"prompt": words(tag, 400), "max_tokens": 2000, "stream": True}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
            for _ in r.iter_bytes():
                first_streaming.set()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(one, ["c", "d"]))


def test_overlapping_requests_are_measured_without_hits(watched: tuple[str, str]) -> None:
    # Two requests in flight at once (2,000 tokens each at 5 ms / 20 per token: 0.5 s of streaming): /metrics
    # deltas cannot say which hit what, so neither gets hit counts; the twin still predicts both.
    _, url = watched
    before = len(httpx.get(url + "/api/watch/emu").json()["requests"])
    two_at_once(url)
    deadline = time.monotonic() + 10
    while len(records := httpx.get(url + "/api/watch/emu").json()["requests"]) < before + 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for record in records[-2:]:
        assert record["prompt_tokens"] == 400
        assert record["gpu_hit_tokens"] is None and record["cpu_hit_tokens"] is None
        assert record["predicted_gpu_hit_tokens"] == 0
