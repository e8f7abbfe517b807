"""The work budget of a run under load, checked step by step: a run that outgrows it stops with what it had served.

An estimate (``sim.sched.simulate.stepped_cost``) counts each request's steps
once: its prefill chunks and its decodes. Preemption (each re-admission
prefills again) and an open loop faster than the server (every waiting request
still needs all its steps) can take a run past it; ``StepLimit`` counts the
request-steps as they are taken and stops the run at the budget with a message
naming the arrival rate and the throughput simulated so far, rather than
running on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sim.bounds.budget import OverBudget
from sim.sched.output import StepOutput

# A request's work in each step it takes part in, in block steps (sim.bounds.budget, ~0.5 us each): measured ~13 us on
# the seed lab with 200 output tokens at 8 in flight (the whole run over its request-steps).
STEP_REQUEST_STEPS = 26


class OverWorkBudget(OverBudget):
    """A run under load stopped at the work budget; the message says how far it got and how fast it served."""

    def __reduce__(self) -> tuple[type[OverWorkBudget], tuple[str, str]]:
        return type(self), (str(self), self.field)  # its field survives a worker process's pickling


@dataclass(slots=True)
class StepLimit:
    """At most ``work_steps`` block steps of request-steps (``STEP_REQUEST_STEPS`` each) over every run metered by
    it (a command's runs share its budget); ``rate_per_s``: the open loop's rate (or a trace's), None for a closed
    loop; ``field``: the input the message is about (``rate``, or what sized the run)."""

    work_steps: int
    rate_per_s: float | None = None
    field: str = "docs"
    taken: int = 0  # request-steps so far, over every run

    def metered(self, steps: Iterator[StepOutput]) -> Iterator[StepOutput]:
        """One run's steps, until the request-steps pass the budget: then ``OverWorkBudget``."""
        most = self.work_steps // STEP_REQUEST_STEPS
        finished = 0
        for out in steps:
            self.taken += len(out.scheduled)
            finished += len(out.finished)
            if self.taken > most:
                raise OverWorkBudget(self.message(out, finished), self.field)
            yield out

    def message(self, out: StepOutput, finished: int) -> str:
        elapsed_s = (out.t_ms + out.dt_ms) / 1000
        served = f"{finished / elapsed_s:,.2f}" if elapsed_s > 0 else "0"
        where = (
            f"requests arrive at {self.rate_per_s:,.2f}/s, faster than the {served}/s the simulated server served"
            if self.rate_per_s is not None else f"the simulated server served {served} requests/s"
        )
        return (
            f"stopped at the work budget ({self.work_steps:,} block steps) at step {out.step:,}, {elapsed_s:,.2f} s "
            f"simulated, {finished:,} requests finished and {out.waiting:,} waiting: {where}"
            + ("; the queue grows without bound: lower the rate" if self.rate_per_s is not None else "")
        )


def step_limit(work_steps: int, serving: Any, arrivals_ms: Sequence[float] = ()) -> StepLimit:
    """The limit of a command's runs under ``serving`` (a ``Serving``): its message about ``rate`` for an open loop,
    about ``timed`` (with the rate the timestamps ``arrivals_ms`` come at) for a trace sent at its timestamps."""
    if getattr(serving, "timed", False):
        span_ms = (arrivals_ms[-1] - arrivals_ms[0]) if len(arrivals_ms) > 1 else 0.0
        return StepLimit(work_steps, (len(arrivals_ms) - 1) * 1000 / span_ms if span_ms > 0 else None, "timed")
    rate = serving.rate
    return StepLimit(work_steps, rate, "rate" if rate is not None else "concurrency")
