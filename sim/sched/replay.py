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
from sim.sched.arrivals import MAX_SPEEDUP, Arrivals, Timed
from sim.sched.output import StepOutput
from sim.sched.report import request_rows, run_summary
from sim.sched.serving import Serving
from sim.sched.simulate import STEP_BYTES, STEP_REQUEST_STEPS, TIMING_JSON_BYTES
from sim.sched.stepped import SteppedEngine
from sim.simulation.replay import ReplayTiers, replay_engine, trace_requests
from sim.traces.reader import Trace


def served_trace_cost(trace: Trace, serving: Serving) -> Cost:
    """``trace_cost`` plus each request's work in every step it takes part in (a step per generated token, a step
    per prefill chunk), as ``sim.sched.simulate.stepped_cost`` counts a scenario's."""
    budget = serving.scheduler_config().max_num_batched_tokens
    request_steps = sum(max(1, out) + -(-n // budget) for n, out in zip(trace.input_tokens, trace.output_tokens))
    base = trace_cost(len(trace), trace.total_blocks)
    return base + Cost(
        request_steps * STEP_REQUEST_STEPS, base.memory_bytes + request_steps * STEP_BYTES, len(trace) * TIMING_JSON_BYTES
    )


def trace_arrivals(trace: Trace, speedup: float = 1.0) -> Timed:
    """The trace's timestamps from its first, in ms, their gaps divided by ``speedup``."""
    if not 0 < speedup <= MAX_SPEEDUP:
        raise ValueError(f"speedup must be above 0 and at most {MAX_SPEEDUP:,.0f}, got {speedup}")
    stamps = trace.timestamps_ms
    first = stamps[0] if len(stamps) else 0.0
    return Timed(tuple((t - first) / speedup for t in stamps))


def served_requests(trace: Trace, chunk_blocks: int = 1) -> list[Request]:
    """The trace's requests, each generating its ``output_length`` (at least one token: the first is the TTFT's)."""
    outputs = trace.output_tokens
    return [replace(r, output_tokens=max(1, int(outputs[r.seq]))) for r in trace_requests(trace, chunk_blocks)]


def replay_served(
    trace: Trace, tiers: ReplayTiers, costs: CostModel | None, serving: Serving, arrivals: Arrivals | None = None,
) -> tuple[dict[str, Any], list[StepOutput]]:
    """The replay's JSON result (trace, run, tiers, serving settings and figures, per-request rows) and its ledger.

    ``arrivals`` None: as ``serving`` says (a closed loop of 1 unless told otherwise).
    """
    engine = replay_engine(trace, tiers, costs)
    requests = served_requests(trace, tiers.chunk_blocks)
    run = SteppedEngine(engine, serving.scheduler_config()).run(requests, arrivals or serving.arrivals())
    rows = []
    for record, times in zip(run.records, request_rows(run)):
        row = record.to_dict()
        row.update((k, v) for k, v in times.items() if k not in row)
        rows.append(row)
    settings = serving.summary()
    if isinstance(arrivals, Timed):
        settings = {"arrivals": "timestamps", **{k: v for k, v in settings.items() if k != "concurrency"}}
    result = {
        "trace": trace.summary(), "run": engine.run, "tiers": [asdict(t) for t in engine.tier_infos()],
        "serving": settings, "summary": run_summary(run), "requests": rows,
    }
    return result, run.steps
