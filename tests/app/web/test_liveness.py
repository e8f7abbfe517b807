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
from live_servers import serve_process

from app.cli.serve import GRACEFUL_SHUTDOWN_S

# Up to a second of simulation each on this machine: 600 requests x 627 blocks x 2 runs, explained (~1.6 M block
# steps as sim.bounds.budget counts them, inside the default budget of 2 M).
HEAVY = {"docs": 200, "doc_tokens": 10_000, "passes": "forward,forward,reverse"}
# 1.5x HEAVY, the load beside which /healthz is probed: its 10 admitted calls keep both workers busy for 5 rounds,
# seconds even on a fast, quiet machine (HEAVY alone was drained by one before its probes were done).
LOADED = {"docs": 300, "doc_tokens": 10_000, "passes": "forward,forward,reverse"}
# About 10x HEAVY: ~6 M block steps x 2 runs, within the budget its test sets.
LONG = {"docs": 2_000, "doc_tokens": 10_000, "passes": "forward,forward,reverse"}


def _running(url: str) -> int:
    return int(httpx.get(f"{url}/healthz", timeout=5).json()["work"]["running"])


# The load comes from a process of its own (niced: it stands for clients on other machines), so that the probes
# below never wait for the load's threads or its share of this machine's two cores. It posts N simulations and
# opens S step streams at once, reading each stream to its end.
LOAD = """
import asyncio, json, sys
import httpx

async def stream(client, url, body):
    async with client.stream("POST", url + "/api/simulate/stream", json=body) as response:
        async for _ in response.aiter_bytes():
            pass
        return response

async def main(url, n, streams, body, stream_body):
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=n + streams)) as client:
        answers = await asyncio.gather(
            *(client.post(url + "/api/simulate", json=body) for _ in range(n)),
            *(stream(client, url, stream_body) for _ in range(streams)),
        )
    print(json.dumps([[a.status_code, a.headers.get("retry-after")] for a in answers]))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])))
"""
STREAM = {"docs": 200}  # the largest step stream (200 documents x 3 passes x 2 runs): ~0.5 s of simulation


def _probe(client: httpx.Client, url: str, n: int, *, while_running: int = 0) -> list[float]:
    """Up to ``n`` /healthz round trips, ~10 ms apart, in ms; with ``while_running``, only those answered while at
    least that many simulations ran, stopping at the first answered with fewer."""
    latencies_ms = []
    for _ in range(n):
        start = time.perf_counter()
        response = client.get(f"{url}/healthz")
        elapsed_ms = (time.perf_counter() - start) * 1000
        assert response.status_code == 200
        if response.json()["work"]["running"] < while_running:
            break
        latencies_ms.append(elapsed_ms)
        time.sleep(0.01)
    return latencies_ms


def _decode_all_ms(rounds: int) -> float:
    """The anchor: decoding the refused bodies once each in this process (json.loads alone), min of three, in ms."""
    raw = [json.dumps(body).encode() for body in eval(BODIES)] * rounds  # noqa: S307 - the module's own literal
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for body in raw:
            json.loads(body)
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def _p99(latencies_ms: list[float]) -> float:
    return statistics.quantiles(latencies_ms, n=100)[98]


def test_healthz_answers_fast_under_100_concurrent_heavy_requests_and_streams() -> None:
    # A long deadline, so that on a loaded machine the admitted calls are served rather than stopped.
    with serve_process("--budget", "work=1e7,seconds=60") as (url, _), httpx.Client(timeout=5) as client:
        # The anchors, measured in this run: /healthz on the idle server, and one heavy simulation alone.
        idle_ms = _probe(client, url, 100)
        start = time.perf_counter()
        assert client.post(f"{url}/api/simulate", json=HEAVY, timeout=60).status_code == 200
        one_simulation_ms = (time.perf_counter() - start) * 1000
        load = subprocess.Popen(
            [sys.executable, "-c", LOAD, url, "100", "10", json.dumps(LOADED), json.dumps(STREAM)], stdout=subprocess.PIPE,
            text=True, preexec_fn=lambda: os.nice(10),
        )
        deadline = time.monotonic() + 10
        while _running(url) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        busy = _running(url)
        loaded_ms = _probe(client, url, 400, while_running=2)
        answers = json.loads(load.communicate(timeout=180)[0])
    # The probes counted really ran beside simulations: each was answered while both workers were busy.
    assert busy >= 2, busy
    assert len(loaded_ms) >= 50, f"only {len(loaded_ms)} probes answered while both workers were busy"
    # Health queued behind the work would wait for a simulation (hundreds of ms at least, measured above); served
    # beside it, it costs what it costs on the idle server. The promise is 100 ms p99; a machine so loaded by
    # others that even the idle probes are slow (their p99 over 20 ms) is held to 5x its own idle p99 instead.
    p99, idle_p99 = _p99(loaded_ms), _p99(idle_ms)
    assert p99 < max(100.0, 5 * idle_p99), f"/healthz p99 {p99:.1f} ms under load, {idle_p99:.1f} ms idle"
    assert max(loaded_ms) < one_simulation_ms, f"a probe waited {max(loaded_ms):.0f} ms, a simulation takes {one_simulation_ms:.0f} ms"
    # 2 workers and 8 waiting by default: of 110 at once, 100 are told at once to come back; the 10 are served.
    statuses = [status for status, _ in answers]
    assert statuses.count(200) >= 10 and statuses.count(503) >= 110 - 10 - 10  # a few may find a worker freed
    assert statuses.count(200) + statuses.count(503) == 110
    assert all(retry is not None and int(retry) >= 1 for status, retry in answers if status == 503)


