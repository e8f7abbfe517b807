"""Saturating load on a loopback server, bounded in clients, requests and time: each answer's status and latency.

``python tests/saturate.py URL --clients 100 --seconds 30`` prints the figures as JSON; ``saturate(...)`` returns
them to a test. Every client loops ``POST /api/simulate`` until the time is up or the request budget is spent,
each over a connection of its own (kept alive, as browsers and scripts do); a connection closed or reset without
an answer is counted as ``unanswered``. Only 127.0.0.1 is accepted: this is for a server of our own.
``client_lag_max_s`` says how late this process's own loop ran: time the load generator added to what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

BODY = {"docs": 10, "doc_tokens": 2000, "passes": "forward,forward,reverse"}  # ~0.1-0.5 s of simulation each
CLIENT_TIMEOUT_S = 60.0  # far past any deadline: an answer this late is still measured, not cut off (then: unanswered)


@dataclass
class Load:
    """What the clients saw: per status the count and the slowest answer; answers in ``latencies_s``."""

    requests: int = 0
    unanswered: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    max_s: dict[int, float] = field(default_factory=dict)
    slowest: dict[int, str] = field(default_factory=dict)  # the start of the slowest answer of each status
    server_max_s: dict[int, float] = field(default_factory=dict)  # the server's own share (its Server-Timing)
    client_lag_max_s: float = 0.0  # how late this process's own event loop ran (time the clients added themselves)
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
    """One client: one kept-alive connection, plain HTTP/1.1 written and read by hand (httpx's own work per
    request, times 100 clients in one process, stalled this loop for seconds: the latencies were the client's)."""
    parts = urlsplit(url)
    body = json.dumps(BODY).encode()
    request = (
        f"POST /api/simulate HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    reader = writer = None
    while time.monotonic() < until and budget[0] > 0:
        budget[0] -= 1
        started = time.monotonic()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            assert reader is not None
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CLIENT_TIMEOUT_S)
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            text = (await reader.readexactly(int(headers.get("content-length", "0")))).decode("utf-8", "replace")
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError, IndexError) as exc:
            load.requests += 1
            load.unanswered += 1
            load.errors.append(f"{type(exc).__name__}: {exc}")
            if writer is not None:
                writer.close()
            reader = writer = None
            continue
        timing = headers.get("server-timing", "")
        server_s = float(timing.split("dur=")[1]) / 1000 if "dur=" in timing else None
        load.record(status, time.monotonic() - started, text if status != 200 else "", server_s)
        if headers.get("connection", "").lower() == "close":
            writer.close()
            reader = writer = None
        if status == 503:
            await asyncio.sleep(0.05)  # a client told to come back does not hammer; Retry-After is ~1 s
    if writer is not None:
        writer.close()


async def _saturate(url: str, clients: int, seconds: float, max_requests: int) -> Load:
    host = urlsplit(url).hostname
    if host != "127.0.0.1":
        raise ValueError(f"saturate only loopback servers, not {host}")
    load = Load()
    until = time.monotonic() + seconds
    budget = [max_requests]
    lag = asyncio.ensure_future(_watch_lag(load))
    await asyncio.gather(*(_client(url, until, budget, load) for _ in range(clients)))
    lag.cancel()
    return load


async def _watch_lag(load: Load, every_s: float = 0.01) -> None:
    while True:
        before = time.monotonic()
        await asyncio.sleep(every_s)
        load.client_lag_max_s = round(max(load.client_lag_max_s, time.monotonic() - before - every_s), 3)


def saturate(url: str, clients: int = 100, seconds: float = 30.0, max_requests: int = 20_000) -> Load:
    """``clients`` looping clients for ``seconds`` (and at most ``max_requests`` in all); returns when the last is answered."""
    return asyncio.run(_saturate(url, clients, seconds, max_requests))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--max-requests", type=int, default=20_000)
    args = parser.parse_args()
    print(json.dumps(saturate(args.url, args.clients, args.seconds, args.max_requests).summary(), indent=1))


if __name__ == "__main__":
    main()
