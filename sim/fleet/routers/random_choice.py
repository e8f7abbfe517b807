"""Random: each request to a replica drawn uniformly, from a seeded generator so that a run can be repeated."""

from __future__ import annotations

import random
from collections.abc import Sequence

from sim.fleet.routers.base import ReplicaState, RoutedRequest, Router


class RandomChoice(Router):
    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        return self._rng.randrange(len(replicas))
