"""A fleet simulated under each router: a scenario's or a trace's requests, a fresh fleet per router, one result.

The replicas run the scenario's fullest tier stack (``gpu+cpu``, with a disk
and storage tiers when given; ``gpu`` with no CPU tier), plus the shared tier.
Each request's record is ``simulate --json``'s, with the stepped engine's
times and its route (``replica``, ``best_replica``, ``lost_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from sim.blocks.request import Request
from sim.bounds.budget import Cost
from sim.costs.model import CostModel, default_costs
from sim.engine.loop import TierSpec
from sim.fleet.clock import Fleet
from sim.fleet.holdings import Holdings, holdings_cost
from sim.fleet.replicas import FleetError, check_shared, check_stepping, replica_engines, stepped_replicas
from sim.fleet.report import bounds, fleet_summary, replica_rows, route_fields
from sim.fleet.routers import router
from sim.fleet.settings import FleetSettings
from sim.sched.arrivals import Arrivals, Timed
from sim.sched.output import StepOutput
from sim.sched.replay import served_trace_cost
from sim.sched.serving import Serving
from sim.sched.simulate import stepped_cost
from sim.simulation.replay import ReplayTiers, check_tiers, trace_requests
from sim.simulation.run import scenario_summary, tier_spec
from sim.tiers.offload import OffloadTier
from sim.traces.reader import Trace
from sim.workloads.estimate import simulation_cost
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario


def fleet_runs(
    requests: Sequence[Request], run: str, spec: TierSpec, settings: FleetSettings, shared: OffloadTier | None,
    serving: Serving, arrivals: Arrivals, costs: CostModel, holdings: bool = False,
) -> tuple[dict[str, Any], dict[str, list[StepOutput]]]:
    """The fleet's settings and bounds, and one entry per router: its summary, its replicas, its requests (and with
    ``holdings``, what each replica's tiers held at each arrival, ``sim.fleet.holdings``); and each replica's step
    ledger, named ``ROUTER/REPLICA``."""
    n = settings.replicas
    config = serving.scheduler_config()
    limits = bounds(requests, spec, n, shared, costs)
    block = spec.units.block
    entries = []
    ledgers: dict[str, list[StepOutput]] = {}
    tiers: list[dict[str, Any]] = []
    for name in settings.routers:
        engines = replica_engines(run, spec, n, costs, shared)
        tiers = [asdict(t) for t in engines[0].tier_infos()]
        stepped = stepped_replicas(engines, config)
        watch = Holdings(stepped, shared.name if shared is not None else None) if holdings else None
        fleet = Fleet(stepped, router(name)).run(requests, arrivals, watch)
        rows = []
        for record, flight, route in zip(fleet.records, fleet.flights, fleet.routes):
            row = record.to_dict()
            row.update((k, v) for k, v in flight.timing(fleet.queue_ms[flight.seq]).items() if k not in row)
            row.update(route_fields(route, flight.req.max_hit_blocks, block))
            rows.append(row)
        per_replica = replica_rows(fleet, engines[0].gpu.capacity_blocks)
        summary = fleet_summary(fleet, per_replica, limits)
        summary["lost_tokens"] = sum(r["lost_tokens"] for r in rows)
        entries.append({"router": name, "summary": summary, "replicas": per_replica, "requests": rows})
        if watch is not None:
            entries[-1]["holdings"] = watch.frames
        ledgers.update((f"{name}/{i}", steps) for i, steps in enumerate(fleet.steps))
    fleet_info = {
        "replicas": n, "run": engines[0].run, "tiers": tiers,
        "shared_tier": settings.shared_tier.text if settings.shared_tier is not None else None,
        "routers": list(settings.routers), "bounds": limits,
    }
    return {"fleet": fleet_info, "routers": entries}, ledgers


def _apart(shared: OffloadTier | None, names: Sequence[str]) -> None:
    if shared is not None and shared.name in names:
        raise FleetError("shared_tier", f"tier {shared.name}: a replica's own tier has that name; give it another")


def fleet_cost(per_router: Cost, settings: FleetSettings, pooled: Cost) -> Cost:
    """Each router's fleet run one after another, and the pooled bound's sequential run; every router's records and
    step ledgers are held until the last one ends, so memory grows with the routers too."""
    k = len(settings.routers)
    return Cost(per_router.work_steps * k, per_router.memory_bytes * k, per_router.response_bytes * k) + pooled


def scenario_fleet_cost(scenario: Scenario, serving: Serving, settings: FleetSettings, holdings: bool = False) -> Cost:
    """``holdings``: with each replica's frames (``sim.fleet.holdings.holdings_cost``)."""
    per_router = stepped_cost(scenario, serving)
    runs = len(scenario.run_names)  # stepped_cost counts every run; a fleet runs one stack
    one = Cost(per_router.work_steps // runs, per_router.memory_bytes, per_router.response_bytes // runs)
    if holdings:
        tiers = len(scenario.run_names[-1].split("+")) + (settings.shared_tier is not None)
        in_flight = None if serving.rate is not None else serving.concurrency or 1
        frames = holdings_cost(scenario.total_requests, settings.replicas, tiers, scenario.docs, scenario.request_blocks,
                               scenario.gpu_tokens // scenario.block_size, in_flight)
        one = Cost(one.work_steps + frames.work_steps, one.memory_bytes + frames.memory_bytes,
                   one.response_bytes + frames.response_bytes)
    return fleet_cost(one, settings, simulation_cost(scenario, explain=False))


def check_fleet(scenario: Scenario, settings: FleetSettings, serving: Serving | None = None) -> OffloadTier | None:
    """The scenario's shared tier, or FleetError naming the field when the fleet cannot have it (or, with ``serving``,
    cannot step under it)."""
    shared = settings.shared(scenario.bytes_per_token)
    check_shared(shared, scenario.cpu_capacity_tokens, scenario.cpu_backend)
    _apart(shared, scenario.behind_cpu)
    if serving is not None:
        check_stepping(tier_spec(scenario, scenario.run_names[-1]).gpu_policy)
    return shared


def simulate_fleet(
    scenario: Scenario, serving: Serving, settings: FleetSettings, holdings: bool = False,
) -> tuple[dict[str, Any], dict[str, list[StepOutput]]]:
    """The scenario's requests through the fleet under each router; its arrivals as ``serving`` says."""
    run = scenario.run_names[-1]
    shared = check_fleet(scenario, settings, serving)
    costs = scenario.costs or default_costs()
    result, ledgers = fleet_runs(
        build_requests(scenario), run, tier_spec(scenario, run), settings, shared, serving, serving.arrivals(), costs,
        holdings,
    )
    summary = scenario_summary(scenario)
    summary["serving"] = serving.summary()
    return {"scenario": summary, **result}, ledgers


def fleet_result(scenario: Scenario, serving: Serving, settings: FleetSettings, holdings: bool = False) -> dict[str, Any]:
    """The JSON result alone (what a worker process sends back); ``holdings``: with each router's frames."""
    return simulate_fleet(scenario, serving, settings, holdings)[0]


def trace_fleet_cost(trace: Trace, serving: Serving, settings: FleetSettings) -> Cost:
    one = served_trace_cost(trace, serving)
    return fleet_cost(one, settings, one)


def replay_fleet(
    trace: Trace, tiers: ReplayTiers, costs: CostModel | None, serving: Serving, settings: FleetSettings,
    arrivals: Arrivals | None = None,
) -> tuple[dict[str, Any], dict[str, list[StepOutput]]]:
    """The trace's requests (each with its ``output_length``) through the fleet; ``arrivals`` None: as ``serving``."""
    check_tiers(trace, tiers)
    outputs = trace.output_tokens
    requests = [replace(r, output_tokens=max(1, outputs[r.seq])) for r in trace_requests(trace, tiers.chunk_blocks)]
    shared = settings.shared(None)
    _apart(shared, [t.name for t in tiers.storage])
    result, ledgers = fleet_runs(
        requests, tiers.run, tiers.spec(trace.block_tokens), settings, shared, serving, arrivals or serving.arrivals(),
        costs or default_costs(),
    )
    settings_ = serving.summary()
    if isinstance(arrivals, Timed):
        settings_ = {"arrivals": "timestamps", **{k: v for k, v in settings_.items() if k != "concurrency"}}
    return {"trace": trace.summary(), "serving": settings_, **result}, ledgers
