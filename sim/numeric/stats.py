"""Statistics of TTFT samples: p50 (median), mean, p90, and speed-ups between runs."""

from __future__ import annotations

import math
from collections.abc import Sequence

DECIMALS = 3  # figures in ms are reported to the microsecond
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
    return {"p50_ms": round(p50(values), DECIMALS), "mean_ms": round(mean(values), DECIMALS), "p90_ms": round(p90(values), DECIMALS)}
