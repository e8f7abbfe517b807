"""Saturating load on a loopback server, bounded in clients, requests and time: each answer's status and latency.

``python tests/saturate.py URL --clients 100 --seconds 30`` prints the figures as JSON; ``saturate(...)`` returns
them to a test. Every client loops ``POST /api/simulate`` until the time is up or the request budget is spent,
each over a connection of its own (kept alive, as browsers and scripts do); a connection closed or reset without
an answer is counted as ``unanswered``. Only 127.0.0.1 is accepted: this is for a server of our own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

import httpx

BODY = {"docs": 10, "doc_tokens": 2000, "passes": "forward,forward,reverse"}  # ~0.1-0.5 s of simulation each
CLIENT_TIMEOUT_S = 60.0  # far past any deadline: an answer this late is still measured, not cut off


@dataclass
class Load:
    """What the clients saw: per status the count and the slowest answer; answers in ``latencies_s``."""

    requests: int = 0
    unanswered: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    max_s: dict[int, float] = field(default_factory=dict)
    slowest: dict[int, str] = field(default_factory=dict)  # the start of the slowest answer of each status
    server_max_s: dict[int, float] = field(default_factory=dict)  # the server's own share (its Server-Timing)
    latencies_s: list[tuple[int, float]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def record(self, status: int, took_s: float, text: str = "", server_s: float | None = None) -> None:
        self.requests += 1
        if server_s is not None:
            self.server_max_s[status] = round(max(self.server_max_s.get(status, 0.0), server_s), 3)
        self.by_status[status] = self.by_status.get(status, 0) + 1
        if took_s >= self.max_s.get(status, 0.0):
            self.max_s[status] = took_s
            self.slowest[status] = text[:120]
        self.latencies_s.append((status, took_s))

    def summary(self) -> dict[str, object]:
        out = asdict(self)
        del out["latencies_s"]
        out["errors"] = self.errors[:5]
        out["max_s"] = {k: round(v, 3) for k, v in self.max_s.items()}
        return out


async def _client(url: str, until: float, budget: list[int], load: Load) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=CLIENT_TIMEOUT_S, limits=httpx.Limits(max_connections=1)) as client:
        while time.monotonic() < until and budget[0] > 0:
            budget[0] -= 1
            started = time.monotonic()
            try:
                response = await client.post("/api/simulate", json=BODY)
            except httpx.TransportError as exc:
                load.requests += 1
                load.unanswered += 1
                load.errors.append(f"{type(exc).__name__}: {exc}")
                continue
            timing = response.headers.get("server-timing", "")
            server_s = float(timing.split("dur=")[1]) / 1000 if "dur=" in timing else None
            load.record(response.status_code, time.monotonic() - started, response.text if response.status_code != 200 else "", server_s)
            if response.status_code == 503:
                await asyncio.sleep(0.05)  # a client told to come back does not hammer; Retry-After is ~1 s


async def _saturate(url: str, clients: int, seconds: float, max_requests: int) -> Load:
    host = urlsplit(url).hostname
    if host != "127.0.0.1":
        raise ValueError(f"saturate only loopback servers, not {host}")
    load = Load()
    until = time.monotonic() + seconds
    budget = [max_requests]
    await asyncio.gather(*(_client(url, until, budget, load) for _ in range(clients)))
    return load


def saturate(url: str, clients: int = 100, seconds: float = 30.0, max_requests: int = 20_000) -> Load:
    """``clients`` looping clients for ``seconds`` (and at most ``max_requests`` in all); returns when the last is answered."""
    return asyncio.run(_saturate(url, clients, seconds, max_requests))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    print(json.dumps(saturate(args.url, args.clients, args.seconds).summary(), indent=1))


if __name__ == "__main__":
    main()
