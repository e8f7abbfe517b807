"""One request in flight: the fields of vLLM's ``Request`` the scheduler reads, and what happened to it so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sim.blocks.pool import Evictions
from sim.blocks.request import Request
from sim.engine.loop import _External
from sim.sched.status import RequestStatus
from sim.tiers.chunk_store import StoredChunk
from sim.tiers.native.base import RequestAccess


@dataclass(slots=True, eq=False)
class Flight:
    """A request from its arrival to its end.

    ``num_computed`` is vLLM's ``num_computed_tokens`` (tokens whose KV is
    computed or scheduled, hits included) and ``num_output`` its generated
    tokens; ``num_tokens`` their sum as vLLM's ``Request.num_tokens``
    (prompt + output). ``blocks`` are the GPU blocks it holds, the first
    ``num_cached_blocks`` of them hashed (vLLM caches full blocks as they
    are allocated). ``first`` keeps the first admission's GPU hit, offload
    hit and computed tokens: the request's record reports them.
    """

    req: Request
    arrival_ms: float
    num_tokens: int  # prompt + generated: grows by one with each sampled token
    status: RequestStatus = RequestStatus.WAITING
    num_computed: int = 0
    num_output: int = 0
    blocks: list[int] = field(default_factory=list)
    num_cached_blocks: int = 0
    preemptions: int = 0
    admissions: list[int] = field(default_factory=list)  # hit tokens (local + external) at each admission
    first_step: int = -1  # index of the step that first admitted it
    first_token_step: int = -1  # 1-based step of its first token
    ttft_ms: float = -1.0
    e2e_ms: float = -1.0
    first: tuple[int, _External, int] | None = None  # gpu hit, offload hit, computed tokens of the first admission
    ext: _External | None = None  # this admission's offload hit, stored when its prefill completes
    gpu_hit: int = 0  # this admission's GPU hit
    hit_end: int = 0
    store_pending: bool = False
    lmcache_hit: list[int] | None = None  # LMCache's cached lookup while the request waits (Engine.lmcache_lookup)
    written: int = 0  # tokens copied out to the offload tiers, every admission
    access: RequestAccess | None = None  # vLLM's native connector: what the request saw of the CPU tier
    loading: list[int] | None = None  # vLLM's native connector: the offload blocks its asynchronous load reads
    load_done: bool = False  # that load has completed (finished_recving): it may be scheduled
    next_stored: int = 0  # vLLM's native connector: the next offload block to offer (next_stored_chunk_idx)
    store_jobs: int = 0  # its stores not yet complete (the connector's transfer_jobs)
    store_refused: int = 0  # prepare_store calls that refused its offer (could not evict)
    store_dropped_tokens: int = 0  # tokens of the offer still refused at its last one: never stored
    explained: Any = None  # an attached observer's attribution at its first lookup (sim.explain)
    placeholders: int = 0  # async scheduling: tokens scheduled ahead, not sampled yet (num_output_placeholders)
    stale: int = 0  # async scheduling: tokens in flight when it was preempted, still to be delivered
    last_scheduled: int = 0  # the step that last scheduled it (last_sched_seq)
    evictions: Evictions = field(default_factory=dict)
    offload_evicted: list[list[StoredChunk]] = field(default_factory=list)
    seq: int = field(init=False)  # the request's: a field, read for every request in every step's ledger line

    def __post_init__(self) -> None:
        self.seq = self.req.seq

    @property
    def done(self) -> bool:
        return self.status.is_finished

    def timing(self, queue_ms: float) -> dict[str, Any]:
        """The request's times: arrival, queueing before its first admission, TTFT (queueing included), TPOT, e2e."""
        decodes = self.num_output - 1
        return {
            "seq": self.seq,
            "arrival_ms": round(self.arrival_ms, 3),
            "queue_ms": round(queue_ms, 3),
            "ttft_ms": round(self.ttft_ms, 3),
            "tpot_ms": round((self.e2e_ms - self.ttft_ms) / decodes, 3) if decodes > 0 else None,
            "e2e_ms": round(self.e2e_ms, 3),
            "output_tokens": self.num_output,
            "preemptions": self.preemptions,
            "admission_hit_tokens": list(self.admissions),
            "first_token_step": self.first_token_step,
            # vLLM's native connector: offers refused (the blocks to evict still being written or read), and the
            # tokens never stored because the last offer was refused too
            **(
                {"store_refused": self.store_refused, "store_dropped_tokens": self.store_dropped_tokens}
                if self.access is not None else {}
            ),
        }
