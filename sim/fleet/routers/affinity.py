"""Prefix-hash affinity: a request goes where the hash of its first K blocks lands on a consistent-hash ring.

The session or prefix affinity a gateway gives (SGLang's ``consistent_hash`` policy puts 160 virtual nodes per
worker on its ring, ``sgl-router`` ``parse_policy_config``; its ``prefix_hash`` policy hashes the first 256 prompt
tokens, ``prefix_token_count``): requests that share their first K blocks always meet on one replica, whatever
the load, and a replica added or removed moves only the keys nearest its points. Hashes are BLAKE2b of the
block keys, so a run does not depend on ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from sim.fleet.routers.base import ReplicaState, RoutedRequest, Router

VIRTUAL_NODES = 160
PREFIX_TOKENS = 256


def _hash(*parts: int) -> int:
    data = b"".join(p.to_bytes(8, "little", signed=True) for p in parts)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class PrefixAffinity(Router):
    name = "affinity"

    def __init__(self, prefix_tokens: int = PREFIX_TOKENS, virtual_nodes: int = VIRTUAL_NODES) -> None:
        self.prefix_tokens = prefix_tokens
        self.virtual_nodes = virtual_nodes
        self._ring: list[tuple[int, int]] = []

    def _points(self, n: int) -> list[tuple[int, int]]:
        if len(self._ring) != n * self.virtual_nodes:
            self._ring = sorted((_hash(replica, v), replica) for replica in range(n) for v in range(self.virtual_nodes))
        return self._ring

    def key(self, request: RoutedRequest) -> int:
        """The hash of the request's first ``prefix_tokens`` tokens' blocks (its whole prompt's if shorter)."""
        blocks = max(1, self.prefix_tokens // request.block_tokens)
        head = list(request.block_keys[:blocks]) or [request.prompt_tokens]
        return _hash(*head)

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        ring = self._points(len(replicas))
        at = bisect.bisect_left(ring, (self.key(request), -1))
        return ring[at % len(ring)][1]
