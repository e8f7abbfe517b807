"""Fleets under vLLM's native offloading and asynchronous scheduling: each replica runs as the single-server engine does.

Block size 16, one GPU block per offload block (vLLM's default). Each document of 128 tokens is read with a fresh
16-token question: 144-token prompts, 9 full blocks (8 of the document, 1 of its question), one output token. A step
that computes costs 1 ms; a token loaded from CPU 1/64 ms; a step that only loads runs no forward pass (no fixed cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import pytest

from sim.costs.model import CostModel, default_costs
from sim.engine.loop import Engine
from sim.fleet.clock import Fleet, FleetRun
from sim.fleet.replicas import replica_engines, stepped_replicas
from sim.fleet.routers import ROUTER_NAMES, router
from sim.fleet.routers.base import ReplicaState, RoutedRequest
from sim.fleet.routers.round_robin import RoundRobin
from sim.sched.arrivals import Arrivals, OpenLoop, Timed
from sim.sched.config import SchedulerConfig
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario

BLOCK = 16
COSTS = StepCosts(
    CostModel(
        overhead_ms=1, prefill_ms_per_token=0, load_cpu_ms_per_token=1 / 64, load_disk_ms_per_token=0,
        store_ms_per_token=0, source="test",
    )
)


def native(docs: int, passes: int, gpu_blocks: int, cpu_blocks: int) -> Scenario:
    return Scenario(
        docs=docs, doc_tokens=128, question_tokens=16, gpu_tokens=gpu_blocks * BLOCK, cpu_tokens=cpu_blocks * BLOCK,
        cpu_backend="vllm-native", passes=[PassSpec()] * passes,
    )


def fleet(s: Scenario, replicas: int, arrivals: Arrivals, name: str = "round-robin",
          config: SchedulerConfig | None = None) -> FleetRun:
    engines = replica_engines("gpu+cpu", tier_spec(s, "gpu+cpu"), replicas, default_costs())
    return Fleet(stepped_replicas(engines, config, COSTS), router(name)).run(build_requests(s), arrivals)


def test_a_re_read_on_the_replica_that_stored_it_waits_for_its_asynchronous_load() -> None:
    # Four documents read twice in order, one every 10 ms, round-robin over 2 replicas: replica 0 serves d0, d2, d0,
    # d2 (requests 0, 2, 4, 6), replica 1 d1, d3, d1, d3. Each GPU has 10 blocks, 9 usable: one prompt. The CPU
    # tier holds 64 blocks, more than the 40 the run stores (9 per first read, the new question block per re-read).
    s = native(docs=4, passes=2, gpu_blocks=10, cpu_blocks=64)
    run = fleet(s, 2, Timed(tuple(10.0 * i for i in range(8))))
    assert [r.replica for r in run.routes] == [0, 1] * 4
    # Pass 1: every document is new everywhere: 144 computed in one 1 ms step. Its 9 blocks are offered in that
    # schedule and copied in the replica's next step; the replica is idle from 1 ms to its next arrival, and first
    # completes those stores (has_pending_push_work), so they are ready when the next read looks them up.
    # Pass 2, request 4 (d0 on replica 0): the 9 usable blocks all went to d2 (request 2), so the GPU misses; the
    # CPU holds d0's 8 document blocks (its question is fresh): 128 tokens loaded asynchronously. It is allocated 8
    # blocks and waits in WAITING_FOR_REMOTE_KVS through a step that computes nothing and lasts its load,
    # 128 / 64 = 2 ms (40 to 42 ms); the next step (42 to 43 ms) computes its 16 question tokens. TTFT 3 ms.
    # Request 6 (d2) likewise: request 4's 9 blocks evicted d2 from the GPU, and d2's blocks are in the CPU.
    rows = [(r.gpu_hit_tokens, r.cpu_hit_tokens, r.computed_tokens, r.ttft_ms) for r in run.records]
    assert rows == [(0, 0, 144, 1.0)] * 4 + [(0, 128, 16, 3.0)] * 4
    # Replica 0's ledger: a step per first read, then per re-read a load step (nothing scheduled) and its compute.
    ledger = [(o.t_ms, o.dt_ms, o.scheduled, o.loaded) for o in run.steps[0]]
    assert ledger == [
        (0.0, 1.0, {0: 144}, {}), (20.0, 1.0, {2: 144}, {}),
        (40.0, 2.0, {}, {"cpu": 128}), (42.0, 1.0, {4: 16}, {}),
        (60.0, 2.0, {}, {"cpu": 128}), (62.0, 1.0, {6: 16}, {}),
    ]
    # The load started in the step the request arrived in: no queueing, the 2 ms are its load.
    assert [run.queue_ms[seq] for seq in (4, 6)] == [0.0, 0.0]


class Watching(RoundRobin):
    """Round-robin, keeping what it saw of each replica when each request came."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[int, list[ReplicaState]] = {}

    def route(self, request: RoutedRequest, replicas: Sequence[ReplicaState], now_ms: float) -> int:
        self.seen[request.seq] = list(replicas)
        return super().route(request, replicas, now_ms)


