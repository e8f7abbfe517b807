"""Simulate a scenario served under load: every run through the stepped engine, as ``simulate --json`` prints it.

The result has ``sim.simulation.run.simulate``'s shape: each request's record
gains its times (arrival, queueing, TTFT with queueing, TPOT, e2e,
preemptions, the hits of each admission, its first token's step), each run a
``serving`` summary (TTFT p50/p90/p99, throughput), the scenario the serving
settings. The step ledgers come back beside it, by run name.
"""

from __future__ import annotations

from typing import Any

from sim.bounds.budget import Cost
from sim.engine.result import comparison
from sim.sched.output import StepOutput
from sim.sched.report import request_rows, run_summary
from sim.sched.serving import Serving
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import engines, run_entry, scenario_summary
from sim.workloads.estimate import simulation_cost
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

# A request's work in each step it takes part in, in block steps (sim.bounds.budget, ~0.5 us each): measured ~13 us on the seed lab
# with 200 output tokens at 8 in flight (the whole run over its request-steps).
STEP_REQUEST_STEPS = 26
TIMING_JSON_BYTES = 260  # the times a request's record gains
STEP_BYTES = 700  # a step of the ledger held until the run ends (its StepOutput and dicts), at most one a request-step


def stepped_cost(scenario: Scenario, serving: Serving) -> Cost:
    """``simulation_cost`` with explanations, plus a request's work in each step it takes part in (a decode step
    per generated token, a step per prefill chunk)."""
    base = simulation_cost(scenario, explain=True)
    budget = serving.scheduler_config().max_num_batched_tokens
    per_request = scenario.output_tokens + -(-scenario.prompt_tokens // budget)
    runs, requests = len(scenario.run_names), scenario.total_requests
    request_steps = runs * requests * per_request
    return base + Cost(
        request_steps * STEP_REQUEST_STEPS, base.memory_bytes + request_steps * STEP_BYTES, runs * requests * TIMING_JSON_BYTES
    )


def refusal(scenario: Scenario) -> tuple[str, str] | None:
    """The scenario field the stepped engine cannot serve, and why (None: it can serve it).

    Every backend is served today (vLLM's native offloading with its asynchronous loads, ``sim.sched.offloading``);
    the CLI and the API ask here before anything runs.
    """
    del scenario
    return None


def simulate_stepped(scenario: Scenario, serving: Serving) -> tuple[dict[str, Any], dict[str, list[StepOutput]]]:
    """The JSON result, and each run's step ledger."""
    requests = build_requests(scenario)
    config, arrivals = serving.scheduler_config(), serving.arrivals()
    runs, ledgers = [], {}
    # Every miss explained as the one-at-a-time result explains it (sim.explain, attached at each first lookup).
    for engine in engines(scenario, explain=True, requests=requests):
        name = engine.run
        run = SteppedEngine(engine, config).run(requests, arrivals)
        entry = run_entry(engine, run.records)
        for record, times in zip(entry["requests"], request_rows(run)):
            record.update((k, v) for k, v in times.items() if k not in record)
        entry["serving"] = run_summary(run)
        runs.append(entry)
        ledgers[name] = run.steps
    summary = scenario_summary(scenario)
    summary["serving"] = serving.summary()
    return {"scenario": summary, "runs": runs, "comparison": comparison(runs)}, ledgers


def served_result(scenario: Scenario, serving: Serving) -> dict[str, Any]:
    """The JSON result alone (what a worker process sends back)."""
    return simulate_stepped(scenario, serving)[0]
