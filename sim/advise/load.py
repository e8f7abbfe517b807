"""The advisor under load: a workload served as vLLM's scheduler serves it, the working set it holds in flight, and
the highest rate a candidate sustains within the target.

A candidate is judged by its TTFT percentiles with queueing counted, served
by the stepped engine (``sim.sched``) at the rate the user gave (an open
loop), at a trace's timestamps, or by a closed loop. Its GPU must at least hold
what the requests hold at once at that rate when memory is ample (the working
set in flight, measured: the most blocks running requests held in one step):
below it requests wait for blocks or are preempted, and a size chosen for one
prompt alone is the idle server's answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from sim.blocks.request import Request
from sim.engine.loop import Engine, RequestRecord
from sim.sched.arrivals import Arrivals, Timed
from sim.sched.serving import MAX_RATE_PER_S, Serving
from sim.sched.stepped import SteppedEngine

RATE_PRECISION = 0.01  # the highest sustained rate, found to within 1%
MIN_RATE_PER_S = 0.001  # below this a candidate sustains no rate worth naming: reported as 0
# Evaluations one highest-rate search takes at most: all at once, doublings from the given rate up to the limit or
# halvings down to the floor, then bisection to RATE_PRECISION.
SEARCH_EVALUATIONS = 1 + math.ceil(math.log2(MAX_RATE_PER_S / MIN_RATE_PER_S)) + math.ceil(math.log2(math.log(2) / math.log1p(RATE_PRECISION)))


def serve(engine: Engine, serving: Serving, requests: Sequence[Request], arrivals: Arrivals | None = None) -> tuple[list[RequestRecord], int]:
    """The requests' records (TTFT with queueing) served under ``serving`` (or ``arrivals``), and the peak blocks held."""
    run = SteppedEngine(engine, serving.scheduler_config()).run(list(requests), arrivals or serving.arrivals())
    # Each step's blocks held with all of its allocations made and none of its frees (StepOutput.held_blocks).
    return run.records, max((out.held_blocks for out in run.steps), default=0)


def at_rate(serving: Serving, rate_per_s: float) -> Serving:
    """The same settings with requests arriving at ``rate_per_s`` (an open loop)."""
    return serving.model_copy(update={"rate": rate_per_s, "concurrency": None})


def burst(n: int) -> Timed:
    """Every request at once: the limit of any rate for a finite workload."""
    return Timed((0.0,) * n)


def highest_rate(meets: Callable[[float | None], bool], start_per_s: float) -> float | None:
    """The highest rate (requests/s, to within ``RATE_PRECISION``) at which ``meets`` holds, searched from
    ``start_per_s``; ``meets(None)`` asks about every request at once. None: it holds even then (any rate); 0: not
    even at ``MIN_RATE_PER_S``. The search takes the figure as falling with the rate (as queueing makes it)."""
    if meets(None):
        return None
    if meets(start_per_s):
        lo, hi = start_per_s, start_per_s * 2
        while meets(hi):
            if hi * 2 > MAX_RATE_PER_S:
                return hi
            lo, hi = hi, hi * 2
    else:
        lo, hi = start_per_s / 2, start_per_s
        while not meets(lo):
            if lo / 2 < MIN_RATE_PER_S:
                return 0.0
            lo, hi = lo / 2, lo
    while hi / lo > 1 + RATE_PRECISION:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return round(lo, 4)
