"""One step's decisions as data (vLLM's ``SchedulerOutput`` and what ``update_from_output`` answered), and its ledger line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Admission:
    """A waiting request admitted into RUNNING, with the tokens it did not have to compute.

    ``hit_tokens`` is vLLM's ``num_computed_tokens`` at admission: the GPU
    prefix hit plus what the connector loads (``scheduler.py`` 1207-1209,
    1573), over prompt and generated tokens for a request preempted before.
    """

    seq: int
    hit_tokens: int


@dataclass(frozen=True, slots=True)
class StepOutput:
    """What one step scheduled and what came of it.

    ``scheduled``: request seq -> tokens computed this step, running requests
    first, in the order they were scheduled. ``loaded`` and ``stored``: tier
    name -> tokens read into GPU blocks / copied out of them this step.
    ``free_blocks``, ``running`` and ``waiting`` are counted after the step
    (finished requests freed, arrivals before the next step not yet queued).
    """

    step: int  # 1-based
    t_ms: float  # when the step starts
    dt_ms: float
    scheduled: dict[int, int]
    admitted: list[Admission]
    preempted: list[int]
    finished: list[int]
    free_blocks: int
    running: int
    waiting: int
    prefill_tokens: int
    decode_tokens: int
    loaded: dict[str, int] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    held_blocks: int = 0  # GPU blocks the step's batch held, before its finished requests let theirs go
    # vLLM's native connector: tier name -> store offers refused this step, and tokens dropped (refused at the last)
    refused: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def scheduled_tokens(self) -> int:
        return sum(self.scheduled.values())

    def to_dict(self) -> dict[str, Any]:
        """One line of the step ledger (``--steps FILE``), field names as issue 24 lists them."""
        return {
            "step": self.step,
            "t_ms": round(self.t_ms, 3),
            "dt_ms": round(self.dt_ms, 3),
            "scheduled": {str(seq): tokens for seq, tokens in self.scheduled.items()},
            "admitted": [{"seq": a.seq, "hit_tokens": a.hit_tokens} for a in self.admitted],
            "preempted": list(self.preempted),
            "finished": list(self.finished),
            "free_blocks": self.free_blocks,
            "running": self.running,
            "waiting": self.waiting,
            "prefill_tokens": self.prefill_tokens,
            "decode_tokens": self.decode_tokens,
            "loaded": dict(self.loaded),
            "stored": dict(self.stored),
            **({"refused": dict(self.refused)} if self.refused else {}),
            **({"dropped": dict(self.dropped)} if self.dropped else {}),
        }
