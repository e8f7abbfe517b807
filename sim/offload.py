"""An offload tier as data: its name, kind, capacity, eviction policy and load cost; a run's are an ordered list.

The first offload tier is the CPU (LMCache's local CPU backend, whose memory
every store passes through); any behind it (LMCache's local disk, a remote
store) are searched in order after it. Every offload tier keeps chunks of the
scenario's chunk size, keyed by the same prefix-chained hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.chunk_store import ChunkPolicy

TierKind = Literal["cpu", "disk"]


@dataclass(frozen=True, slots=True)
class OffloadTier:
    """One offload tier. ``load_ms_per_token`` None: the cost model's constant for the kind (CPU or disk load)."""

    name: str
    kind: TierKind
    capacity_tokens: int
    policy: ChunkPolicy = "lru"
    load_ms_per_token: float | None = None
