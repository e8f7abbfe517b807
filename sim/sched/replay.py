"""A trace replayed under load: its requests arrive at their own timestamps (or as the serving settings say), step by step.

The trace's requests are ``sim.simulation.replay.trace_requests``' (one GPU block per
hash id), each with its ``output_length`` of generated tokens; the tiers are
``sim.simulation.replay.replay_engine``'s. ``speedup`` divides the gaps between the
timestamps (AIPerf's ``--fixed-schedule-speedup``): 2 sends the trace in half
its time.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from sim.blocks.request import Request
from sim.bounds.budget import Cost, trace_cost
from sim.costs.model import CostModel
from sim.sched.limit import STEP_REQUEST_STEPS, StepLimit
from sim.sched.output import StepOutput
from sim.sched.replay_serving import ReplayServing
from sim.sched.report import request_rows, run_summary
from sim.sched.simulate import STEP_BYTES, TIMING_JSON_BYTES, prefill_chunk
from sim.sched.stepped import SteppedEngine
from sim.simulation.replay import ReplayTiers, replay_engine, trace_requests
from sim.traces.reader import Trace


def served_trace_cost(trace: Trace, serving: ReplayServing) -> Cost:
    """``trace_cost`` plus each request's work in every step it takes part in (a step per generated token, a step
    per prefill chunk), as ``sim.sched.simulate.stepped_cost`` counts a scenario's."""
    chunk = prefill_chunk(serving)
    request_steps = sum(max(1, out) + -(-n // chunk) for n, out in zip(trace.input_tokens, trace.output_tokens))
    base = trace_cost(len(trace), trace.total_blocks)
    return base + Cost(
        request_steps * STEP_REQUEST_STEPS, base.memory_bytes + request_steps * STEP_BYTES, len(trace) * TIMING_JSON_BYTES
    )


def served_requests(trace: Trace, chunk_blocks: int = 1) -> list[Request]:
    """The trace's requests, each generating its ``output_length`` (at least one token: the first is the TTFT's)."""
    outputs = trace.output_tokens
    return [replace(r, output_tokens=max(1, int(outputs[r.seq]))) for r in trace_requests(trace, chunk_blocks)]


def replay_served(
    trace: Trace, tiers: ReplayTiers, costs: CostModel | None, serving: ReplayServing, limit: StepLimit | None = None,
    ledger: bool = True, rows: bool = True,
) -> tuple[dict[str, Any], list[StepOutput]]:
    """The replay's JSON result (trace, run, tiers, serving settings and figures, per-request rows unless not
    ``rows``) and its ledger (empty without ``ledger``); ``limit``: the run stops at its work budget
    (``OverWorkBudget``). A day's trace holds hundreds of thousands of requests: rows and ledger only when asked."""
    engine = replay_engine(trace, tiers, costs)
    requests = served_requests(trace, tiers.chunk_blocks)
    run = SteppedEngine(engine, serving.scheduler_config()).run(
        requests, serving.trace_arrivals(trace.timestamps_ms), limit, ledger, records=rows
    )
    result = {
        "trace": trace.summary(), "run": engine.run, "tiers": [asdict(t) for t in engine.tier_infos()],
        "serving": serving.summary(), "summary": run_summary(run),
    }
    if rows:
        result["requests"] = [_row(record.to_dict(), times) for record, times in zip(run.records, request_rows(run))]
    return result, run.steps


def _row(record: dict[str, Any], times: dict[str, Any]) -> dict[str, Any]:
    """A request's record, then the times it does not already hold."""
    record.update((k, v) for k, v in times.items() if k not in record)
    return record
