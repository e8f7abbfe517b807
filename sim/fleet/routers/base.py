"""What a router sees and decides: a request's prompt blocks, each replica's state, and the replica it picks.

A router is told of a request (``route``), answers a replica index, and is
told when that request's prefill is done (``prefilled``: its first token) and
when it finishes (``finished``), since several projects' routers count what
they sent and have not yet heard back about. What it may read of a replica is
``ReplicaState``: the scheduler's queue and running count and the KV usage
(what vLLM's ``/metrics`` and stats publish), and, for routers fed the
replicas' KV events, how many of the request's leading blocks the replica
holds in its GPU cache.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class RoutedRequest:
    """A request as a router sees it: its prompt's full block keys (prefix-chained, in order) and its length."""

    seq: int
    prompt_tokens: int
    block_keys: Sequence[int]
    block_tokens: int


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica as the router may see it when the request arrives."""

    waiting: int = 0  # requests in the scheduler's waiting queue (vllm:num_requests_waiting)
    running: int = 0  # requests the scheduler runs (vllm:num_requests_running)
    kv_usage: float = 0.0  # fraction of GPU KV blocks in use (vllm:kv_cache_usage_perc), 0 to 1
    active_blocks: int = 0  # GPU blocks held by running requests
    held_prefix_blocks: int = 0  # leading blocks of this request in its GPU cache (KV-event-fed routers only)


class Router(ABC):
    """Picks a replica for each request; one subclass per project's rule, registered by ``name``."""

    name: ClassVar[str]
    # Whether the fleet must fill ``held_prefix_blocks`` (the router subscribes to the replicas' KV events).
    reads_kv_events: ClassVar[bool] = False

    @abstractmethod
    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        """The index of the replica ``request`` goes to."""

    def prefilled(self, seq: int, replica: int) -> None:
        """The request's prompt has been computed on ``replica`` (its first token left)."""

    def finished(self, seq: int, replica: int) -> None:
        """The request finished on ``replica``."""


class InFlight:
    """A router's own count, per replica, of the requests it sent there and has not yet heard finish."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self._replica_of: dict[int, int] = {}

    def fit(self, replicas: int) -> None:
        if len(self.counts) != replicas:
            self.counts = [0] * replicas
            self._replica_of.clear()

    def sent(self, seq: int, replica: int) -> None:
        self.counts[replica] += 1
        self._replica_of[seq] = replica

    def done(self, seq: int) -> None:
        replica = self._replica_of.pop(seq, None)
        if replica is not None:
            self.counts[replica] -= 1
