"""An offload tier as data: its name, kind, capacity, eviction policy, unit, admission and load cost; a run's are an ordered list.

The first offload tier is the CPU (LMCache's local CPU backend, whose memory
every store passes through, or vLLM's native CPU tier); any behind it
(LMCache's local disk, a remote store) are searched in order after it.
Under ``lmcache`` and ``brief`` every offload tier keeps chunks of the
scenario's chunk size, keyed by the same prefix-chained hash, and stores a
chunk the first time it is offered; vLLM's native tier has its own offload
block (``unit_tokens``) and ``store_threshold`` (``admission``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.tiers.chunk_store import ChunkPolicy

TierKind = Literal["cpu", "disk"]


@dataclass(frozen=True, slots=True)
class OffloadTier:
    """One offload tier.

    ``load_ms_per_token`` None: the cost model's constant for the kind (CPU or
    disk load). ``unit_tokens`` None: the scenario's chunk size. ``admission``:
    a chunk is stored on the offer that brings its count of offers to this
    (vLLM's ``store_threshold``; 0 and 1 store on the first). ``prompt_only``:
    chunks of generated tokens are never offered (vLLM's ``offload_prompt_only``;
    LMCache's ``save_decode_cache`` is off by default, so it holds there too).
    """

    name: str
    kind: TierKind
    capacity_tokens: int
    policy: ChunkPolicy = "lru"
    load_ms_per_token: float | None = None
    unit_tokens: int | None = None
    admission: int = 1
    prompt_only: bool = True