def test_a_step_stream_waits_its_turn_in_the_worker_pool() -> None:
    # One worker and no queue: while a simulation holds the worker, a stream is refused at once (503 before any
    # event), as a second simulation would be; once the worker is free, the same stream is served.
    with serve_process("--budget", "concurrency=1,queue=0,seconds=60") as (url, _):
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(lambda: httpx.post(f"{url}/api/simulate", json=HEAVY, timeout=60))
            deadline = time.monotonic() + 10
            while _running(url) < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            refused = httpx.post(f"{url}/api/simulate/stream", json={"preset": "seed-lab"}, timeout=30)
            assert held.result().status_code == 200
        assert refused.status_code == 503, refused.text[:300]
        assert refused.headers["content-type"].startswith("application/json")
        assert int(refused.headers["retry-after"]) >= 1
        assert "1 simulations are running or waiting" in refused.json()["detail"]
        with httpx.stream("POST", f"{url}/api/simulate/stream", json={"preset": "seed-lab"}, timeout=30) as served:
            assert served.status_code == 200
            assert "event: done" in served.read().decode()
        work = httpx.get(f"{url}/healthz", timeout=5).json()["work"]
        assert work["refused"] == 1 and work["completed"] == 2  # the simulation and the stream's events


def test_a_step_stream_over_the_budget_is_422_naming_the_limit() -> None:
    # seed-lab as sim.bounds.budget counts it: 2 runs x (9,420 block references + 30 requests x 16), the CPU run's 600 chunk
    # lookups, all x2 for explain: ~41,000 block steps, far over 1,000.
    with serve_process("--budget", "work=1000") as (url, _):
        response = httpx.post(f"{url}/api/simulate/stream", json={"preset": "seed-lab"}, timeout=30)
        assert response.status_code == 422
        error = response.json()["detail"][0]
        assert error["loc"] == ["body", "docs"]
        assert "the limit here is 1,000 block steps" in error["msg"]


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
            calls = [pool.submit(lambda: httpx.post(f"{url}/api/capacity", json=MINUTES, timeout=60)) for _ in range(4)]
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
            answers = [call.result() for call in calls]
        # The calls running or waiting for a worker are answered at once (503), so none holds the grace period (they
        # did, and the server stopped ~0.5 s after it); then the workers are ended, none left computing on its own.
        assert stopped_s < GRACEFUL_SHUTDOWN_S, f"took {stopped_s:.1f} s"
        assert [(a.status_code, a.json()["detail"]) for a in answers] == [(503, "the server is stopping; retry shortly")] * 4
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


# Bodies of one to two megabytes (under the 2 MiB limit) whose lists are too long, each refused with a 422: built
# in the load's own process, too large for a command line.
BODIES = """[
    {"passes": "forward," * 120_000},
    {"storage_tiers": "far:1," * 250_000},
    {"docs": 10, "question_tokens": [13] * 300_000},
    {"docs": 10, "passes": ["0/" * 99_990 + "0"] * 2 + [{"order": "list", "docs": [1] * 100_000}] * 5},
]"""
REFUSED = f"""
import asyncio, json, sys
import httpx

BODIES = {BODIES}

async def main(url, rounds):
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=20)) as client:
        answers = await asyncio.gather(*(client.post(url + "/api/simulate", json=b) for b in BODIES * rounds))
    print(json.dumps([a.status_code for a in answers]))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def test_healthz_answers_fast_while_megabyte_bodies_are_refused() -> None:
    # A body is parsed and checked on the server's event loop (or beside it, sharing its GIL): a check that parsed
    # every item of a megabyte list first held /healthz for seconds (1.6 MB of storage tiers: 3 s each). Counted
    # or measured first, each is refused in milliseconds.
    with serve_process() as (url, _), httpx.Client(timeout=30) as client:
        idle_ms = _probe(client, url, 100)
        decode_ms = _decode_all_ms(5)
        load = subprocess.Popen([sys.executable, "-c", REFUSED, url, "5"], stdout=subprocess.PIPE, text=True, preexec_fn=lambda: os.nice(10))
        loaded_ms: list[float] = []
        while load.poll() is None and len(loaded_ms) < 1000:
            loaded_ms += _probe(client, url, 1)
        statuses = json.loads(load.communicate(timeout=120)[0])
    assert statuses == [422] * 20
    assert len(loaded_ms) >= 20, f"only {len(loaded_ms)} probes answered while the bodies were sent"
    p99, idle_p99 = _p99(loaded_ms), _p99(idle_ms)
    # Decoding and validating twenty 1-2 MB bodies holds the loop for tens of milliseconds each, which no check can
    # avoid (p99 ~200 ms on a quiet machine, as several wait behind each other: about what decoding all twenty takes
    # here); parsing each list's items first held it for seconds (p99 2,471 ms, up to 7.6 s). The bound sits between
    # the two, and scales with the anchor measured in this run, so a loaded machine moves both.
    bound = max(1000.0, 5 * idle_p99, 6 * decode_ms)
    assert p99 < bound, (f"/healthz p99 {p99:.1f} ms beside the refused bodies (bound {bound:.0f} ms: {idle_p99:.1f} ms "
                         f"idle, {decode_ms:.0f} ms to decode the twenty bodies here)")
