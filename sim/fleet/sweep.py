"""A sweep of fleets: every combination of replica counts, routers and per-replica tier sizes, one row each.

A configuration is one fleet run (``fleet_runs`` under one router) of the
workload with its tiers resized; a row keeps the fleet's summary figures, not
its requests, so that many configurations can be run side by side and sent
back cheaply. ``run_row`` is what a worker process (or a Ray worker) runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

from sim.bounds.budget import SUMMARY_JSON_BYTES, Cost
from sim.costs.model import CostModel
from sim.fleet.settings import FleetSettings
from sim.fleet.simulate import check_fleet, replay_fleet, scenario_fleet_cost, simulate_fleet, trace_fleet_cost
from sim.sched.arrivals import Arrivals
from sim.sched.serving import Serving
from sim.simulation.replay import ReplayTiers
from sim.traces.reader import Trace
from sim.workloads.scenario import Scenario

MAX_CONFIGURATIONS = 2_000
# The summary figures a row keeps, in the table's order.
FIGURES = ("hit_ratio", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "load_imbalance", "lost_tokens", "pooled_hit_ratio",
           "unbounded_hit_ratio")


@dataclass(frozen=True, slots=True, order=True)
class Configuration:
    """One fleet: its replicas, its router, each replica's GPU and CPU tokens (None: the workload's own; CPU 0: none)."""

    replicas: int
    router: str
    gpu_tokens: int | None = None
    cpu_tokens: int | None = None


def configurations(
    replicas: Sequence[int], routers: Sequence[str], gpu_tokens: Sequence[int | None] = (None,),
    cpu_tokens: Sequence[int | None] = (None,),
) -> list[Configuration]:
    """Every combination, replicas outermost (the table's order); ValueError past ``MAX_CONFIGURATIONS``."""
    count = len(replicas) * len(routers) * len(gpu_tokens) * len(cpu_tokens)
    if count > MAX_CONFIGURATIONS:
        raise ValueError(f"the sweep holds {count:,} configurations; the limit is {MAX_CONFIGURATIONS:,}")
    return [Configuration(n, r, g, c) for n, g, c, r in product(replicas, gpu_tokens, cpu_tokens, routers)]


@dataclass(frozen=True)
class ScenarioFleet:
    """A scenario's requests through each configuration, arriving as ``serving`` says."""

    scenario: Scenario
    serving: Serving
    shared_tier: str | None = None

    def at(self, c: Configuration) -> tuple[Scenario, FleetSettings]:
        changes: dict[str, Any] = {}
        if c.gpu_tokens is not None:
            changes["gpu_tokens"] = c.gpu_tokens
        if c.cpu_tokens is not None:
            changes.update(cpu_gb=None, cpu_tokens=c.cpu_tokens or None)
        # Validated again: a size the scenario refuses (a GPU too small for one request) is named by its field.
        scenario = Scenario.model_validate({**self.scenario.model_dump(), **changes}) if changes else self.scenario
        settings = FleetSettings(replicas=c.replicas, routers=(c.router,), shared_tier=self.shared_tier)
        check_fleet(scenario, settings)
        return scenario, settings

    def sizes(self, c: Configuration) -> tuple[int, int | None]:
        """Each replica's GPU tokens (as vLLM logs them) and CPU tier tokens (None: none), as run."""
        scenario = self.at(c)[0]
        return scenario.gpu_tokens, scenario.cpu_capacity_tokens

    def cost(self, c: Configuration) -> Cost:
        scenario, settings = self.at(c)
        return scenario_fleet_cost(scenario, self.serving, settings)

    def run(self, c: Configuration) -> dict[str, Any]:
        scenario, settings = self.at(c)
        return simulate_fleet(scenario, self.serving, settings)[0]


@dataclass(frozen=True)
class TraceFleet:
    """A trace's requests through each configuration (sizes in tokens, on the trace's blocks), at ``arrivals``."""

    trace: Trace
    tiers: ReplayTiers
    costs: CostModel | None
    serving: Serving
    arrivals: Arrivals | None = None
    shared_tier: str | None = None

    def at(self, c: Configuration) -> tuple[ReplayTiers, FleetSettings]:
        block = self.trace.block_tokens
        tiers = self.tiers
        if c.gpu_tokens is not None:
            tiers = replace(tiers, gpu_blocks=c.gpu_tokens // block - 1)  # as vLLM logs it, its null block in
        if c.cpu_tokens is not None:
            tiers = replace(tiers, cpu_blocks=max(1, c.cpu_tokens // block) if c.cpu_tokens else None)
        return tiers, FleetSettings(replicas=c.replicas, routers=(c.router,), shared_tier=self.shared_tier)

    def sizes(self, c: Configuration) -> tuple[int, int | None]:
        tiers, block = self.at(c)[0], self.trace.block_tokens
        return (tiers.gpu_blocks + 1) * block, tiers.cpu_blocks * block if tiers.cpu_blocks else None

    def cost(self, c: Configuration) -> Cost:
        return trace_fleet_cost(self.trace, self.serving, self.at(c)[1])

    def run(self, c: Configuration) -> dict[str, Any]:
        tiers, settings = self.at(c)
        return replay_fleet(self.trace, tiers, self.costs, self.serving, settings, self.arrivals)[0]


FleetWorkload = ScenarioFleet | TraceFleet


def run_row(job: tuple[FleetWorkload, Configuration]) -> dict[str, Any]:
    """One configuration's row (what a worker runs): its sizes as run and its router's summary figures."""
    workload, c = job
    result = workload.run(c)
    gpu, cpu = workload.sizes(c)
    summary = result["routers"][0]["summary"]
    return {
        "replicas": c.replicas, "router": c.router, "gpu_tokens": gpu, "cpu_tokens": cpu, "run": result["fleet"]["run"],
        **{k: summary[k] for k in FIGURES},
    }


def sweep_cost(workload: FleetWorkload, configs: Sequence[Configuration]) -> Cost:
    """Every configuration's fleet run, one after another (side by side they cost no less work); each answers a
    row, not its requests."""
    total = Cost(0, 0, 0)
    for c in configs:
        one = workload.cost(c)
        total = total + Cost(one.work_steps, one.memory_bytes, SUMMARY_JSON_BYTES)
    return total
