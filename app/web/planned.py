"""Runs the page has checked and is about to stream: ``/ui/run`` validates a scenario once and leaves it here under
a token, and the run's stream (``POST /ui/run/stream``) takes it, so the scenario is neither sent nor validated again.

A token is taken once; an entry older than ``TTL_S`` or beyond the ``MAX_PLANNED`` newest is dropped (a page that
never opened its stream leaves nothing behind for long). Tokens are random: one page cannot take another's run.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from typing import Generic, TypeVar

MAX_PLANNED = 64
TTL_S = 300.0

Job = TypeVar("Job")


class Planned(Generic[Job]):
    """token -> a checked job, each taken at most once."""

    def __init__(self, most: int = MAX_PLANNED, ttl_s: float = TTL_S) -> None:
        self._jobs: OrderedDict[str, tuple[float, Job]] = OrderedDict()
        self._most = most
        self._ttl_s = ttl_s
        self._lock = threading.Lock()  # put from a worker thread's answer, taken on the event loop

    def put(self, job: Job) -> str:
        token = secrets.token_urlsafe(16)
        now = time.monotonic()
        with self._lock:
            self._jobs[token] = (now, job)
            while len(self._jobs) > self._most or (self._jobs and now - next(iter(self._jobs.values()))[0] > self._ttl_s):
                self._jobs.popitem(last=False)
        return token

    def take(self, token: str) -> Job | None:
        """The job, once; None when the token is unknown, already taken or expired."""
        with self._lock:
            entry = self._jobs.pop(token, None)
        if entry is None or time.monotonic() - entry[0] > self._ttl_s:
            return None
        return entry[1]
