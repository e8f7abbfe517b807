"""Monotone search: the smallest capacity at which a monotone condition first holds, by bisection."""

from __future__ import annotations

from collections.abc import Callable


def smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest ``x`` in ``[lo, hi]`` with ``ok(x)``, for a monotone ``ok``; None if there is none."""
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
