"""The web's workers for CPU-heavy calls: at most ``concurrency`` at once, ``queue`` more waiting, each stopped at its deadline.

Routes hand a simulation, a curve, a file's analysis or a fit to ``run``: it
runs in one of ``concurrency`` worker processes, so it never holds the
server's GIL and ``/healthz``, static files and open streams answer in
milliseconds whatever runs (threads would share one GIL with the event loop:
a probe waited up to a second behind two simulations). ``fn`` and its
arguments go by pickle, so ``fn`` is a module-level function. The step
stream's events are made here too, whole, before its first message: the event
loop only sends (and keeps) them, at the client's pace.

A call may report its progress (``report(done, total)`` in the worker, e.g.
the advisor's search candidate by candidate): each call admitted has a slot of
a small shared array, which ``run(..., watch=...)`` reads on the event loop.

Past the queue a call is refused at once (``Busy``: 503 with Retry-After); a
call that passes its deadline stops at its next ``sim.bounds.budget.checkpoint()`` and
answers 503 (``TimedOut``) instead of holding a worker. One still waiting for a worker at its deadline is answered
503 then (it could only stop at its first checkpoint); one that ignores its deadline is waited for
``deadline.WAIT_S`` more, then answered 503 while the worker finishes it. Whatever a call raises comes back: an
exception that would not unpickle in the server (a constructor of two arguments) killed the pool's result thread,
and every later call waited out its deadline (the 503s at 5 s that ended a 10-minute fuzz). ``close()`` (server
shutdown) ends the worker processes at once, so SIGTERM is never held up by a
simulation (and no worker outlives the server: they are daemonic).
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import pickle
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from fastapi.responses import Response

from app.budgets import WebBudget
from app.web import deadline as deadline_clock
from app.web.json_response import JSONResponse
from sim.bounds.budget import Stopped, StopSignal, stoppable

T = TypeVar("T")

WORKER_NICE = 10
WATCH_EVERY_S = 0.2  # how often a watched call's progress is read

Progress = Callable[[int, int], None]


class Busy(Exception):
    """Every worker is busy and the queue is full: come back in ``retry_after_s``."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        super().__init__(f"the server is busy: {limit} simulations are running or waiting (the limit); retry shortly")
        self.retry_after_s = retry_after_s


class TimedOut(Exception):
    """The call passed its deadline (or the server is stopping) and was stopped."""


