"""The advisor's searches the page started, run in the web's workers so the page can poll their progress; the oldest done ones forgotten."""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.web.panel_input import Problem
from app.web.workers import Busy, TimedOut, Workers

MAX_KEPT = 32  # finished searches kept for their page to fetch


@dataclass
class Job:
    """One search: how far it got, and its answer or its error once done (written on the event loop only)."""

    done: int = 0
    total: int = 0
    result: Any = None
    error: str | None = None
    error_field: str = ""  # the input the error names, if any (a Problem's field, e.g. points)
    finished: asyncio.Event = field(default_factory=asyncio.Event)

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total


class Jobs:
    def __init__(self) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()  # held, so that a running search is not collected

    def start(self, workers: Workers, fn: Callable[..., Any], *args: Any, seconds: float | None = None) -> str:
        """Run ``fn(*args)`` in ``workers`` (raises ``Busy`` at once when they are full); its return value is the
        job's result; a ``Problem``, a ``ValueError`` or the workers' ``TimedOut`` its error."""
        workers.admit()
        while len(self._jobs) >= MAX_KEPT:
            oldest = next((k for k, j in self._jobs.items() if j.finished.is_set()), None)
            if oldest is None:
                break
            del self._jobs[oldest]
        job_id = secrets.token_urlsafe(12)
        job = self._jobs[job_id] = Job()

        async def run() -> None:
            try:
                job.result = await workers.run(fn, *args, seconds=seconds, watch=job.progress)
            except (Problem, ValueError, Busy, TimedOut) as exc:
                job.error, job.error_field = str(exc), getattr(exc, "field", "")
            except Exception as exc:  # noqa: BLE001 - the page shows why; nothing else would
                job.error = f"the search failed ({type(exc).__name__}: {exc})"
            finally:
                job.finished.set()

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job_id

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

