"""Simulate a scenario: build its workload and one engine per run, and return records or stream events."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from sim.blocks.request import Request
from sim.costs.model import default_costs
from sim.engine.events import Event
from sim.engine.loop import Engine, RequestRecord, TierSpec
from sim.engine.native_spec import NativeTierSpec
from sim.engine.result import comparison, pass_summaries, run_totals
from sim.explain.capacity import fill_needs
from sim.explain.observer import attach, key_slots
from sim.explain.stream import explained
from sim.explain.summary import add_totals, needs, totals
from sim.tiers.offload import OffloadTier
from sim.workloads.requests import build_requests, units
from sim.workloads.scenario import Scenario


def tier_spec(scenario: Scenario, run: str) -> TierSpec:
    """The tiers of one run of the scenario (``gpu``, ``gpu+cpu`` or ``gpu+cpu+disk``, the last with every tier)."""
    doc_mode = scenario.granularity == "doc"
    behind = len(run.split("+")) > 2
    more = tuple(
        OffloadTier(
            t.name, "disk", t.capacity_tokens(scenario.bytes_per_token), t.policy, t.load_ms_per_token, t.unit_tokens,
            t.admission,
        )
        for t in scenario.storage_tiers
    )
    spec = NativeTierSpec if scenario.cpu_backend == "vllm-native" else TierSpec
    native = (
        {"store_threshold": scenario.store_threshold, "offload_prompt_only": scenario.offload_prompt_only}
        if spec is NativeTierSpec else {}
    )
    return spec(
        **native,
        units=units(scenario),
        gpu_tokens=scenario.gpu_tokens,
        cpu_tokens=scenario.cpu_capacity_tokens if "cpu" in run else None,
        disk_tokens=scenario.disk_capacity_tokens if behind else None,
        more_tiers=more if behind else (),
        free_order=scenario.free_order,
        gpu_policy=scenario.gpu_policy,
        cpu_policy=scenario.cpu_policy,
        cpu_backend=scenario.cpu_backend,
        reserve_null_block=not doc_mode,
    )


def engines(scenario: Scenario, explain: bool = False, requests: list[Request] | None = None) -> list[Engine]:
    """One engine per run; ``explain`` attaches an attributor (sim.explain) to each, its history kept in a list
    indexed by key when ``requests`` (the workload every engine will serve) have dense keys (``key_slots``)."""
    costs = scenario.costs or default_costs()
    out = [Engine(name, tier_spec(scenario, name), costs) for name in scenario.run_names]
    if explain:
        slots = key_slots(requests) if requests is not None else None
        for engine in out:
            attach(engine, slots=slots)
    return out


def simulate(scenario: Scenario, explain: bool = True, capacities: bool = False) -> dict[str, Any]:
    """The whole result as ``kvscope simulate --json`` prints it.

    ``explain`` adds each miss's cause (sim.explain); ``capacities`` also
    finds, by re-simulation, the capacities at which evicted tokens would have hit.
    """
    requests = build_requests(scenario)
    runs = []
    for engine in engines(scenario, explain, requests):
        records = engine.run_all(requests)
        searched: dict[str, Any] = {}
        if explain and capacities:
            searched["capacity_search"] = fill_needs(engine.spec, requests, records, engine.costs)
            searched["needs"] = needs(records)
        runs.append(run_entry(engine, records, searched))
    return {"scenario": scenario_summary(scenario), "runs": runs, "comparison": comparison(runs)}


def run_entry(engine: Engine, records: list[RequestRecord], more: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run of the JSON result: its name and tiers, ``more``, then its requests, pass summaries and totals."""
    run: dict[str, Any] = {"name": engine.run, "tiers": [asdict(t) for t in engine.tier_infos()], **(more or {})}
    run.update(
        requests=[r.to_dict() for r in records],
        passes=add_totals(pass_summaries(records), records),
        totals={**run_totals(records), **totals(records)},
    )
    return run


def stream(scenario: Scenario, explain: bool = True) -> Iterator[Event]:
    """Every run's events, interleaved request by request so that runs advance side by side."""
    requests = build_requests(scenario)
    streams = [
        explained(e, e.events(requests, scenario.docs, scenario.doc_tokens)) for e in engines(scenario, explain, requests)
    ]
    pending = list(streams)
    buffers: list[list[Event]] = [[] for _ in streams]
    # Advance each run to the end of its next request (its ttft event), then the next run.
    while pending:
        for i, it in enumerate(streams):
            if it not in pending:
                continue
            for event in it:
                buffers[i].append(event)
                if event.kind == "ttft":
                    break
            else:
                pending.remove(it)
            yield from buffers[i]
            buffers[i].clear()


def scenario_summary(scenario: Scenario) -> dict[str, Any]:
    data = scenario.model_dump(mode="json")
    data["costs"] = (scenario.costs or default_costs()).model_dump(mode="json")
    data["passes"] = ",".join(p.text for p in scenario.passes)
    data.update(
        prompt_tokens=scenario.prompt_tokens,
        kv_bytes_per_token=scenario.bytes_per_token,
        cpu_capacity_tokens=scenario.cpu_capacity_tokens,
        disk_capacity_tokens=scenario.disk_capacity_tokens,
        storage_tiers=",".join(t.text for t in scenario.storage_tiers),
        gpu_blocks=scenario.gpu_tokens // units(scenario).block,
    )
    return data


def run_records(scenario: Scenario, run: str, requests: list[Request] | None = None) -> list[RequestRecord]:
    """The records of one run of the scenario, without events (for sweeps and fits).

    ``requests`` may be given when many capacities share one workload, which tier sizes do not change.
    """
    costs = scenario.costs or default_costs()
    return Engine(run, tier_spec(scenario, run), costs).run_all(requests if requests is not None else build_requests(scenario))
