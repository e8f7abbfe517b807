"""Every request answered by its deadline plus ``MARGIN_S`` (app.web.deadline), over a real uvicorn.

The first tests put the middleware around handlers of known duration, then around the real worker pool (a call
that ignores its deadline, one queued behind it, an error that would not unpickle); the last saturates a real
``kvscope serve`` (100 clients on loopback, bounded in time and count) and checks every answer against the promise.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

import httpx
import pytest
from live_servers import busy, run_async, threaded_server
from saturate import saturate
from starlette.types import Receive, Scope, Send

from app.budgets import WebBudget
from app.web import deadline
from app.web.deadline import CUT_S, MARGIN_S, Deadlines
from app.web.workers import TimedOut, Workers

DEFAULT_S = 0.3  # the deadline of the handlers here


def _app(handler_s: float, *, later_deadline_s: float | None = None, stream: bool = False, default_s: float = DEFAULT_S) -> Deadlines:
    """A handler that takes ``handler_s`` (sleeping), having first set a later deadline (as ``Workers.run`` does
    for the advisor's search) or begun a streamed answer."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        if later_deadline_s is not None:
            clock = deadline.current()
            assert clock is not None
            clock.deadline = clock.since + later_deadline_s
        if stream:
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"first ", "more_body": True})
        await asyncio.sleep(handler_s)
        if not stream:
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"done"})

    return Deadlines(app, default_s=default_s)


