"""The offload tiers' eviction policies, one module each, looked up by name in ``POLICIES``.

The CLI, the API and the page offer ``CHUNK_POLICY_NAMES``; ``chunk_policy``
builds one. ``lru``, ``fifo``, ``lfu`` and ``mru`` follow LMCache 0.5.6's
``cache_policy/``; ``s3fifo`` and ``arc`` follow libCacheSim (LMCache has neither).
"""

from __future__ import annotations

from sim.tiers.policies.arc import Arc
from sim.tiers.policies.base import ChunkPolicy
from sim.tiers.policies.fifo import Fifo
from sim.tiers.policies.lfu import Lfu
from sim.tiers.policies.lru import Lru
from sim.tiers.policies.mru import Mru
from sim.tiers.policies.s3fifo import S3Fifo

POLICIES: dict[str, type[ChunkPolicy]] = {p.name: p for p in (Lru, Fifo, Lfu, Mru, S3Fifo, Arc)}
CHUNK_POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def chunk_policy(name: str, capacity_tokens: int) -> ChunkPolicy:
    """A fresh policy for a tier of ``capacity_tokens``; the error lists the known names."""
    try:
        return POLICIES[name](capacity_tokens)
    except KeyError:
        raise ValueError(f"unknown chunk policy {name!r}; known: {', '.join(POLICIES)}") from None
