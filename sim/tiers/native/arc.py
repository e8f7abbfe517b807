"""vLLM's offloading ARC (``kv_offload/cpu/policies/arc.py``), counted in chunks; not libCacheSim's (``sim.tiers.policies.arc``).

- A stored chunk always enters T1 and leaves the ghosts (``insert`` 65-71).
- A store miss remembered by B1 raises the target size of T1 by
  ``max(1, |B2| / |B1|)`` (capped at the capacity), one remembered by B2
  lowers it by ``max(1, |B1| / |B2|)`` (floored at 0); the ghost entry moves
  to its list's recent end (78-96). The manager reports each missing key once
  per request, before inserting it (``cpu/manager.py`` 293-301).
- When the request ends, tail first: a chunk it only inserted moves to the
  recent end of its list; a ready chunk it reused (loaded, or offered to a
  store while held) moves from T1 to T2, or to T2's recent end (116-139).
- ``evict(n)``: while T1 holds at least ``int(target)`` chunks take T1's
  oldest unprotected (a chunk being written or read counts as protected:
  only ``ref_cnt == 0`` is a candidate, 171-173), else T2's, else T1's; evicted chunks go to B1 or B2,
  each ghost list then trimmed to the capacity, oldest first (149-214).

Unlike libCacheSim's ARC, ghosts do not decide where a chunk is stored, the
target moves per request rather than per access, and a hit alone (a lookup)
changes nothing until the request ends.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from sim.tiers.native.base import NativePolicy, RequestAccess
from sim.tiers.policies.base import StoredChunk


class NativeArc(NativePolicy):
    name = "arc"
    origin = "vLLM 0.33 kv_offload/cpu/policies/arc.py 16-214 (ARCCachePolicy)"

    def __init__(self, capacity_chunks: int) -> None:
        super().__init__(capacity_chunks)
        self.target_t1 = 0.0
        self.t1: OrderedDict[int, None] = OrderedDict()  # back: most recent
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def store_miss(self, keys: Sequence[int]) -> None:
        b1, b2 = self.b1, self.b2
        for key in reversed(keys):
            if key in b1:
                self.target_t1 = min(self.target_t1 + max(1, len(b2) / len(b1)), self.capacity_chunks)
                b1.move_to_end(key)
            elif key in b2:
                self.target_t1 = max(self.target_t1 - max(1, len(b1) / len(b2)), 0)
                b2.move_to_end(key)

    def insert(self, key: int, chunk: StoredChunk, position: int, request: RequestAccess) -> None:
        self.chunks[key] = chunk
        self.t1[key] = None
        self.b1.pop(key, None)
        self.b2.pop(key, None)

    def evict(self, n: int, protected: set[int]) -> list[tuple[int, StoredChunk]] | None:
        if n == 0:
            return []
        t1_left = iter(self.t1)
        t2_left = iter(self.t2)

        def next_free(keys: object) -> int | None:
            for key in keys:  # type: ignore[attr-defined]
                if key not in protected:
                    return key
            return None

        chosen: list[tuple[int, bool]] = []  # (key, from T1)
        t1_size = len(self.t1)
        for _ in range(n):
            key = next_free(t1_left) if t1_size >= int(self.target_t1) else None
            if key is not None:
                chosen.append((key, True))
                t1_size -= 1
                continue
            key = next_free(t2_left)
            if key is not None:
                chosen.append((key, False))
                continue
            key = next_free(t1_left)
            if key is None:
                return None
            chosen.append((key, True))
            t1_size -= 1
        out = []
        for key, from_t1 in chosen:
            if from_t1:
                del self.t1[key]
                self.b1[key] = None
            else:
                del self.t2[key]
                self.b2[key] = None
            out.append((key, self.chunks.pop(key)))
        for ghost in (self.b1, self.b2):
            for _ in range(len(ghost) - self.capacity_chunks):
                ghost.popitem(last=False)
        return out

    def finish(self, keys: Sequence[int], inserted_only: set[int], reused: set[int], request: RequestAccess) -> None:
        t1, t2 = self.t1, self.t2
        for key in reversed(keys):
            if key in inserted_only:
                if key in t1:
                    t1.move_to_end(key)
                elif key in t2:
                    t2.move_to_end(key)
            elif key in reused:
                if key in t1:
                    del t1[key]
                    t2[key] = None
                elif key in t2:
                    t2.move_to_end(key)