def test_a_router_sees_a_loading_request_as_waiting_and_its_blocks_in_use() -> None:
    # The re-read case above, request 5 arriving at 41 ms, during replica 0's load step (40 to 42 ms) for request 4.
    # Request 4 holds the 8 blocks it loads into (of 9 usable) and waits in WAITING_FOR_REMOTE_KVS, which vLLM counts
    # among the waiting requests (get_request_counts, scheduler.py 2920-2922) and whose blocks are in use
    # (BlockPool.get_usage, block_pool.py 921-932). Replica 1 has been idle since request 3 ended at 31 ms.
    s = native(docs=4, passes=2, gpu_blocks=10, cpu_blocks=64)
    watching = Watching()
    engines = replica_engines("gpu+cpu", tier_spec(s, "gpu+cpu"), 2, default_costs())
    times = (0.0, 10.0, 20.0, 30.0, 40.0, 41.0, 60.0, 70.0)
    Fleet(stepped_replicas(engines, None, COSTS), watching).run(build_requests(s), Timed(times))
    zero, one = watching.seen[5]
    assert (zero.waiting, zero.running, zero.active_blocks, zero.kv_usage) == (1, 0, 8, 8 / 9)
    assert (one.waiting, one.running, one.active_blocks, one.kv_usage) == (0, 0, 0, 0.0)


@pytest.mark.parametrize(("second_ms", "stored", "refused"), [(20.0, 144, 0), (1.0, 0, 1)])
def test_an_idle_replica_completes_its_stores_before_an_arrival_after_its_last_step(
    second_ms: float, stored: int, refused: int,
) -> None:
    # Four documents, read once, round-robin over 2 replicas: requests 0 and 1 at 0 ms, requests 2 and 3 at
    # ``second_ms``; replica 0 serves d0 then d2, replica 1 d1 then d3. Each CPU tier holds 9 blocks: one prompt.
    # The first request's step runs 0 to 1 ms and offers its 9 blocks, inserted not ready: the worker copies them
    # in the replica's next step (offloading_connector.py 134-138).
    # - Second request at 20 ms: the replica is idle from 1 ms with its connector busy; like the single-server loop
    #   it steps until the copy is done before the arrival. The second request's 9 blocks must evict all 9 of the
    #   first's, ready now: stored, 144 tokens.
    # - At 1 ms, the end of that step: the arrival is queued before any idle turn (the single server queues
    #   arrivals up to now_ms first), so the second request's offer meets 9 blocks still being written: none can be
    #   evicted (cpu/manager.py 321-336), the store is refused, and with no schedule after its finish it is never
    #   offered again: nothing stored.
    s = native(docs=4, passes=1, gpu_blocks=20, cpu_blocks=9)
    run = fleet(s, 2, Timed((0.0, 0.0, second_ms, second_ms)))
    assert [r.replica for r in run.routes] == [0, 1, 0, 1]
    assert [r.stored_tokens for r in run.records] == [144, 144, stored, stored]
    assert [f.store_refused for f in run.flights] == [0, 0, refused, refused]


