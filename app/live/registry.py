"""The dashboard's live runs: created, streamed once, their measurements kept in memory for download.

A run reserves its targets when it is created, so two browser tabs cannot
send overlapping requests to one server (that would break the per-request
counter deltas). A run that is never streamed releases them after
``UNSTARTED_TTL_S``; a streamed run releases them when its stream ends, for
whatever reason. The last ``KEPT_RUNS`` runs are kept.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum

from app.live.session import LiveRun

KEPT_RUNS = 20
UNSTARTED_TTL_S = 60.0


class RunState(str, Enum):
    CREATED = "created"  # targets reserved; waiting for its stream to be opened
    RUNNING = "running"  # the stream is open; requests are being sent
    FINISHED = "finished"  # every target finished or failed
    STOPPED = "stopped"  # the stream was closed before the end (the client left)
    EXPIRED = "expired"  # never streamed within UNSTARTED_TTL_S


class BusyTargets(Exception):
    """Another live run holds some of these targets."""


@dataclass
class LiveRunEntry:
    id: str
    run: LiveRun
    created_at: float = field(default_factory=time.monotonic)
    state: RunState = RunState.CREATED

    @property
    def target_names(self) -> list[str]:
        return [t.name for t in self.run.targets]

    @property
    def holds_targets(self) -> bool:
        if self.state is RunState.CREATED and time.monotonic() - self.created_at > UNSTARTED_TTL_S:
            self.state = RunState.EXPIRED
        return self.state in (RunState.CREATED, RunState.RUNNING)

    def summary(self) -> dict[str, object]:
        return {
            "id": self.id,
            "state": self.state.value,
            "targets": self.target_names,
            "measured": len(self.run.measurements),
            "errors": dict(self.run.failed),
        }


class LiveRuns:
    """Every live run of this server process, newest last."""

    def __init__(self) -> None:
        self._runs: OrderedDict[str, LiveRunEntry] = OrderedDict()

    def create(self, run: LiveRun) -> LiveRunEntry:
        busy = sorted({n for e in self._runs.values() if e.holds_targets for n in e.target_names} & {t.name for t in run.targets})
        if busy:
            raise BusyTargets(f"another live run is using {', '.join(busy)}; wait for it to finish")
        entry = LiveRunEntry(secrets.token_urlsafe(9), run)
        self._runs[entry.id] = entry
        while len(self._runs) > KEPT_RUNS:
            oldest = next(iter(self._runs.values()))
            if oldest.holds_targets:
                break
            self._runs.popitem(last=False)
        return entry

    def get(self, run_id: str) -> LiveRunEntry | None:
        return self._runs.get(run_id)
