"""Searches the page started, run on threads so the page can poll their progress; a few at once, the oldest done ones forgotten."""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_RUNNING = 2  # each search is CPU-bound; more at once would only slow every one down
MAX_KEPT = 32  # finished searches kept for their page to fetch


@dataclass
class Job:
    """One search: how far it got, and its answer or its error once done (written by its thread only)."""

    done: int = 0
    total: int = 0
    result: Any = None
    error: str | None = None
    finished: threading.Event = field(default_factory=threading.Event)

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total


class Busy(Exception):
    pass


class Jobs:
    def __init__(self) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, work: Callable[[Job], Any]) -> str:
        """Run ``work(job)`` on a thread; its return value is the job's result, a ValueError its error."""
        with self._lock:
            running = sum(1 for j in self._jobs.values() if not j.finished.is_set())
            if running >= MAX_RUNNING:
                raise Busy(f"{running} searches are running; try again when one is done")
            while len(self._jobs) >= MAX_KEPT:
                oldest = next((k for k, j in self._jobs.items() if j.finished.is_set()), None)
                if oldest is None:
                    break
                del self._jobs[oldest]
            job_id = secrets.token_urlsafe(12)
            job = self._jobs[job_id] = Job()

        def run() -> None:
            try:
                job.result = work(job)
            except ValueError as exc:
                job.error = str(exc)
            finally:
                job.finished.set()

        threading.Thread(target=run, name=f"advise-{job_id}", daemon=True).start()
        return job_id

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)