def _timed_post(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.post(url, content=b"{}", timeout=30)
    return response, time.monotonic() - started


def test_a_request_not_answered_by_its_deadline_and_margin_is_503() -> None:
    # The handler takes 5 s; the deadline is 0.3 s: cut at 0.3 + CUT_S (0.75 s) = 1.05 s and answered 503, so that the
    # answer is in by 0.3 + MARGIN_S (1 s) = 1.3 s, not the 200 at 5 s. (Cut at 1.3 s itself, as it was, the 503
    # arrived a few ms after it: the slowest answers of a 10-minute fuzz were 5.003-5.013 s against 4 + 1.)
    with threaded_server(_app(5.0)) as url:
        response, took = _timed_post(url)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert "not answered within 0.3 s" in response.json()["detail"]
    assert DEFAULT_S + CUT_S <= took, took  # past its deadline
    _within_the_promise(response, took, DEFAULT_S)


def _within_the_promise(response: httpx.Response, took_s: float, deadline_s: float) -> None:
    """The server's share of the wait (its Server-Timing) within the deadline plus ``MARGIN_S``; and what the client
    saw, where a millisecond can be measured (client and server share this process and its two cores)."""
    server_s = float(response.headers["server-timing"].split("dur=")[1]) / 1000
    assert server_s < deadline_s + MARGIN_S, server_s
    if busy() is None:
        assert took_s < deadline_s + MARGIN_S, took_s


def _sleeping_pool_app(pool: Workers) -> Deadlines:
    """``POST /?s=S`` sleeps S seconds in one of ``pool``'s workers, with no checkpoint (a call that ignores its
    deadline); 503 when the pool gives up on it (``/warm`` waits for the workers to start, with a 60 s deadline)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        try:
            if scope["path"] == "/warm":
                await pool.run(abs, -1, seconds=60)
            else:
                await pool.run(time.sleep, float(scope["query_string"].decode().removeprefix("s=")))
            status, body = 200, b"done"
        except TimedOut as exc:
            status, body = 503, str(exc).encode()
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": body})

    return Deadlines(app, default_s=pool.budget.seconds)


def test_a_call_that_ignores_its_deadline_and_one_queued_behind_it_are_answered_within_the_margin() -> None:
    # One worker, a 0.5 s deadline. The first call sleeps 3 s in the worker without a checkpoint; the second waits in
    # the queue behind it. The first is waited for WAIT_S (0.5 s) past its deadline, then answered 503: at 1.0 s, within
    # 0.5 + MARGIN_S = 1.5 s. The second can only be stopped at its first checkpoint once a worker takes it, so it is
    # answered 503 at its deadline itself: 0.5 s after it was sent. (Both were answered when the workers gave up, at
    # the deadline plus 1 s, both past the promise; the second was as late behind any call that held the worker.)
    seconds = 0.5
    pool = Workers(WebBudget(seconds=seconds, concurrency=1, queue=2))
    try:
        with threaded_server(_sleeping_pool_app(pool)) as url, ThreadPoolExecutor(2) as clients:
            assert httpx.post(f"{url}/warm", timeout=60).status_code == 200  # the worker is up: what follows is timed
            held = clients.submit(_timed_post, f"{url}/?s=3")
            wait_for = time.monotonic() + 5
            while pool.stats.running < 1 and time.monotonic() < wait_for:  # the first is the worker's before the second
                time.sleep(0.005)
            time.sleep(0.05)
            queued = clients.submit(_timed_post, f"{url}/?s=0")
            (first, first_s), (second, second_s) = held.result(), queued.result()
    finally:
        pool.close()
    assert first_s >= seconds and second_s >= seconds, (first_s, second_s)
    _within_the_promise(first, first_s, seconds)
    _within_the_promise(second, second_s, seconds)
    assert first.status_code == 503 and "not done after 0.5 s" in first.text, first.text
    assert second.status_code == 503 and "waited 0.5 s for a worker; the limit here is 0.5 s" in second.text, second.text


class TwoArguments(Exception):
    """An exception whose pickle does not unpickle: ``Exception`` pickles ``args`` (the message alone)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def raise_two_arguments() -> None:
    raise TwoArguments("replicas", "refused in the worker")


def test_an_error_that_would_not_unpickle_comes_back_and_the_pool_goes_on() -> None:
    # The pool unpickles what a worker sends on its one result thread; an exception there ended that thread, and no
    # call was answered again (each waited out its deadline: the 503s at 5 s that ended a 10-minute fuzz). Now the
    # error comes back as text naming it, and the next call is answered.
    async def calls(pool: Workers) -> tuple[BaseException, int]:
        with pytest.raises(Exception) as raised:
            await pool.run(raise_two_arguments)
        return raised.value, await pool.run(abs, -3)

    pool = Workers(WebBudget(seconds=30, concurrency=1, queue=0))
    try:
        error, after = run_async(calls(pool))
    finally:
        pool.close()
    assert "TwoArguments: refused in the worker" in str(error), repr(error)
    assert after == 3


def test_a_request_within_its_deadline_is_answered_as_it_was() -> None:
    with threaded_server(_app(0.05, default_s=5.0)) as url:  # 50 ms of 5 s: in time even on a busy machine
        response, _ = _timed_post(url)
    assert response.status_code == 200 and response.text == "done", (response.status_code, response.text[:200])
    # The handler's 50 ms at least, less a millisecond: uvloop (libuv) times a sleep from its loop time, cached at the
    # start of an iteration in whole ms, so it can end up to 1 ms early by the monotonic clock (49.6 ms was seen).
    assert float(response.headers["server-timing"].split("dur=")[1]) >= 49


def test_a_call_that_asks_for_longer_moves_the_deadline() -> None:
    # The call sets 2 s (the advisor's searches ask for 120): its 1.5 s are answered, not cut at 1.3 s.
    with threaded_server(_app(1.5, later_deadline_s=2.0)) as url:
        response, took = _timed_post(url)
    assert response.status_code == 200 and took >= 1.5


def test_a_stream_that_has_begun_is_not_cut() -> None:
    # The deadline is for the first message: a stream under way at 1.3 s goes on to its end at 2 s.
    with threaded_server(_app(2.0, stream=True)) as url:
        response, took = _timed_post(url)
    assert response.status_code == 200 and response.text == "first done" and took >= 2.0


@pytest.mark.slow
def test_under_100_saturating_clients_every_request_is_answered_in_time(
    live_server_factory: Callable[..., AbstractContextManager[str]],
) -> None:
    # The default budget: a 4 s deadline, 2 simulations at once and 8 waiting, the rest refused (503 Busy).
    limit_s = WebBudget().seconds + MARGIN_S  # the promise, with no allowance beyond it
    with live_server_factory() as url:
        load = saturate(url, clients=100, seconds=10, max_requests=3000)
    assert load.unanswered == 0, load.errors[:3]  # every connection got an answer
    assert set(load.by_status) <= {200, 503}, load.summary()
    assert load.by_status.get(200, 0) > 0  # it served, not only refused
    # The server's share of each wait, from the request being whole to its answer starting: within the limit.
    assert max(load.server_max_s.values()) < limit_s, load.summary()
    # And what the clients saw: the limit, plus whatever their own loop stalled (the load generator's share).
    assert max(load.max_s.values()) < limit_s + load.client_lag_max_s, load.summary()


def test_a_call_given_up_on_leaves_no_unread_error_when_its_worker_stops_it(caplog: pytest.LogCaptureFixture) -> None:
    # One worker, a 0.3 s deadline: a 1 s call holds it and a second waits behind it; both are answered 503 (the second
    # at its deadline, before any worker took it). The worker then stops the second at its first check, and what it
    # sends back was set on a future nobody read: asyncio logged "Future exception was never retrieved" for each.
    async def calls(pool: Workers) -> list[str]:
        await pool.run(abs, -1, seconds=60)  # the worker is up
        held = asyncio.create_task(pool.run(time.sleep, 1.0))
        await asyncio.sleep(0.05)
        answers = []
        for call in (pool.run(abs, -2), held):
            with pytest.raises(TimedOut) as raised:
                await call
            answers.append(str(raised.value))
        await asyncio.sleep(1.5)  # the worker has sent both back
        gc.collect()
        return answers

    pool = Workers(WebBudget(seconds=0.3, concurrency=1, queue=1))
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            answers = run_async(calls(pool))
    finally:
        pool.close()
    assert "waited 0.3 s for a worker" in answers[0] and "not done after 0.3 s" in answers[1], answers
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()], caplog.text
