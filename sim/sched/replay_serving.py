"""How a trace is served, as a user gives it: ``Serving`` plus the trace's own timestamps (``timed``, ``speedup``).

One definition for ``kvscope replay``'s ``--timed``/``--speedup`` flags and
``/api/replay``'s ``timed``/``speedup`` fields, beside every ``Serving`` field.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from sim.sched.arrivals import Arrivals, Timed
from sim.sched.serving import Serving

MAX_SPEEDUP = 1_000_000.0
MIN_SPEEDUP = 0.001  # a thousand times slower: the sample's 17 minutes become 12 days; below it gaps reach infinity


def trace_arrivals(timestamps_ms: Any, speedup: float = 1.0) -> Timed:
    """A trace's timestamps from its first, in ms, their gaps divided by ``speedup``."""
    if not MIN_SPEEDUP <= speedup <= MAX_SPEEDUP:
        raise ValueError(f"speedup must be at least {MIN_SPEEDUP:g} and at most {MAX_SPEEDUP:,.0f}, got {speedup}")
    first = timestamps_ms[0] if len(timestamps_ms) else 0.0
    return Timed(tuple((t - first) / speedup for t in timestamps_ms))


class ReplayServing(Serving):
    """A replay's arrivals: the trace's timestamps (``timed``, their gaps divided by ``speedup``), or ``Serving``'s."""

    timed: bool = Field(
        default=False,
        description="requests arrive at the trace's timestamps and vLLM's scheduler loop serves them: TTFT counts queueing",
    )
    speedup: float | None = Field(
        default=None, ge=MIN_SPEEDUP, le=MAX_SPEEDUP,
        description="with timed: the gaps between timestamps divided by this (2: the trace in half its time)",
    )

    @field_validator("timed")
    @classmethod
    def _timed_alone(cls, timed: bool, info: ValidationInfo) -> bool:
        # Validated after Serving's own fields, so their values are in ``info.data``.
        if timed and any(info.data.get(name) is not None for name in ("concurrency", "rate")):
            raise ValueError("the trace's timestamps say when requests arrive; give timed or concurrency/rate")
        return timed

    @field_validator("speedup")
    @classmethod
    def _speedup_timed(cls, speedup: float | None, info: ValidationInfo) -> float | None:
        if speedup is not None and not info.data.get("timed", True):  # a refused timed is reported once
            raise ValueError("needs timed")
        return speedup

    @property
    def stepped(self) -> bool:
        return self.timed or super().stepped

    def trace_arrivals(self, timestamps_ms: Any) -> Arrivals:
        """The trace's timestamps from its first, in ms, their gaps divided by ``speedup``, when ``timed``; else
        ``Serving``'s arrivals."""
        if not self.timed:
            return self.arrivals()
        return trace_arrivals(timestamps_ms, self.speedup or 1.0)

    def summary(self) -> dict[str, Any]:
        settings = super().summary()
        if not self.timed:
            return settings
        return {"arrivals": "timestamps", "speedup": self.speedup or 1.0,
                **{k: v for k, v in settings.items() if k != "concurrency"}}
