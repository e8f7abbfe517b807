"""The fleet's clock: one replica behind any router is the single-server stepped engine, record for record (vLLM's
native offloading and asynchronous scheduling too); any fleet serves every request once, within its tiers, never above
a cache that never evicts."""

from __future__ import annotations

from dataclasses import asdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.fleet.clock import Fleet
from sim.fleet.replicas import replica_engines, stepped_replicas
from sim.fleet.report import bounds, hit_tokens, ratio
from sim.fleet.routers import ROUTER_NAMES, router
from sim.sched.arrivals import Arrivals, OpenLoop, Timed
from sim.sched.config import SchedulerConfig
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.tiers.offload import OffloadTier
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario
from tests.sim.sched.test_sched_native import native_under_load
from tests.sim.sched.test_sched_properties import cases as stepped_cases


def cases() -> st.SearchStrategy:
    """The stepped engine's cases, synchronous or scheduled ahead (``async_scheduling``), and vLLM's native offloading
    under load: a CPU tier of 16 to 200 tokens, most smaller than what the passes read, so stores meet blocks still
    being written and loads overlap; requests in flight together or apart (an open loop leaves the engine idle with
    its connector's transfers still to do)."""
    return st.one_of(stepped_cases(), native_under_load())

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _timed(arrivals: Arrivals, n: int) -> Arrivals:
    """The open loop's own times as timestamps, so that a third kind of arrival is drawn too."""
    return Timed(tuple(arrivals.times_ms(n))) if isinstance(arrivals, OpenLoop) else arrivals


@SETTINGS
@given(cases(), st.sampled_from(ROUTER_NAMES), st.booleans())
def test_one_replica_behind_any_router_gives_the_single_server_records(
    case: tuple[Scenario, SchedulerConfig, Arrivals], name: str, as_timestamps: bool,
) -> None:
    # One replica leaves every router one choice, so the fleet's clock must take the very steps the single
    # server's loop takes: arrivals queued up to the step's start, then the step; records, times and step ledger equal.
    scenario, config, arrivals = case
    requests = build_requests(scenario)
    if as_timestamps:
        arrivals = _timed(arrivals, len(requests))
    for run in scenario.run_names:
        alone = SteppedEngine(Engine(run, tier_spec(scenario, run), default_costs()), config).run(requests, arrivals)
        replicas = stepped_replicas(replica_engines(run, tier_spec(scenario, run), 1, default_costs()), config)
        fleet = Fleet(replicas, router(name)).run(requests, arrivals)
        assert [r.to_dict() for r in fleet.records] == [r.to_dict() for r in alone.records]
        assert [f.timing(fleet.queue_ms[f.seq]) for f in fleet.flights] == [
            f.timing(alone.queue_ms[f.seq]) for f in alone.flights
        ]
        assert [asdict(s) for s in fleet.steps[0]] == [asdict(s) for s in alone.steps]
        assert {r.replica for r in fleet.routes} == {0}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.sampled_from(ROUTER_NAMES), st.integers(2, 4), st.booleans())
def test_every_fleet_serves_every_request_once_and_no_router_beats_a_cache_that_never_evicts(
    case: tuple[Scenario, SchedulerConfig, Arrivals], name: str, replicas: int, shared: bool,
) -> None:
    scenario, config, arrivals = case
    requests = build_requests(scenario)
    run = scenario.run_names[-1]
    spec = tier_spec(scenario, run)
    # A shared tier needs a CPU tier in front that stores through to it (not vLLM's native one, sim.fleet.replicas).
    behind = shared and spec.cpu_tokens and spec.cpu_backend != "vllm-native"
    tier = OffloadTier("remote", "disk", 4 * scenario.chunk_size, "lru", 0.001) if behind else None
    engines = replica_engines(run, spec, replicas, default_costs(), tier)
    out = Fleet(stepped_replicas(engines, config), router(name)).run(requests, arrivals)
    # Every request finished once, on the replica it was routed to, and arrived no earlier than the one before it.
    assert [r.seq for r in out.records] == [r.seq for r in requests]
    assert all(0 <= r.replica < replicas for r in out.routes)
    assert all(a.arrival_ms <= b.arrival_ms for a, b in zip(out.routes, out.routes[1:]))
    for replica in out.steps:
        for a, b in zip(replica, replica[1:]):
            assert a.t_ms + a.dt_ms <= b.t_ms + 1e-9  # a replica's steps do not overlap
    # No router hits more than a cache that never evicts; every tier within its capacity, the shared one too.
    limits = bounds(requests, spec, replicas, tier, default_costs())
    assert ratio(hit_tokens(out.records), sum(r.prompt_tokens for r in requests)) <= limits["unbounded"]
    for engine in engines:
        assert engine.gpu.cached_blocks <= engine.gpu.capacity_blocks
        for store in engine.offload:
            assert store.used_tokens <= store.capacity_tokens
        # Every replica let all its GPU blocks go and, under native offloading, unpinned every CPU block it loaded.
        assert len(engine.gpu.free_queue) == engine.gpu.capacity_blocks
        assert engine.native_cpu is None or not engine.native_cpu.pinned
    if tier is not None:
        assert len({id(e.offload[-1]) for e in engines}) == 1  # one store behind them all
