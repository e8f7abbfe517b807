"""libCacheSim (the ``libcachesim`` package) as the reference LRU: the same flattened block stream, its C simulator.

The stream is written as an oracleGeneral binary trace (libCacheSim's native
format: per request ``<uint32 time, uint64 id, uint32 size, int64 next access>``),
one object per block, all of size 1, so a cache of ``C`` bytes holds ``C`` blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# <uint32 time, uint64 id, uint32 size, int64 next access>, packed: 24 bytes a request.
_RECORD = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


def available() -> str | None:
    """The installed libcachesim version, or None when it cannot be imported."""
    try:
        import libcachesim  # noqa: F401
        from importlib.metadata import version
    except ImportError:
        return None
    return version("libcachesim")


def write_oracle_general(stream: Sequence[int], path: Path) -> None:
    """Each block reference as one request of size 1; ``next access`` unknown (-1): LRU does not read it."""
    records = np.empty(len(stream), _RECORD)
    records["time"] = np.arange(len(stream), dtype=np.uint32)
    records["id"] = np.asarray(stream, dtype=np.uint64)
    records["size"] = 1
    records["next"] = -1
    records.tofile(path)


def hashpower_for(distinct: int) -> int:
    """A hash table with about twice as many buckets as objects; libCacheSim's default (2**24) costs ~0.1 s per cache."""
    return max(10, distinct.bit_length() + 1)


def lru_seconds(path: Path, capacity: int, distinct: int, repeats: int) -> list[float]:
    """Wall seconds of ``repeats`` runs of libCacheSim's LRU at one capacity over the whole trace (the reader reset between)."""
    import time

    import libcachesim as lcs

    reader: Any = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    out = []
    for _ in range(repeats):
        reader.reset()
        cache = lcs.LRU(cache_size=capacity, hashpower=hashpower_for(distinct))
        started = time.perf_counter()
        cache.process_trace(reader)
        out.append(time.perf_counter() - started)
    return out


def lru_hit_ratios(path: Path, capacities: Sequence[int], distinct: int) -> list[float]:
    """libCacheSim's LRU hit ratio at each capacity (in blocks), one full simulation per capacity."""
    import libcachesim as lcs

    reader: Any = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    power = hashpower_for(distinct)
    out = []
    for capacity in capacities:
        reader.reset()
        miss_ratio, _ = lcs.LRU(cache_size=capacity, hashpower=power).process_trace(reader)
        out.append(1.0 - miss_ratio)
    return out