# Four documents read twice, each 9-block prompt on a GPU of 19 usable blocks and a CPU tier of 12, fewer than two
# prompts: stores are refused while the blocks they would evict are written, and re-reads load; an open loop
# at 2,000 requests/s (0.5 ms apart on average, steps of 1 ms) overlaps some requests and leaves the engine idle
# between others, with transfers still to do.
SMALL_CPU = native(docs=4, passes=2, gpu_blocks=20, cpu_blocks=12)


@pytest.mark.parametrize("ahead", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ROUTER_NAMES)
def test_one_native_replica_behind_any_router_is_the_single_server(name: str, ahead: bool) -> None:
    # One replica leaves the router no choice: the fleet's clock must take the single server's turns, its idle
    # drains included, so records, times and the step ledger are the single server's.
    config = SchedulerConfig(async_scheduling=ahead)
    requests = build_requests(SMALL_CPU)
    arrivals = OpenLoop(2000, seed=3)
    alone = SteppedEngine(Engine("gpu+cpu", tier_spec(SMALL_CPU, "gpu+cpu"), default_costs()), config, COSTS)
    single = alone.run(requests, arrivals)
    run = fleet(SMALL_CPU, 1, arrivals, name, config)
    assert [r.to_dict() for r in run.records] == [r.to_dict() for r in single.records]
    assert [f.timing(run.queue_ms[f.seq]) for f in run.flights] == [f.timing(single.queue_ms[f.seq]) for f in single.flights]
    assert [asdict(o) for o in run.steps[0]] == [asdict(o) for o in single.steps]
    # The workload reaches the rules at stake: a refused store, a load step, a gap the engine idles through.
    assert any(o.refused for o in single.steps) and any(o.loaded and not o.scheduled for o in single.steps)
    assert any(b.t_ms > a.t_ms + a.dt_ms for a, b in zip(single.steps, single.steps[1:]))


@pytest.mark.parametrize(("ahead", "running"), [(False, 0), (True, 1)], ids=["sync", "async"])
def test_scheduled_ahead_a_replica_shows_its_last_request_running_until_its_step_ends(ahead: bool, running: int) -> None:
    # Two 40-token documents, one output token each, every step 1 ms, round-robin over 2 replicas: request 0 at 0 ms
    # on replica 0, request 1 at 0.5 ms, while replica 0's only step (0 to 1 ms) runs.
    # - Synchronously the turn at 0 ms schedules, runs and processes that step: request 0 has its token and is gone
    #   from replica 0 when request 1 is routed (a step earlier than vLLM's stats would say).
    # - Scheduled ahead (step_with_batch_queue) the turn at 0 ms schedules and runs the step and processes nothing
    #   yet; its output is processed at the next turn, at 1 ms (which schedules nothing: request 0 needs no token
    #   more): at 0.5 ms request 0 is still running on replica 0, as vLLM's scheduler holds it then.
    s = Scenario(docs=2, doc_tokens=40, question_tokens=0, gpu_tokens=64 * BLOCK, cpu_gb=None, passes=[PassSpec()])
    watching = Watching()
    engines = replica_engines("gpu", tier_spec(s, "gpu"), 2, default_costs())
    replicas = stepped_replicas(engines, SchedulerConfig(async_scheduling=ahead), StepCosts.clock())
    run = Fleet(replicas, watching).run(build_requests(s), Timed((0.0, 0.5)))
    assert watching.seen[1][0].running == running
    # Either way request 0's one step is its TTFT, 1 ms, and each replica's ledger holds that one step.
    assert [r.ttft_ms for r in run.records] == [1.0, 1.0]
    assert [[(o.t_ms, o.scheduled) for o in steps] for steps in run.steps] == [[(0.0, {0: 40})], [(0.5, {1: 40})]]
