"""llm-d's inference scheduler: weighted scorers and the highest total, with a precise or an approximate prefix scorer.

The guide's profile (``llm-d/llm-d`` ``guides/precise-prefix-cache-aware/gaie-kv-events/values.yaml``):
``precise-prefix-cache-scorer`` weight 3, ``kv-cache-utilization-scorer`` 2, ``queue-scorer`` 2, then
``max-score-picker``. Each scorer gives a replica a score in [0, 1]:
- prefix: the replica's consecutive leading blocks of the prompt in its cache, min-max normalised over the
  replicas that hold any (``indexedScoresToNormalizedScoredPods``: all equal gives 1.0; a replica holding none 0.0).
  The precise scorer reads the replicas' real caches from their KV events; the approximate one
  (``prefix-cache-scorer``) an LRU index of where it sent each block, ``lruCapacityPerServer`` blocks a replica;
- kv-cache utilisation: ``1 - kv_usage``;
- queue: ``(max_waiting - waiting) / (max_waiting - min_waiting)``, 1.0 when all wait alike
  (gateway-api-inference-extension ``scorer/queue.go``).
The picker takes the highest weighted sum; a tie goes to a replica drawn from a seeded generator (the picker
shuffles before it picks).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Sequence

from sim.fleet.routers.base import ReplicaState, RoutedRequest, Router

PREFIX_WEIGHT, KV_WEIGHT, QUEUE_WEIGHT = 3.0, 2.0, 2.0
LRU_CAPACITY_PER_SERVER = 31_250  # blocks (prefix-cache-scorer's default lruCapacityPerServer)


def normalised_prefix(held: Sequence[int]) -> list[float]:
    """Min-max over the replicas holding at least one block; the rest 0."""
    present = [h for h in held if h > 0]
    if not present:
        return [0.0] * len(held)
    lo, hi = min(present), max(present)
    return [0.0 if h == 0 else 1.0 if hi == lo else (h - lo) / (hi - lo) for h in held]


def queue_scores(replicas: Sequence[ReplicaState]) -> list[float]:
    waits = [r.waiting for r in replicas]
    lo, hi = min(waits), max(waits)
    return [1.0 if hi == lo else (hi - w) / (hi - lo) for w in waits]


class _Scored(Router):
    """The weighted sum and the picker; subclasses say how many leading blocks each replica holds."""

    def __init__(self, prefix_weight: float = PREFIX_WEIGHT, kv_weight: float = KV_WEIGHT,
                 queue_weight: float = QUEUE_WEIGHT, seed: int = 0) -> None:
        self.weights = (prefix_weight, kv_weight, queue_weight)
        self._rng = random.Random(seed)

    def held(self, request: RoutedRequest, replicas: Sequence[ReplicaState]) -> list[int]:
        raise NotImplementedError

    def scores(self, request: RoutedRequest, replicas: Sequence[ReplicaState]) -> list[float]:
        prefix = normalised_prefix(self.held(request, replicas))
        queue = queue_scores(replicas)
        wp, wk, wq = self.weights
        return [wp * p + wk * (1.0 - r.kv_usage) + wq * q for p, r, q in zip(prefix, replicas, queue)]

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        scores = self.scores(request, replicas)
        best = max(scores)
        chosen = self._rng.choice([i for i, s in enumerate(scores) if s == best])
        self.sent(request, chosen)
        return chosen

    def sent(self, request: RoutedRequest, replica: int) -> None:
        """What the scorer learns from its own choice (the approximate index records it)."""


class LlmdPrecise(_Scored):
    name = "llm-d"
    reads_kv_events = True

    def held(self, request: RoutedRequest, replicas: Sequence[ReplicaState]) -> list[int]:
        return [r.held_prefix_blocks for r in replicas]


class LlmdApproximate(_Scored):
    name = "llm-d-approx"

    def __init__(self, lru_capacity_per_server: int = LRU_CAPACITY_PER_SERVER, **weights: float) -> None:
        super().__init__(**weights)  # type: ignore[arg-type]
        self.capacity = lru_capacity_per_server
        self._index: list[OrderedDict[int, None]] = []

    def held(self, request: RoutedRequest, replicas: Sequence[ReplicaState]) -> list[int]:
        if len(self._index) != len(replicas):
            self._index = [OrderedDict() for _ in replicas]
        out = []
        for index in self._index:
            n = 0
            for key in request.block_keys:
                if key not in index:
                    break
                n += 1
            out.append(n)
        return out

    def sent(self, request: RoutedRequest, replica: int) -> None:
        index = self._index[replica]
        for key in request.block_keys:
            index[key] = None
            index.move_to_end(key)
        while len(index) > self.capacity:
            index.popitem(last=False)