@dataclass(slots=True)
class WorkStats:
    """Calls since start-up (shown by ``/healthz``); ``running`` counts those admitted and not yet finished."""

    running: int = 0
    completed: int = 0
    refused: int = 0
    timed_out: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class Workers:
    """A bounded pool of processes for the web's heavy calls; every call runs under a ``StopSignal``."""

    def __init__(self, budget: WebBudget) -> None:
        self.budget = budget
        self.stats = WorkStats()
        # Spawned, not forked: the server has threads, and a fork copies whatever locks they held. At a lower
        # priority (nice +10), so that the server's own process (health, static files, streams) goes first.
        context = multiprocessing.get_context("spawn")
        # (done, total, started) per call that may run or wait at once; aligned 8-byte words, written by one worker at
        # a time (started: the pid of the worker that took the call, 0 while it waits for one).
        self._progress = context.RawArray("q", SLOT_WORDS * self.limit)
        self._free_slots = list(range(self.limit))
        self._processes = context.Pool(budget.concurrency, initializer=_start_worker, initargs=(self._progress,))
        self._closed = False
        self._waiting: set[asyncio.Future[Any]] = set()  # the calls admitted and not yet answered
        self._loop: asyncio.AbstractEventLoop | None = None
        _POOLS.add(self)

    @property
    def limit(self) -> int:
        return self.budget.concurrency + self.budget.queue

    def admit(self) -> None:
        """Raise ``Busy`` when no more calls may run or wait."""
        if self._closed or self.stats.running >= self.limit:
            self.stats.refused += 1
            # Most calls take about a second: the calls ahead of this one, shared among the workers.
            raise Busy(self.limit, max(1, -(-self.stats.running // self.budget.concurrency)))

    async def run(self, fn: Callable[..., T], *args: Any, seconds: float | None = None, watch: Progress | None = None) -> T:
        """``fn(*args)`` in a worker process, within the deadline (``seconds``, default the budget's); raises ``Busy``
        or ``TimedOut``. ``watch(done, total)`` learns what the call reports, a few times a second."""
        self.admit()
        seconds = seconds or self.budget.seconds
        # CLOCK_MONOTONIC: the same clock in every process. Counted from when the request was whole, not from this
        # call: time it spent on the loop before (app.web.deadline) is part of its deadline, which the request's
        # clock then holds (the middleware answers 503 by it plus a margin, whatever the route does after).
        clock = deadline_clock.current()
        deadline = (clock.since if clock is not None else time.monotonic()) + seconds
        if clock is not None:
            clock.deadline = deadline
        self.stats.running += 1
        slot = self._free_slots.pop()
        self._progress[SLOT_WORDS * slot:SLOT_WORDS * (slot + 1)] = [0] * SLOT_WORDS
        loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._waiting.add(future)

        def settle(result: Any = None, error: BaseException | None = None) -> None:  # on the loop
            self.stats.running -= 1
            self._free_slots.append(slot)  # only now: until the worker returns, it may still write there
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        self._processes.apply_async(
            _call_in_worker, (deadline, slot, fn, args),
            callback=lambda result: loop.call_soon_threadsafe(settle, result),
            error_callback=lambda error: loop.call_soon_threadsafe(settle, None, error),
        )
        watcher = asyncio.create_task(self._watch(slot, future, watch)) if watch is not None else None
        try:
            result = await self._result(future, slot, deadline, seconds)
        except Stopped as exc:
            self.stats.timed_out += 1
            raise TimedOut(f"stopped after {seconds:g} s ({exc}); the limit here is {seconds:g} s: ask for less") from None
        except TimedOut:
            self.stats.timed_out += 1
            raise
        finally:
            self._waiting.discard(future)
            future.cancel()  # given up on (answered 503): what the worker sends later is dropped, not left unread
            if watcher is not None:
                watcher.cancel()
        self.stats.completed += 1
        if watch is not None:
            watch(self._progress[SLOT_WORDS * slot], self._progress[SLOT_WORDS * slot + 1])
        return result

    async def _result(self, future: asyncio.Future[T], slot: int, deadline: float, seconds: float) -> T:
        """The call's result, or ``TimedOut`` at its deadline if it is still waiting for a worker, or ``WAIT_S`` after
        it if a worker has it and has not stopped (a stretch without a checkpoint): the answer is never held for it."""
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            pass
        if not self._progress[SLOT_WORDS * slot + 2]:  # no worker took it: it would only stop at its first checkpoint
            raise TimedOut(f"waited {seconds:g} s for a worker; the limit here is {seconds:g} s: the server is busy, retry shortly")
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout=max(0.0, deadline + deadline_clock.WAIT_S - time.monotonic()))
        except TimeoutError:
            raise TimedOut(f"not done after {seconds:g} s; the limit here is {seconds:g} s: ask for less") from None

    async def _watch(self, slot: int, future: asyncio.Future[Any], watch: Progress) -> None:
        while not future.done():
            watch(self._progress[SLOT_WORDS * slot], self._progress[SLOT_WORDS * slot + 1])
            await asyncio.sleep(WATCH_EVERY_S)

    async def run_json(self, fn: Callable[..., Any], *args: Any, seconds: float | None = None) -> Response:
        """``run``, with the answer rendered as JSON in the worker too (tens of MB would take the loop's time)."""
        body = await self.run(_json_bytes, fn, args, seconds=seconds)
        return Response(body, media_type="application/json")

    def stopping(self) -> None:
        """On the loop, as the server starts to stop: take no more calls, and answer those admitted at once (503), so
        that no request holds the shutdown's grace period for a simulation nobody will read."""
        self._closed = True
        for future in self._waiting:
            if not future.done():
                future.set_exception(TimedOut("the server is stopping; retry shortly"))

    def close(self) -> None:
        """Stop every call at its next checkpoint and take no more (the server is stopping)."""
        self._closed = True
        self._processes.terminate()


_POOLS: weakref.WeakSet[Workers] = weakref.WeakSet()


def stop_all() -> None:
    """From the server's SIGTERM (or Ctrl-C) handler: every pool's ``stopping``, on its own event loop."""
    for pool in list(_POOLS):
        if pool._loop is not None and not pool._loop.is_closed():
            pool._loop.call_soon_threadsafe(pool.stopping)


# What the routes send to a worker: imported when it starts, not on its first call.
_WARM_MODULES = ("app.web.routes", "app.web.run_view", "sim.simulation.run", "sim.analysis.capacity", "sim.analysis.whatif", "sim.simulation.replay", "sim.calibration.calibrate")


SLOT_WORDS = 3  # a call's words of the shared array: done, total, started
_progress: Any = None  # in a worker: the shared (done, total, started) array
_slot = -1  # in a worker: the running call's slot of it


def _start_worker(progress: Any) -> None:
    global _progress
    _progress = progress
    os.nice(WORKER_NICE)
    for name in _WARM_MODULES:
        importlib.import_module(name)


def report(done: int, total: int) -> None:
    """In a worker: the running call's progress, for ``run``'s ``watch`` (nothing outside a worker)."""
    if _progress is not None and _slot >= 0:
        _progress[SLOT_WORDS * _slot + 1] = total
        _progress[SLOT_WORDS * _slot] = done


def _call_in_worker(deadline: float, slot: int, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """In a worker process: ``fn(*args)``, stopped at its first checkpoint past ``deadline``."""
    global _slot
    signal = StopSignal(deadline=deadline)
    _slot = slot
    _progress[SLOT_WORDS * slot + 2] = os.getpid()
    try:
        with stoppable(signal):
            signal.check()  # it may have waited in the queue past its deadline
            return fn(*args)
    except Exception as exc:
        raise _returnable(exc) from None
    finally:
        _slot = -1


class WorkerError(Exception):
    """What a call raised, as text: its exception would not have unpickled in the server."""


def _returnable(exc: Exception) -> Exception:
    """``exc`` if the server can unpickle it, else a ``WorkerError`` naming it: the pool unpickles results on its
    one result thread, which an exception there ends, and no call is answered after."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return WorkerError(f"{type(exc).__name__}: {exc}")


def _json_bytes(fn: Callable[..., Any], args: tuple[Any, ...]) -> bytes:
    return JSONResponse(fn(*args)).body
