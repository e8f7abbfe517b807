"""vLLM's data-parallel load balancer, as the API server's client picks an engine for each request (vLLM 0.33.0).

``vllm/v1/engine/core_client.py`` ``DPLBAsyncMPClient.get_core_engine_for_request`` (lines 1751-1811):
- it reads ``[waiting, running, kv_cache_usage]`` per engine from ``lb_engines`` (line 1768), a snapshot the DP
  coordinator publishes (``vllm/v1/engine/coordinator.py``: at most every ``min_stats_update_interval_ms`` = 100 ms)
  and the client replaces when one arrives (lines 1587-1598);
- an engine's score is ``max(client_count * inflight, waiting + running)``, its own count of requests sent there
  and not yet finished setting a floor (line 1786), plus ``waiting * 6 * max(0, kv_usage - 0.5)`` when requests
  wait (line 1794): no penalty at or below half the KV cache, three times the queue at a full one;
- the lowest score wins; the scan starts at ``eng_start_index`` and a tie keeps the earlier engine in the scan
  (``score < min_score``, line 1795); the start then moves on by one (line 1806), so equal engines take turns;
- the chosen engine's snapshot ``waiting`` grows by ``client_count`` at once (line 1800), until the next snapshot;
- ``engine_inflight`` grows when a request is sent (line 1811) and shrinks when it finishes
  (``process_engine_outputs``, lines 1820-1824).
One API server here (``client_count`` 1, ``client_index`` 0, so the scan starts at engine 0: lines 1747-1749).
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.fleet.routers.base import InFlight, ReplicaState, RoutedRequest, Router

STATS_INTERVAL_MS = 100.0  # coordinator.py: min_stats_update_interval_ms
KV_PENALTY_START = 0.5  # core_client.py:1794
KV_PENALTY_SCALE = 6.0


class VllmDataParallel(Router):
    name = "vllm-dp"

    def __init__(self, stats_interval_ms: float = STATS_INTERVAL_MS, client_count: int = 1) -> None:
        self.stats_interval_ms = stats_interval_ms
        self.client_count = client_count
        self._snapshot: list[list[float]] = []  # [waiting, running, kv_usage] per engine, as last published
        self._snapshot_ms = float("-inf")
        self._inflight = InFlight()
        self._start = 0

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        n = len(replicas)
        self._inflight.fit(n)
        if now_ms - self._snapshot_ms >= self.stats_interval_ms:  # a new snapshot from the coordinator
            self._snapshot = [[r.waiting, r.running, r.kv_usage] for r in replicas]
            self._snapshot_ms = now_ms
        best, best_score = 0, float("inf")
        for i in range(n):
            idx = (self._start + i) % n
            waiting, running, kv_usage = self._snapshot[idx]
            score = max(self.client_count * self._inflight.counts[idx], waiting + running)
            if waiting:
                score += waiting * KV_PENALTY_SCALE * max(0.0, kv_usage - KV_PENALTY_START)
            if score < best_score:
                best, best_score = idx, score
        self._snapshot[best][0] += self.client_count
        self._start = (self._start + 1) % n
        self._inflight.sent(request.seq, best)
        return best

    def finished(self, seq: int, replica: int) -> None:
        self._inflight.done(seq)
