"""The proxy's cost: the TTFT a client measures through ``kvscope serve --upstream`` minus the TTFT it measures
calling the same emulator directly, on loopback, requests one at a time.

In each round every path is called in turn, request after request (so load drifts hit all alike): the emulator
directly (the anchor), a bare relay (bench._bare_relay: uvicorn and httpx with nothing else) and kvscope's proxy,
each of the two on uvicorn's plain stack (asyncio loop, h11 parser) and on its fast one (uvloop, httptools: what
``kvscope serve`` runs on). After a proxied request the next waits until the watch has accounted for it
(tokenize, /metrics, the twin: work done after the answer, on the upstream too), then a short pause, as at
concurrency 1. Each round gives the median and 90th percentile of the paired differences to the direct call; the
figures are their min and median over the rounds.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import httpx

from app.runs.store import ENV_DB
from bench._served import free_port, served
from bench.live import _emulator

REQUESTS = 30
ROUNDS = 4
PAUSE_S = 0.05
STACKS = {"plain": ("asyncio", "h11"), "fast": ("uvloop", "httptools")}
UPSTREAM = "emu"


Command = tuple[list[str], dict[str, str]]


def kvscope_proxy(emu: str, stack: str, app_dir: str = ".") -> Command:
    """The command and environment of the app ``kvscope serve --upstream emu=URL`` runs, on one uvicorn stack
    (from the checkout at ``app_dir``: another build can be measured in the same rounds)."""
    port = free_port()
    loop, http = STACKS[stack]
    args = [sys.executable, "-m", "uvicorn", "--factory", "app.web.app:make_app", "--app-dir", app_dir,
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--loop", loop, "--http", http]
    # Runs kept in memory: a benchmark never writes to the user's runs database.
    return args, {"KVSCOPE_UPSTREAM": f"{UPSTREAM}={emu}", ENV_DB: ":memory:"}


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
    return len(client.get(proxy + f"/api/watch/{UPSTREAM}").json()["requests"])


class _Path:
    """One way to reach the emulator, and whether a watch accounts for its requests afterwards."""

    def __init__(self, url: str, watched: bool) -> None:
        self.url, self.watched = url, watched
        self.seen = 0

    def ttft_ms(self, client: httpx.Client, prompt: str) -> float:
        ttft = _ttft_ms(client, self.url, prompt)
        if self.watched:  # the watch's own calls to the upstream are not the next request's cost
            deadline = time.monotonic() + 10
            while (count := _accounted(client, self.url)) == self.seen and time.monotonic() < deadline:
                time.sleep(0.01)
            self.seen = count
        time.sleep(PAUSE_S)
        return ttft


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def measure(extra: dict[str, Callable[[str], Command]] | None = None, rounds: int = ROUNDS) -> dict[str, Any]:
    """Rounds over every path; ``extra`` adds watched proxies by name (the emulator's URL to a command and
    environment, as ``kvscope_proxy`` gives), to compare builds in the same rounds."""
    prompt = " ".join(f"w{i}" for i in range(512))
    per_round: list[dict[str, Any]] = []
    with _emulator("--speed", "1000") as emu, httpx.Client(timeout=30) as client, ExitStack() as stack:
        paths: dict[str, _Path] = {"direct": _Path(emu, watched=False)}
        for name, (loop, http) in STACKS.items():
            port = free_port()
            relay = [sys.executable, "-m", "bench._bare_relay", str(port), emu, loop, http]
            paths[f"bare_relay_{name}"] = _Path(stack.enter_context(served(relay, port, "/health")), watched=False)
        proxies = {f"kvscope_{name}": kvscope_proxy(emu, name) for name in STACKS}
        proxies |= {name: command(emu) for name, command in (extra or {}).items()}
        for name, (args, env) in proxies.items():
            port = int(args[args.index("--port") + 1])
            paths[name] = _Path(stack.enter_context(served(args, port, "/healthz", env)), watched=True)
        for path in paths.values():  # the prompt is cached from here on: every TTFT below is a GPU hit
            path.ttft_ms(client, prompt)
        for _ in range(rounds):
            ttfts: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(REQUESTS):
                for name, path in paths.items():
                    ttfts[name].append(path.ttft_ms(client, prompt))
            direct = ttfts.pop("direct")
            row: dict[str, Any] = {"direct_p50_ms": round(statistics.median(direct), 3),
                                   "direct_p90_ms": round(_p90(direct), 3)}
            for name, values in ttfts.items():
                added = [v - d for v, d in zip(values, direct)]
                row[f"{name}_added_p50_ms"] = round(statistics.median(added), 3)
                row[f"{name}_added_p90_ms"] = round(_p90(added), 3)
            per_round.append(row)
    summary = {key: {"min": min(r[key] for r in per_round), "median": round(statistics.median(r[key] for r in per_round), 3)}
               for key in per_round[0]}
    return {"rounds": per_round, "summary": summary, "load_average": round(os.getloadavg()[0], 1),
            "target_added_p50_ms": 2.0}


def run() -> dict[str, Any]:
    return measure()
