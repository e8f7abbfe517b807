"""The runs database's commit thread: one thread (the store has one writer) that commits what recorders hand it,
so that neither the event loop nor a proxy's or a stream's sending ever waits for SQLite.

Fair: each run hands its work to a ``Commits`` of its own, which has at most one
job on the thread's queue at a time, and that job takes all the run's work waiting
when it starts. A run that hands work faster than the disk commits it makes its
own jobs bigger, never another's wait longer: a run's work waits for at most one
job of each other run. A job that fails is logged and said on its run (``failed``),
never dropped in silence, and stops nobody else's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from app.runs.store import RunWriter, StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kvscope-runs-commit")


def _done() -> Future[None]:
    future: Future[None] = Future()
    future.set_result(None)
    return future


def detached(job: Future[None]) -> Future[None]:
    """A future done when ``job`` is, whose cancellation leaves ``job`` alone: a task awaiting a commit
    (``asyncio.wrap_future``) that is cancelled, its client gone, cancels the future it awaits, and a job cancelled
    before it started would never commit, nor let its run queue another."""
    waiter: Future[None] = Future()

    def settle(_: Future[None]) -> None:
        if not waiter.set_running_or_notify_cancel():  # cancelled: nobody waits any more
            return
        exc = job.exception() if not job.cancelled() else None
        if exc is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(exc)

    job.add_done_callback(settle)
    return waiter


def submit(work: Callable[..., None], *args: object) -> Future[None]:
    """``work(*args)`` on the commit thread after every job queued before it; its (detached) future."""
    return detached(THREAD.submit(work, *args))


class Commits(Generic[T]):
    """One run's work for the commit thread: ``hand`` items, which ``work`` commits there, in order, in as few
    jobs as the thread's pace allows; ``done`` is a future that completes once all handed so far is committed.
    ``work`` raising is caught: logged, and given to ``failed`` (which says it on the run)."""

    def __init__(self, work: Callable[[list[T]], None], failed: Callable[[Exception], None]) -> None:
        self._work = work
        self._failed = failed
        self._lock = threading.Lock()
        self._waiting: list[T] = []
        self._queued = False  # a job of this run is on the thread's queue, not yet started
        self._last: Future[None] = _done()

    def hand(self, items: list[T]) -> Future[None]:
        """Queue ``items`` (from any thread, without waiting); the future of the job that will commit them."""
        with self._lock:
            self._waiting.extend(items)
            if not self._queued:
                self._queued = True
                self._last = THREAD.submit(self._take)
            return detached(self._last)

    def done(self) -> Future[None]:
        with self._lock:
            return detached(self._last)

    def _take(self) -> None:
        with self._lock:
            items, self._waiting = self._waiting, []
            self._queued = False
        if not items:
            return
        try:
            self._work(items)
        except Exception as exc:  # noqa: BLE001 - logged and said on the run, never lost with the job's future
            self._failed(exc)


def kept_only_so_far(writer: RunWriter | None, exc: Exception) -> str:
    """Why a run is kept only up to here: logged (with the traceback when it is not the store saying why) and
    written at once in the run's summary (``kept``), where the runs list and ``runs show`` say it."""
    problem = str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"
    run = writer.id if writer is not None else "?"
    if isinstance(exc, StoreError):
        log.warning("run %s is kept only up to here: %s", run, problem)
    else:
        log.error("run %s is kept only up to here", run, exc_info=exc)
    if writer is not None:
        try:
            writer.note_problem(problem)
        except StoreError as again:  # the store itself is failing: the log and the recorder's `problem` say it
            log.warning("run %s: could not note its problem either: %s", run, again)
    return problem
