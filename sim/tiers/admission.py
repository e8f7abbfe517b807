"""Admission by offers: a tier stores a chunk only once it has been offered it ``admission`` times (vLLM's ``store_threshold``).

vLLM counts offers in an LRU table of 64,000 keys (``vllm/v1/kv_offload/cpu/manager.py``
129-148, the size from ``cpu/spec.py`` 162-163): an offered key it holds is
counted up and moved to the recent end; a new key enters at 1, evicting the
least recent key that this offer did not name (none left: the key is not
tracked). The same table gates vLLM's native CPU tier and, as a what-if, any
tier behind the CPU that sets ``admission`` above 1.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from sim.tiers.chunk_store import ChunkStore
from sim.tiers.policies.base import StoredChunk

MAX_TRACKER_SIZE = 64_000


class OfferCounts:
    """How many times each recently offered key was offered."""

    def __init__(self, size: int = MAX_TRACKER_SIZE) -> None:
        self.size = size
        self._counts: OrderedDict[int, int] = OrderedDict()

    def get(self, key: int) -> int:
        return self._counts.get(key, 0)

    def offer(self, keys: Sequence[int]) -> None:
        counts = self._counts
        named = 0
        for key in keys:
            if key in counts:
                counts.move_to_end(key)
                counts[key] += 1
                named += 1
        others = len(counts) - named
        for key in keys:
            if key in counts:
                continue
            if len(counts) >= self.size:
                if not others:
                    continue
                counts.popitem(last=False)
                others -= 1
            counts[key] = 1


class AdmittingStore(ChunkStore):
    """A chunk store that stores a chunk on its ``admission``-th offer (a tier behind the CPU)."""

    def __init__(self, name: str, capacity_tokens: int, chunk_size: int, policy: str, admission: int) -> None:
        super().__init__(name, capacity_tokens, chunk_size, policy)
        self.admission = admission
        self.offers = OfferCounts()

    def put_many(self, items: Sequence[tuple[int, StoredChunk]], evicted: list[StoredChunk]) -> dict[int, int]:
        """Counts the offer of every chunk (held ones too, as vLLM does), then stores those offered often enough."""
        offers = self.offers
        offers.offer([key for key, _ in items])
        return super().put_many([item for item in items if offers.get(item[0]) >= self.admission], evicted)
