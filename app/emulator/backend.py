"""The emulator's engine room: one simulator ``Engine``, vLLM's counters, and prefills served one at a time.

Prefills do not batch: they run one at a time, in the order requests reach
the engine, on a schedule kept as times rather than a lock. A request's
prefill starts when it arrived or when the prefill before it ends, whichever
is later, and its first token is due at that start + its modelled TTFT /
speed. Time queued behind another prefill is added to its TTFT (as on a busy
server); the emulator's own processing time (reading the body, tokenizing,
hashing) is not, because the deadline is counted from arrival, not from when
that work ends. Decodes of earlier requests go on meanwhile (they do not
delay a prefill). The counters move exactly as vLLM v1's do:

- ``prefix_cache_queries`` += prompt tokens, ``prefix_cache_hits`` += GPU hit
  tokens (vLLM's ``KVCacheManager`` prefix-cache stats);
- with a CPU tier, ``external_prefix_cache_queries`` += prompt tokens minus the
  GPU hit (what vLLM asks its KV connector for) and
  ``external_prefix_cache_hits`` += tokens loaded from CPU; without one both
  stay 0 (vLLM exports them whether or not a connector is configured).

``/metrics`` renders these same numbers, so an outside observer's deltas equal
the engine's records.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from app.emulator.config import EmulatorConfig
from app.emulator.deadline import sleep_until
from app.emulator.kv_events import KvEventsBridge
from sim.blocks.prompt_keys import request_for_tokens
from sim.blocks.request import Units
from sim.costs.model import default_costs
from sim.engine.loop import Engine, TierSpec

# vLLM's buckets for vllm:time_to_first_token_seconds.
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)
# How long before a first token is due its wait stops sleeping and starts yielding (see deadline.sleep_until):
# about a sleeping process's wake-up on a busy two-core machine.
FIRST_TOKEN_SPIN_S = 0.0002
# Records kept for /kvscope/emulator; older ones are dropped so a long-running emulator stays small.
KEPT_RECORDS = 10_000


@dataclass(slots=True)
class Counters:
    """vLLM's cumulative counters, in tokens and requests."""

    requests: int = 0
    finished: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    external_prefix_cache_queries: int = 0
    external_prefix_cache_hits: int = 0
    ttft_bucket_counts: list[int] = field(default_factory=lambda: [0] * len(TTFT_BUCKETS_S))
    ttft_count: int = 0
    ttft_sum_s: float = 0.0

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_count += 1
        self.ttft_sum_s += seconds
        for i, bound in enumerate(TTFT_BUCKETS_S):
            if seconds <= bound:
                self.ttft_bucket_counts[i] += 1

    def to_dict(self) -> dict[str, Any]:
        """The token and request counters (the TTFT histogram is in ``/metrics``)."""
        return {k: v for k, v in asdict(self).items() if not k.startswith("ttft_")}


@dataclass(slots=True, eq=False)  # one object per request, compared by identity
class Prefill:
    """One served prefill: where its prompt came from, the model's TTFT, its delay (TTFT / speed), the time it
    queued behind other prefills before its own began, and when its first token was released (0 until then)."""

    seq: int
    prompt_tokens: int
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    computed_tokens: int
    ttft_ms: float
    delay_ms: float
    alloc_blocks: int
    queued_ms: float
    arrived: float
    started: float
    due: float
    released: float = 0.0

    @property
    def cached_tokens(self) -> int:
        """vLLM's ``num_cached_tokens``: local and external hits."""
        return self.gpu_hit_tokens + self.cpu_hit_tokens

    def to_dict(self, epoch: float) -> dict[str, Any]:
        """The record as ``/kvscope/emulator`` shows it; its prefill's start and due times in ms since ``epoch``."""
        hidden = ("alloc_blocks", "arrived", "started", "due", "released")  # internal: perf_counter seconds
        out = {k: v for k, v in asdict(self).items() if k not in hidden}
        out["start_ms"] = round((self.started - epoch) * 1000, 3)
        out["due_ms"] = round((self.due - epoch) * 1000, 3)
        # How long after its deadline the first token was handed to the server to send: the emulator's own
        # lateness (processing that outran the deadline, a late wake-up), apart from loopback and the client.
        out["late_ms"] = round((self.released - self.due) * 1000, 3) if self.released else None
        return out


