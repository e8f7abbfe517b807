"""When requests arrive: a closed loop of N in flight, an open loop at a Poisson rate, or given timestamps."""

from __future__ import annotations

import random
from dataclasses import dataclass

MAX_SPEEDUP = 1_000_000.0  # a trace's gaps divided by at most this (its timestamps sent faster)


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """``concurrency`` requests in flight, in the workload's order: when one finishes the next arrives, before the
    next step (as long_doc_qa's ``--max-inflight-requests`` sends). Concurrency 1 is the seed lab's loop."""

    concurrency: int = 1

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """Requests arrive at ``rate_per_s`` on average, independently of the server (Poisson, exponential gaps), from t=0."""

    rate_per_s: float
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.rate_per_s > 0:
            raise ValueError(f"rate must be above 0 requests/s, got {self.rate_per_s}")

    def times_ms(self, n: int) -> list[float]:
        rng = random.Random(f"arrivals:{self.seed}")
        t, out = 0.0, []
        for _ in range(n):
            out.append(t)
            t += rng.expovariate(self.rate_per_s) * 1000.0
        return out


@dataclass(frozen=True, slots=True)
class Timed:
    """Each request arrives at its own time (a trace's timestamps, ms from the first), in the workload's order."""

    times: tuple[float, ...]

    def __post_init__(self) -> None:
        for i, (a, b) in enumerate(zip(self.times, self.times[1:])):
            if b < a:
                raise ValueError(f"arrival times must not decrease: request {i + 1} at {b} ms after {a} ms")
        if self.times and self.times[0] < 0:
            raise ValueError(f"arrival times must be at least 0 ms, got {self.times[0]}")

    def times_ms(self, n: int) -> list[float]:
        if len(self.times) != n:
            raise ValueError(f"{len(self.times)} arrival times for {n} requests")
        return list(self.times)


Arrivals = ClosedLoop | OpenLoop | Timed
