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
from sim.sched.limit import STEP_REQUEST_STEPS, StepLimit
from sim.sched.output import StepOutput
from sim.sched.report import request_rows, run_summary
from sim.sched.serving import Serving
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import engines, run_entry, scenario_summary
from sim.workloads.estimate import simulation_cost
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

TIMING_JSON_BYTES = 260  # the times a request's record gains
STEP_BYTES = 700  # a step of the ledger held until the run ends (its StepOutput and dicts), at most one a request-step


def prefill_chunk(serving: Serving) -> int:
    """The fewest tokens a prefill step may give a request, for an estimate: the budget, or
    ``long_prefill_token_threshold`` when it caps chunks (it does whenever two requests run or wait)."""
    config = serving.scheduler_config()
    threshold = config.long_prefill_token_threshold
    return min(config.max_num_batched_tokens, threshold) if threshold > 0 else config.max_num_batched_tokens


def step_work(scenario: Scenario, serving: Serving, runs: int | None = None) -> Cost:
    """What serving the scenario step by step adds to ``simulation_cost`` (of ``runs`` runs, default every run): a
    request's work in each step it takes part in (a decode step per generated token, a step per prefill chunk)."""
    per_request = scenario.output_tokens + -(-scenario.prompt_tokens // prefill_chunk(serving))
    runs = len(scenario.run_names) if runs is None else runs
    requests = scenario.total_requests
    request_steps = runs * requests * per_request
    return Cost(request_steps * STEP_REQUEST_STEPS, request_steps * STEP_BYTES, runs * requests * TIMING_JSON_BYTES)


def stepped_cost(scenario: Scenario, serving: Serving) -> Cost:
    """``simulation_cost`` with explanations (a run under load explains every miss), plus ``step_work`` (its memory on
    top of the simulation's)."""
    base = simulation_cost(scenario, explain=True)
    extra = step_work(scenario, serving)
    return Cost(base.work_steps + extra.work_steps, base.memory_bytes + extra.memory_bytes,
                base.response_bytes + extra.response_bytes)


def refusal(scenario: Scenario, serving: Serving | None = None) -> tuple[str, str] | None:
    """The field (of the scenario or of how it is served) the stepped engine cannot serve, and why (None: it can).

    Every backend is served (vLLM's native offloading with its asynchronous loads, ``sim.sched.offloading``); the
    CLI and the API ask here before anything runs.
    """
    if scenario.granularity != "block":
        return "granularity", "must be block when requests are scheduled: vLLM's scheduler allocates and caches blocks"
    config = serving.scheduler_config() if serving is not None else None
    if config is not None and not config.enable_chunked_prefill and scenario.prompt_tokens > config.max_num_batched_tokens:
        # vLLM refuses a budget below max_model_len without chunked prefill, and raises its own default budget to
        # max_model_len (vllm/config/scheduler.py verify_max_model_len 317-328; engine/arg_utils.py 3194-3199):
        # a prompt longer than the budget is never scheduled whole, so it would wait for ever.
        return "max_num_batched_tokens", (
            f"must be at least the longest prompt ({scenario.prompt_tokens:,} tokens) without chunked prefill: vLLM "
            f"refuses a budget below max_model_len then (this one is {config.max_num_batched_tokens:,})"
        )
    return None


def simulate_stepped(
    scenario: Scenario, serving: Serving, limit: StepLimit | None = None
) -> tuple[dict[str, Any], dict[str, list[StepOutput]]]:
    """The JSON result, and each run's step ledger; ``limit``: the runs stop at its work budget (``OverWorkBudget``)."""
    requests = build_requests(scenario)
    config, arrivals = serving.scheduler_config(), serving.arrivals()
    runs, ledgers = [], {}
    # Every miss explained as the one-at-a-time result explains it (sim.explain, attached at each first lookup).
    for engine in engines(scenario, explain=True, requests=requests):
        name = engine.run
        run = SteppedEngine(engine, config).run(requests, arrivals, limit)
        entry = run_entry(engine, run.records)
        for record, times in zip(entry["requests"], request_rows(run)):
            record.update((k, v) for k, v in times.items() if k not in record)
        entry["serving"] = run_summary(run)
        runs.append(entry)
        ledgers[name] = run.steps
    summary = scenario_summary(scenario)
    summary["serving"] = serving.summary()
    return {"scenario": summary, "runs": runs, "comparison": comparison(runs)}, ledgers


def served_result(scenario: Scenario, serving: Serving, limit: StepLimit | None = None) -> dict[str, Any]:
    """The JSON result alone (what a worker process sends back)."""
    return simulate_stepped(scenario, serving, limit)[0]
