"""NVIDIA Dynamo's KV router: the replica whose prefill and decode blocks would be fewest, from the replicas' KV events.

``ai-dynamo/dynamo`` ``lib/llm/src/kv_router/scheduler.rs`` (``DefaultWorkerSelector::select_worker``,
``softmax_sample``; defaults in the router docs: ``--kv-overlap-score-weight`` 1, ``--router-temperature`` 0):
- per worker, the prefill tokens it would have: the new tokens of the requests it was routed and has not yet
  prefilled (``prefill_counter``), plus this request's ``isl - overlap * block_size``, where ``overlap`` is the
  leading blocks the worker holds (its indexer, fed by KV events);
- ``logit = overlap_score_weight * prefill_tokens / block_size + decode_blocks``, ``decode_blocks`` the worker's
  active blocks (its load events' ``kv_active_blocks``); lower is better;
- temperature 0: the lowest logit, a tie drawn at random (seeded here); otherwise a softmax of
  ``-logit / (max - min) / temperature``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from sim.fleet.routers.base import ReplicaState, RoutedRequest, Router

OVERLAP_SCORE_WEIGHT = 1.0
TEMPERATURE = 0.0


class DynamoKv(Router):
    name = "dynamo"
    reads_kv_events = True

    def __init__(self, overlap_score_weight: float = OVERLAP_SCORE_WEIGHT, temperature: float = TEMPERATURE,
                 seed: int = 0) -> None:
        self.overlap_score_weight = overlap_score_weight
        self.temperature = temperature
        self._rng = random.Random(seed)
        self._prefill_tokens: dict[int, tuple[int, int]] = {}  # seq -> (worker, new tokens), until prefilled

    def logits(self, request: RoutedRequest, replicas: Sequence[ReplicaState]) -> list[float]:
        queued = [0] * len(replicas)
        for worker, tokens in self._prefill_tokens.values():
            queued[worker] += tokens
        block = request.block_tokens
        return [
            self.overlap_score_weight * (queued[i] + request.prompt_tokens - r.held_prefix_blocks * block) / block
            + r.active_blocks
            for i, r in enumerate(replicas)
        ]

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        logits = self.logits(request, replicas)
        chosen = self._sample(logits)
        new = request.prompt_tokens - replicas[chosen].held_prefix_blocks * request.block_tokens
        self._prefill_tokens[request.seq] = (chosen, new)
        return chosen

    def _sample(self, logits: list[float]) -> int:
        lo, hi = min(logits), max(logits)
        if self.temperature == 0.0:
            return self._rng.choice([i for i, v in enumerate(logits) if v == lo])
        if lo == hi:
            return self._rng.randrange(len(logits))
        scaled = [-v / (hi - lo) / self.temperature for v in logits]
        top = max(scaled)
        weights = [math.exp(v - top) for v in scaled]
        return self._rng.choices(range(len(logits)), weights=weights)[0]

    def prefilled(self, seq: int, replica: int) -> None:
        self._prefill_tokens.pop(seq, None)

    def finished(self, seq: int, replica: int) -> None:
        self._prefill_tokens.pop(seq, None)
