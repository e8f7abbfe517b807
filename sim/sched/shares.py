"""Where a request's TTFT went under load: its wait, its own prefill, the other requests' tokens in the steps it
shared, its loads and stores, read from a stepped run that recorded each step's share per request.

A step costs ``fixed + prefill x tokens + loads + store x stored (+ decode and
context terms)`` (``sim.sched.step_costs``), linear in each request's part, so
its time splits exactly among the requests it served. A request's TTFT is its
wait before its first admission plus every step from that admission to the
one that sampled its first token; each such step is

* ``waiting_ms`` when it computed nothing of the request (preempted and back in
  the queue, or the budget spent before its turn), like the wait before its
  first admission;
* otherwise the step's fixed cost and the request's own tokens
  (``prefill_ms``), its own loads (``load_ms``) and stores (``store_ms``), and
  the rest of the step (``others_ms``): other requests' prefill chunks and
  decodes, their loads and stores.

The parts sum to the TTFT (to rounding). Alone (one request in flight) the
wait and ``others_ms`` are 0 and the rest is the sequential engine's
``overhead + prefill + load + store``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.engine.loop import cost_ms
from sim.numeric.stats import DECIMALS
from sim.sched.flight import Flight
from sim.sched.output import Admission
from sim.sched.stepped import SteppedEngine, SteppedRun

if TYPE_CHECKING:
    from sim.sched.offloading import StepStores
    from sim.sched.stepped import _Ran

PARTS = ("waiting_ms", "prefill_ms", "others_ms", "load_ms", "store_ms")
NOT_CACHED = -1  # a prefix block no request had cached (or all had evicted) by a request's admission: never evicted


@dataclass(frozen=True, slots=True)
class Share:
    """One request's part of one step: its tokens, what it loaded (per tier) and stored."""

    tokens: int
    loaded: tuple[int, ...]
    stored: int


@dataclass(frozen=True, slots=True)
class Admitted:
    """A request at its first admission: blocks other running requests held (taken from the cache's room), and for
    each prefix block past its GPU hit, the seq of the request whose allocation evicted it last (``NOT_CACHED``)."""

    pinned_blocks: int
    past_hit: tuple[int, ...]


class SharingEngine(SteppedEngine):
    """The stepped engine, keeping each step's share per request and each request's view at its first admission.

    It decides exactly as ``SteppedEngine`` (it only reads what a step did);
    the GPU pool logs who evicted each block (``GpuBlockPool.eviction_log``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shares: list[dict[int, Share]] = []
        self.admitted_at: dict[int, Admitted] = {}
        self.gpu.eviction_log = {}

    def _allocate(self, f: Flight, new: int, hit_blocks: Sequence[int] = (), external: int = 0) -> bool:
        self.gpu.eviction_seq = f.seq  # whatever this allocation evicts, this request evicted
        if f.status.is_waiting and f.first is None:
            log = self.gpu.eviction_log
            assert isinstance(log, dict)
            keys = f.req.block_keys[len(hit_blocks) : (f.num_tokens - 1) // self.block]
            pinned = len(self.refs) - sum(1 for b in hit_blocks if b in self.refs)  # before it holds any
            self.admitted_at[f.seq] = Admitted(pinned, tuple(log.get(k, NOT_CACHED) for k in keys))
        return super()._allocate(f, new, hit_blocks, external)

    def _run(
        self, scheduled: dict[Flight, int], admitted: list[Admission], preempted: list[Flight], loaded: list[int],
        stores: StepStores | None = None,
    ) -> _Ran:
        new_here = {a.seq for a in admitted}
        written = {f: f.written for f in scheduled}
        ran = super()._run(scheduled, admitted, preempted, loaded, stores)
        none = (0,) * len(self.engine.offload)
        self.shares.append({
            f.seq: Share(
                n, tuple(f.ext.tokens) if f.seq in new_here and f.ext is not None else none, f.written - written[f]
            )
            for f, n in scheduled.items()
        })
        return ran


def ttft_parts(engine: SharingEngine, run: SteppedRun) -> list[dict[str, Any]]:
    """Per request (by seq): its TTFT split into ``PARTS``, and the other requests' tokens computed in its steps."""
    costs, specs = engine.costs.tokens, engine.engine.offload_specs
    fixed = costs.overhead_ms
    rows = []
    for f in run.flights:
        parts = dict.fromkeys(PARTS, 0.0)
        parts["waiting_ms"] = run.queue_ms[f.seq]
        others_tokens = 0
        for index in range(f.first_step, f.first_token_step):
            step, shares = run.steps[index], engine.shares[index]
            own = shares.get(f.seq)
            if own is None:
                parts["waiting_ms"] += step.dt_ms
                continue
            load = cost_ms(costs, specs, 0, list(own.loaded), 0) - fixed if any(own.loaded) else 0.0
            store = costs.store_ms_per_token * own.stored
            prefill = fixed + costs.prefill_ms_per_token * own.tokens
            parts["prefill_ms"] += prefill
            parts["load_ms"] += load
            parts["store_ms"] += store
            parts["others_ms"] += step.dt_ms - prefill - load - store
            others_tokens += step.scheduled_tokens - own.tokens
        seen = engine.admitted_at[f.seq]
        rows.append({
            "seq": f.seq, "ttft_ms": round(f.ttft_ms, DECIMALS), **{k: round(v, DECIMALS) for k, v in parts.items()},
            "others_tokens": others_tokens, "pinned_blocks": seen.pinned_blocks,
        })
    return rows
