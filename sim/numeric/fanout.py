"""Many independent jobs through one function, side by side on an executor (processes, Ray) or in order, with progress."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

J = TypeVar("J")
R = TypeVar("R")

Progress = Callable[[int, int], None]


def fan_out(fn: Callable[[J], R], jobs: Sequence[J], executor: Any | None = None, progress: Progress | None = None) -> list[R]:
    """``fn`` of each job, in the jobs' order; ``executor`` (anything with ``map(fn, jobs, chunksize=)``: a process
    pool, Ray's) runs them side by side; ``progress(done, total)`` after each one."""
    # About 64 chunks: few enough that sending each costs little, enough that the workers finish together.
    results: Iterable[R] = executor.map(fn, jobs, chunksize=max(1, len(jobs) // 64)) if executor else map(fn, jobs)
    out = []
    for i, result in enumerate(results, 1):
        out.append(result)
        if progress is not None:
            progress(i, len(jobs))
    return out
