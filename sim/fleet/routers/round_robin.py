"""Round-robin: replica 0, 1, ..., N-1, 0, ... in arrival order, as a Kubernetes Service's kube-proxy spreads connections
(one request a connection) and as SGLang's ``round_robin`` policy does (``policies/round_robin.rs``: an atomic counter
modulo the workers)."""

from __future__ import annotations

from collections.abc import Sequence

from sim.fleet.routers.base import ReplicaState, RoutedRequest, Router


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        chosen = self._next % len(replicas)
        self._next += 1
        return chosen
