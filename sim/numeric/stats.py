"""Statistics of TTFT samples: p50 (median), mean, p90, and speed-ups between runs."""

from __future__ import annotations

import math
from collections.abc import Sequence

DECIMALS = 3  # TTFTs are taken in to the microsecond
# The smallest TTFT kvscope takes in (a measurement, or a cost model's cheapest request): anything below rounds
# to 0.0 ms in a summary, and a speed-up over that is a division by zero.
RESOLUTION_MS = 10.0**-DECIMALS


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default); the median of an even count is the middle pair's mean."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def p50(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def p90(values: Sequence[float]) -> float:
    return quantile(values, 0.9)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def speedup(baseline_ms: float, candidate_ms: float) -> float:
    """How many times faster the candidate is; inf if it took no time."""
    return baseline_ms / candidate_ms if candidate_ms > 0 else math.inf


def summary(values: Sequence[float]) -> dict[str, float]:
    """p50, mean and p90, exact: a reader's figure is rounded once, where it is written (sim.numeric.figures); rounding
    here first made a mean of 39.4496 ms 39.45, written 39.5."""
    return {"p50_ms": p50(values), "mean_ms": mean(values), "p90_ms": p90(values)}
