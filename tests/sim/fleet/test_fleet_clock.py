"""The fleet's clock: one replica behind any router is the single-server stepped engine, record for record."""

from __future__ import annotations

from dataclasses import asdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.fleet.clock import Fleet
from sim.fleet.replicas import replica_engines, stepped_replicas
from sim.fleet.routers import ROUTER_NAMES, router
from sim.sched.arrivals import Arrivals, OpenLoop, Timed
from sim.sched.config import SchedulerConfig
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario
from tests.sim.sched.test_sched_properties import cases

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
