"""The proxy's cost: the TTFT a client measures through ``kvscope serve --upstream`` minus the TTFT it measures
calling the same emulator directly, on loopback, requests one at a time.

Direct and proxied requests alternate (so load drifts hit both alike); after
a proxied one the next waits until the watch has accounted for it (tokenize,
/metrics, the twin: work done after the answer, on the upstream too), then a
short pause, as at concurrency 1. The anchor is the direct TTFT; a bare relay
(bench._bare_relay: uvicorn and httpx with nothing else) runs in the same
rounds, so the stack's own cost is told from kvscope's.
Three rounds; each gives the median of its paired differences.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from bench.live import _emulator, _free_port

REQUESTS = 30
ROUNDS = 3
PAUSE_S = 0.05
# Runs kept in memory: a benchmark never writes to the user's runs database.
_SERVE = [sys.executable, "-c", "from app.cli import main; main()", "serve", "--log-level", "warning", "--db", ":memory:"]


@contextmanager
def _server(args: list[str], port: int, probe: str) -> Iterator[str]:
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + probe, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _ttft_ms(client: httpx.Client, base: str, prompt: str) -> float:
    started = time.perf_counter()
    body = {"prompt": prompt, "max_tokens": 2, "stream": True}
    ttft = None
    with client.stream("POST", base + "/v1/completions", json=body) as response:
        for line in response.iter_lines():  # read to the end, so the connection is reused
            if ttft is None and line.startswith("data:") and '"text": "' in line:
                ttft = (time.perf_counter() - started) * 1000
    if ttft is None:
        raise RuntimeError("no token streamed")
    return ttft


def _accounted(client: httpx.Client, proxy: str) -> int:
    return len(client.get(proxy + "/api/watch/emu").json()["requests"])


def run() -> dict[str, Any]:
    prompt = " ".join(f"w{i}" for i in range(512))
    rounds = []
    with _emulator("--speed", "1000") as emu, httpx.Client(timeout=30) as client:
        proxy_port, bare_port = _free_port(), _free_port()
        serve = [*_SERVE, "--port", str(proxy_port), "--upstream", f"emu={emu}"]
        bare = [sys.executable, "-m", "bench._bare_relay", str(bare_port), emu]
        with _server(serve, proxy_port, "/healthz") as proxy, _server(bare, bare_port, "/health") as relay:
            for base in (emu, proxy, relay):  # the prompt is cached from here on: every TTFT below is a GPU hit
                _ttft_ms(client, base, prompt)
            for _ in range(ROUNDS):
                direct, via, floor = [], [], []
                for _ in range(REQUESTS):
                    direct.append(_ttft_ms(client, emu, prompt))
                    time.sleep(PAUSE_S)
                    floor.append(_ttft_ms(client, relay, prompt))
                    time.sleep(PAUSE_S)
                    seen = _accounted(client, proxy)
                    via.append(_ttft_ms(client, proxy, prompt))
                    while _accounted(client, proxy) == seen:  # the watch's own calls are not the next request's cost
                        time.sleep(0.01)
                    time.sleep(PAUSE_S)
                rounds.append({
                    "direct_p50_ms": round(statistics.median(direct), 3),
                    "proxied_p50_ms": round(statistics.median(via), 3),
                    "added_p50_ms": round(statistics.median(v - d for v, d in zip(via, direct)), 3),
                    "bare_relay_added_p50_ms": round(statistics.median(f - d for f, d in zip(floor, direct)), 3),
                })
    added_p50 = [r["added_p50_ms"] for r in rounds]
    floor_p50 = [r["bare_relay_added_p50_ms"] for r in rounds]
    return {
        "rounds": rounds,
        "added_p50_ms_min": min(added_p50),
        "added_p50_ms_median": statistics.median(added_p50),
        "bare_relay_added_p50_ms_median": statistics.median(floor_p50),
        "anchor_direct_p50_ms_median": statistics.median(r["direct_p50_ms"] for r in rounds),
        "target_added_p50_ms": 2.0,
    }
