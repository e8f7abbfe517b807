"""Liveness over a real uvicorn: /healthz stays fast under heavy load, a full queue answers 503, a deadline stops the
work, and SIGTERM stops the server within its grace period whatever runs."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from app.cli.serve import GRACEFUL_SHUTDOWN_S
from live_servers import serve_process

# Up to a second of simulation each on this machine: 600 requests x 627 blocks x 2 runs, explained (~1.6 M block
# steps as sim.work counts them, inside the default budget of 2 M).
HEAVY = {"docs": 200, "doc_tokens": 10_000, "passes": "forward,forward,reverse"}
# About 5x that: ~6 M block steps x 2 runs, within the budget its test sets.
LONG = {"docs": 2_000, "doc_tokens": 10_000, "passes": "forward,forward,reverse"}


def _running(url: str) -> int:
    return int(httpx.get(f"{url}/healthz", timeout=5).json()["work"]["running"])


# The load comes from a process of its own (niced: it stands for clients on other machines), so that the probes
# below never wait for the load's threads or its share of this machine's two cores.
LOAD = """
import asyncio, json, sys
import httpx

async def main(url, n, body):
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=n)) as client:
        answers = await asyncio.gather(*(client.post(url + "/api/simulate", json=body) for _ in range(n)))
    print(json.dumps([[a.status_code, a.headers.get("retry-after")] for a in answers]))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])))
"""


def test_healthz_answers_fast_under_100_concurrent_heavy_requests() -> None:
    # A long deadline, so that on a loaded machine the admitted calls are served rather than stopped.
    with serve_process("--budget", "seconds=60") as (url, _):
        load = subprocess.Popen(
            [sys.executable, "-c", LOAD, url, "100", json.dumps(HEAVY)], stdout=subprocess.PIPE, text=True,
            preexec_fn=lambda: os.nice(10),
        )
        latencies_ms: list[float] = []
        with httpx.Client(timeout=5) as client:
            deadline = time.monotonic() + 10
            while _running(url) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            busy = _running(url)
            for _ in range(200):  # a bounded loop: 200 probes, ~10 ms apart
                start = time.perf_counter()
                assert client.get(f"{url}/healthz").status_code == 200
                latencies_ms.append((time.perf_counter() - start) * 1000)
                time.sleep(0.01)
        answers = json.loads(load.communicate(timeout=180)[0])
        assert busy >= 2  # the probes really ran beside simulations
        p99 = statistics.quantiles(latencies_ms, n=100)[98]
        assert p99 < 100, f"/healthz p99 {p99:.1f} ms under load"
        # 2 workers and 8 waiting by default: of 100 at once, 90 are told at once to come back; the 10 are served.
        statuses = [status for status, _ in answers]
        assert statuses.count(200) >= 10 and statuses.count(503) >= 100 - 10
        assert statuses.count(200) + statuses.count(503) == 100
        assert all(retry is not None and int(retry) >= 1 for status, retry in answers if status == 503)


def test_a_call_past_its_deadline_answers_503_and_frees_its_worker() -> None:
    with serve_process("--budget", "work=2e7,seconds=1") as (url, _):
        start = time.monotonic()
        response = httpx.post(f"{url}/api/simulate", json=LONG, timeout=60)
        elapsed = time.monotonic() - start
        assert response.status_code == 503
        assert "the limit here is 1 s" in response.json()["detail"]
        assert elapsed < 1 + 3  # the deadline, the worker's grace (1 s) and a margin for a loaded machine
        deadline = time.monotonic() + 5
        while _running(url) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _running(url) == 0  # stopped at its next request, not left computing


# A capacity curve of 2 x 200 simulations of 300 requests x 627 blocks: ~75 M block steps, a minute or more, in
# little memory (one simulation at a time).
MINUTES = {"docs": 100, "doc_tokens": 10_000, "passes": "forward,forward,reverse", "points": 200}


def test_sigterm_stops_a_busy_server_within_its_grace_period() -> None:
    with serve_process("--budget", "work=1e9,seconds=600") as (url, proc):
        with ThreadPoolExecutor(4) as pool:
            for _ in range(4):
                pool.submit(lambda: httpx.post(f"{url}/api/capacity", json=MINUTES, timeout=60))
            deadline = time.monotonic() + 10
            while _running(url) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _running(url) >= 2
            workers = _children(proc.pid)
            assert workers  # the simulations run in worker processes
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=GRACEFUL_SHUTDOWN_S + 10)
            stopped_s = time.monotonic() - start
        # Open requests get the grace period; then the workers are ended, none left computing on its own.
        assert stopped_s < GRACEFUL_SHUTDOWN_S + 3, f"took {stopped_s:.1f} s"
        # (multiprocessing's resource tracker, also a child, leaves once it sees its pipe closed: a moment later.)
        gone_by = time.monotonic() + 3
        while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert [pid for pid in workers if Path(f"/proc/{pid}").exists()] == []


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (field 4 of /proc/PID/stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found