class Backend:
    """Serves prefills through the simulator's tiers and keeps vLLM's counters of them."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.units = Units(config.block_size, config.chunk_size)
        tiers = TierSpec(units=self.units, gpu_tokens=config.gpu_tokens, cpu_tokens=config.cpu_tokens)
        self.engine = Engine("emulator", tiers, config.costs or default_costs())
        self.counters = Counters()
        self.records: deque[Prefill] = deque(maxlen=KEPT_RECORDS)
        self.blocks_in_use = 0
        self.running = 0
        self._seq = 0
        # Set by ``kvscope emulate --kv-events``: publishes what each prefill did to the tiers.
        self.kv_events: KvEventsBridge | None = None
        self.epoch = time.perf_counter()  # records give their prefills' times from here
        # When the prefill now scheduled last ends (perf_counter seconds); the next one starts no earlier.
        self._prefill_free_at = 0.0
        self._in_flight: list[Prefill] = []

    @property
    def has_cpu_tier(self) -> bool:
        return self.engine.cpu is not None

    @property
    def kv_cache_usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc``: blocks held by running requests over all blocks (0 when idle)."""
        return self.blocks_in_use / self.config.num_gpu_blocks

    def schedule(self, tokens: list[int], arrived: float) -> Prefill:
        """Look the prompt up in the tiers and give its prefill its turn: due at its start + TTFT / speed.

        ``arrived`` is ``time.perf_counter()`` when the request came in. Nothing
        here awaits, so requests take their turns atomically, in the order they
        reach it; the caller then ``wait``s for the prefill (or ``release``s it).
        """
        request = request_for_tokens(tokens, self.units, seq=self._seq)
        self._seq += 1
        record, _ = self.engine.process(request, emit=False)
        if self.kv_events is not None:
            self.kv_events.publish(request, tokens, record.gpu_hit_tokens)
        # The engine keeps every record for whole-run summaries; a server does not need them.
        self.engine.records.clear()
        delay_s = record.ttft_ms / self.config.speed / 1000
        start = max(arrived, self._prefill_free_at)
        due = start + delay_s
        self._prefill_free_at = due
        prefill = Prefill(
            record.seq, record.prompt_tokens, record.gpu_hit_tokens, record.cpu_hit_tokens, record.computed_tokens,
            record.ttft_ms, round(delay_s * 1000, 3), request.alloc_blocks, round((start - arrived) * 1000, 3),
            arrived, start, due,
        )
        self._count(prefill)
        self.blocks_in_use += prefill.alloc_blocks
        self.running += 1
        self._in_flight.append(prefill)
        return prefill

    async def wait(self, prefill: Prefill) -> None:
        """Until the prefill's first token is due; counted in the TTFT histogram then."""
        await sleep_until(prefill.due, FIRST_TOKEN_SPIN_S)
        prefill.released = time.perf_counter()
        self.counters.observe_ttft(prefill.released - prefill.arrived)

    @property
    def waiting(self) -> int:
        """Requests whose prefill has not started yet (vLLM's ``num_requests_waiting``)."""
        now = time.perf_counter()
        return sum(1 for p in self._in_flight if p.started > now)

    def release(self, prefill: Prefill) -> None:
        """The request ended (finished or abandoned): its blocks no longer count as in use."""
        self.blocks_in_use -= prefill.alloc_blocks
        self.running -= 1
        self._in_flight.remove(prefill)

    def finish(self, prefill: Prefill, generated_tokens: int) -> None:
        """The request's last token was sent."""
        self.counters.generation_tokens += generated_tokens
        self.counters.finished += 1
        self.release(prefill)

    def _count(self, p: Prefill) -> None:
        c = self.counters
        c.requests += 1
        c.prompt_tokens += p.prompt_tokens
        c.prefix_cache_queries += p.prompt_tokens
        c.prefix_cache_hits += p.gpu_hit_tokens
        if self.has_cpu_tier:
            c.external_prefix_cache_queries += p.prompt_tokens - p.gpu_hit_tokens
            c.external_prefix_cache_hits += p.cpu_hit_tokens
        self.records.append(p)

    def info(self) -> dict[str, Any]:
        """What the emulator is, for live mode's shadow simulation and for tests: ``/kvscope/emulator``."""
        cfg = self.config
        return {
            "emulator": "kvscope",
            "model": cfg.model,
            "speed": cfg.speed,
            "block_size": cfg.block_size,
            "chunk_size": cfg.chunk_size,
            "gpu_tokens": cfg.gpu_tokens,
            "num_gpu_blocks": cfg.num_gpu_blocks,
            "cpu_gb": cfg.cpu_gb,
            "cpu_tokens": cfg.cpu_tokens,
            "max_model_len": cfg.context_tokens,
            "costs": self.engine.costs.model_dump(mode="json"),
            "counters": self.counters.to_dict(),
            "requests": [p.to_dict(self.epoch) for p in self.records],
        }
