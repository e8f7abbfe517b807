"""The SSE step stream read with httpx from a real ``kvscope serve``: complete, within capacity, equal to /api/simulate,
and stopped on the server when the client goes away."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest
from fastapi.encoders import jsonable_encoder
from live_servers import KVSCOPE, ROOT, free_port, sse, stop, wait_until_up

from app.web.sse import StreamStats, event_stream
from sim.engine.events import EVENT_KINDS, Event, RunStarted

SEED_LAB_REQUESTS = 30  # 10 documents x 3 passes


def read_stream(url: str, body: dict) -> tuple[httpx.Headers, list[tuple[str, dict]]]:
    with httpx.stream("POST", f"{url}/api/simulate/stream", json=body, timeout=60) as response:
        assert response.status_code == 200
        return response.headers, list(sse(response.iter_lines()))


@pytest.fixture(scope="module")
def seed_lab(live_server: str) -> tuple[httpx.Headers, list[tuple[str, dict]], dict]:
    headers, messages = read_stream(live_server, {"preset": "seed-lab"})
    result = httpx.post(f"{live_server}/api/simulate", json={"preset": "seed-lab"}, timeout=60).json()
    return headers, messages, result


def test_stream_is_event_stream_named_by_kind(seed_lab: tuple) -> None:
    headers, messages, _ = seed_lab
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache"
    assert "content-encoding" not in headers  # never gzipped: a proxy must not buffer it
    assert all(name == data["type"] for name, data in messages)


def test_every_event_type_appears(seed_lab: tuple) -> None:
    _, messages, _ = seed_lab
    assert {name for name, _ in messages} == set(EVENT_KINDS)


def test_each_run_gets_every_request_once_in_order(seed_lab: tuple) -> None:
    _, messages, _ = seed_lab
    for run in ("gpu", "gpu+cpu"):
        seqs = [d["seq"] for n, d in messages if n == "request" and d["run"] == run]
        assert seqs == list(range(SEED_LAB_REQUESTS))
    # Runs advance side by side: each run's request k is complete before any run starts request k + 1.
    order = [(d["seq"], d["run"]) for n, d in messages if n == "ttft"]
    assert order == [(k, run) for k in range(SEED_LAB_REQUESTS) for run in ("gpu", "gpu+cpu")]


def test_occupancy_never_exceeds_capacity(seed_lab: tuple) -> None:
    _, messages, _ = seed_lab
    capacity = {(d["run"], t["name"]): t["capacity_tokens"] for n, d in messages if n == "run" for t in d["tiers"]}
    occupancies = [d for n, d in messages if n == "occupancy"]
    # One occupancy per tier per request: gpu has 1 tier, gpu+cpu 2.
    assert len(occupancies) == SEED_LAB_REQUESTS * 3
    for d in occupancies:
        assert d["capacity_tokens"] == capacity[(d["run"], d["tier"])]
        assert 0 <= d["used_tokens"] <= d["capacity_tokens"], d
        assert sum(d["docs"].values()) == d["used_tokens"], d


def test_final_totals_equal_the_simulate_result(seed_lab: tuple) -> None:
    _, messages, result = seed_lab
    runs = {r["name"]: r for r in result["runs"]}
    done = {d["run"]: d for n, d in messages if n == "done"}
    assert set(done) == set(runs)
    for name, run in runs.items():
        assert done[name]["totals"] == run["totals"]
        assert [d["summary"] for n, d in messages if n == "pass" and d["run"] == name] == run["passes"]
        ttfts = [(d["seq"], d["ttft_ms"], d["source"]) for n, d in messages if n == "ttft" and d["run"] == name]
        assert ttfts == [(r["seq"], r["ttft_ms"], r["source"]) for r in run["requests"]]


def test_bad_body_gets_422_before_any_event(live_server: str) -> None:
    response = httpx.post(f"{live_server}/api/simulate/stream", json={"chunk_size": 100}, timeout=30)
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/json")
    assert "multiple of block_size" in response.text


def health(url: str) -> dict:
    return httpx.get(f"{url}/healthz", timeout=5).json()["streams"]


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_client_that_disconnects_stops_the_server_side_work(live_server_factory: Callable[..., AbstractContextManager[str]]) -> None:
    with live_server_factory() as url:
        # A whole stream first, to know how many events a complete one has.
        _, complete = read_stream(url, {"preset": "seed-lab"})
        before = health(url)
        assert before == {**before, "open": 0, "completed": 1, "events_sent": len(complete)}
        # Paced at 200 ms per request and run, the whole stream would take 60 x 0.2 = 12 s.
        with httpx.stream("POST", f"{url}/api/simulate/stream", json={"pace_ms": 200}, timeout=30) as response:
            messages = sse(response.iter_lines())  # held, so that the response stays open until the block ends
            while (message := next(messages)) and not (message[0] == "ttft" and message[1]["seq"] == 1):
                pass
            assert health(url)["open"] == 1
        # The client has gone: the server notices and stops.
        assert wait_for(lambda: health(url)["open"] == 0), health(url)
        stopped = health(url)
        time.sleep(1.0)  # five paces: a stream still running would have sent more events by now
        after = health(url)
        assert after == stopped
        assert after["abandoned"] == 1 and after["completed"] == 1
        sent = after["events_sent"] - before["events_sent"]
        assert 0 < sent < len(complete) / 2, sent


def _post_and_close(url: str, path: str, body: dict) -> None:
    """Sends ``POST path`` whole and closes the connection at once: before the server's first byte of an answer
    (the stream is simulated first, tens of ms at least), the point where 1-10 ms clients closed in the issue."""
    host, port = url.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode() + data
        )


def test_a_client_that_closes_before_the_first_message_leaves_no_stream_open_and_no_run_running(
    live_server_factory: Callable[..., AbstractContextManager[str]],
) -> None:
    with live_server_factory() as url:
        for attempt in range(1, 4):
            _post_and_close(url, "/api/simulate/stream", {"docs": 4, "doc_tokens": 500})
            # The server simulates, starts the stream, then finds the client gone. Closed by the garbage collector
            # only (minutes), the stream stayed open and its run 'running'; now both end with the request.
            assert wait_for(lambda: health(url)["started"] == attempt, 30), health(url)
            assert wait_for(lambda: health(url)["open"] == 0, 2), health(url)
            [run] = httpx.get(f"{url}/api/runs", params={"limit": 1}, timeout=10).json()
            assert wait_for(lambda: httpx.get(f"{url}/api/runs/{run['id']}", timeout=10).json()["status"] == "stopped", 2)
        assert health(url)["abandoned"] == 3


def test_clients_that_leave_mid_stream_leave_no_traceback_in_the_log(tmp_path: Path) -> None:
    # A client that stops reading is routine. FastAPI's SSE keep-alive task may be handing over a message just
    # then, and used to log a BrokenResourceError traceback ("Exception in ASGI application") for it.
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        # A long deadline: on a loaded machine the 200-document streams are simulated rather than stopped (503).
        proc = subprocess.Popen(
            [*KVSCOPE, "serve", "--port", str(port), "--log-level", "warning", "--budget", "seconds=60"], cwd=ROOT, stdout=log, stderr=log
        )
    try:
        wait_until_up(url, proc, timeout_s=30, path="/healthz")
        leaving = 6
        for _ in range(leaving):
            # Unpaced and long (200 documents x 3 passes), so the server is always ahead of this client.
            with httpx.stream("POST", f"{url}/api/simulate/stream", json={"docs": 200}, timeout=60) as response:
                assert response.status_code == 200, response.read()[:300]
                lines = response.iter_lines()
                for _ in range(200):
                    next(lines)
        # A stream caught waiting at a yield is finalized by the garbage collector, which polling soon runs.
        assert wait_for(lambda: health(url)["open"] == 0, timeout_s=15), health(url)
        assert health(url)["abandoned"] == leaving
    finally:
        stop(proc)
    logged = log_path.read_text()
    assert "Traceback" not in logged and "BrokenResourceError" not in logged, logged[-3000:]


def test_open_streams_do_not_hold_the_shutdown() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*KVSCOPE, "serve", "--port", str(port), "--log-level", "warning"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_up(url, proc, timeout_s=30, path="/healthz")
        # A stream that would take 60 s; the server is asked to stop while it is open.
        with httpx.stream("POST", f"{url}/api/simulate/stream", json={"pace_ms": 1000}, timeout=30) as response:
            next(sse(response.iter_lines()))
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=15)
            assert time.monotonic() - started < 8  # the graceful-shutdown timeout is 2 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_failing_simulation_ends_the_stream_with_an_error_event() -> None:
    # In-process: nothing over HTTP can make the simulator raise, so the helper is driven directly.
    def events() -> Iterator[Event]:
        yield RunStarted("gpu")
        raise RuntimeError("block pool corrupted")

    async def collect() -> list:
        return [item async for item in event_stream(events(), stats)]

    stats = StreamStats()
    # A thread of its own: a session's Playwright may already run an event loop in this one.
    with ThreadPoolExecutor(1) as pool:
        items = pool.submit(asyncio.run, collect()).result()
    assert [i.event for i in items] == ["run", "error"]
    assert items[1].data == {"type": "error", "run": "", "message": "RuntimeError: block pool corrupted"}
    assert (stats.open, stats.failed, stats.events_sent) == (0, 1, 1)


def test_an_async_source_is_streamed_counted_and_closed_when_the_client_goes() -> None:
    # Live mode's events come from an async generator. Its finally is where a live run stops sending requests.
    closed: list[bool] = []
    ends: list[str] = []

    async def events() -> AsyncIterator[Event]:
        try:
            for name in ("gpu", "gpu+cpu", "never sent"):
                yield RunStarted(name)
        finally:
            closed.append(True)

    async def read_two_then_leave() -> list:
        source = events()  # held here, so that only the stream's own close, not the garbage collector, can end it
        stream = event_stream(source, stats, on_end=ends.append)
        items = [await anext(stream), await anext(stream)]
        assert closed == []
        await stream.aclose()  # what the server does when the client disconnects
        assert closed == [True], "the source must be closed with the stream"
        return items

    async def read_all() -> list:
        return [item async for item in event_stream(events(), stats, on_end=ends.append)]

    stats = StreamStats()
    with ThreadPoolExecutor(1) as pool:
        items = pool.submit(asyncio.run, read_two_then_leave()).result()
        assert [i.data["run"] for i in items] == ["gpu", "gpu+cpu"]
        assert ends == ["abandoned"]
        assert (stats.open, stats.abandoned, stats.events_sent) == (0, 1, 1)  # the second was never acknowledged
        everything = pool.submit(asyncio.run, read_all()).result()
    assert [i.data["run"] for i in everything] == ["gpu", "gpu+cpu", "never sent"]
    assert ends == ["abandoned", "completed"]
    assert (stats.open, stats.completed, stats.events_sent) == (0, 1, 4)


def test_the_events_made_in_a_worker_are_the_simulators_in_order() -> None:
    # What the worker hands back (pickled a request's events at a time, each as its kind and JSON text) and the
    # stream unpickles is what the simulator yields, event for event, batches ending at each request's ttft.
    import pickle

    from app.web.inputs import StreamInput, check
    from app.web.routes.simulate import stream_events, unpickled
    from sim.simulation.run import stream

    scenario = check(StreamInput(preset="seed-lab", docs=4), streamed=True)
    batches = stream_events(scenario, True)
    expected = list(stream(scenario, explain=True))
    got = list(unpickled(batches))
    assert [e.kind for e in got] == [e.kind for e in expected]
    # The same bytes FastAPI sends for a message's `data` (fastapi/routing.py: json.dumps(jsonable_encoder(data))).
    assert [e.text for e in got] == [json.dumps(jsonable_encoder(e.to_dict())) for e in expected]
    assert [e.to_dict() for e in got] == [jsonable_encoder(e.to_dict()) for e in expected]
    last_kinds = [pickle.loads(b)[-1][0] for b in batches]
    # One batch per request of each run (4 documents x 3 passes x 2 runs), then the runs' closing pass and done.
    assert last_kinds == ["ttft"] * 24 + ["done"]
