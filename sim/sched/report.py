"""A stepped run's figures: per request (arrival, queueing, TTFT, TPOT, e2e, preemptions, hits), per run, and the ledger."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any

from sim.numeric.stats import DECIMALS, quantile
from sim.sched.output import StepOutput
from sim.sched.stepped import SteppedRun


def request_rows(run: SteppedRun) -> list[dict[str, Any]]:
    """One row per request, by seq: its times (TTFT counts its queueing) and what each admission hit."""
    return [f.timing(run.queue_ms[f.seq]) for f in run.flights]


def run_summary(run: SteppedRun) -> dict[str, Any]:
    """TTFT p50/p90/p99 and throughput over the run, from the first arrival to the end of the last step."""
    flights = run.flights
    ttfts = [f.ttft_ms for f in flights]
    start = min(f.arrival_ms for f in flights)
    span_ms = run.end_ms - start
    per_s = 1000.0 / span_ms if span_ms > 0 else 0.0
    arrived_ms = max(f.arrival_ms for f in flights) - start
    return {
        "requests": len(flights),
        "steps": run.step_count,
        "span_ms": round(span_ms, DECIMALS),
        "ttft_p50_ms": round(quantile(ttfts, 0.5), DECIMALS),
        "ttft_p90_ms": round(quantile(ttfts, 0.9), DECIMALS),
        "ttft_p99_ms": round(quantile(ttfts, 0.99), DECIMALS),
        "requests_per_s": round(len(flights) * per_s, DECIMALS),
        # The rate requests came at, from the first arrival to the last (None when they all came at once).
        "arrivals_per_s": round((len(flights) - 1) * 1000.0 / arrived_ms, DECIMALS) if arrived_ms > 0 else None,
        "output_tokens_per_s": round(sum(f.num_output for f in flights) * per_s, DECIMALS),
        "preemptions": sum(f.preemptions for f in flights),
        **(
            {
                "store_refused": sum(f.store_refused for f in flights),
                "store_dropped_tokens": sum(f.store_dropped_tokens for f in flights),
            }
            if any(f.access is not None for f in flights) else {}
        ),
    }


def write_steps(steps: Sequence[StepOutput], out: IO[str], run: str | None = None) -> int:
    """The step ledger as JSONL, one line per step (every step scheduled something), each led by the ``run`` name
    when given (a file holding several runs); returns the lines written."""
    for step in steps:
        line = step.to_dict() if run is None else {"run": run, **step.to_dict()}
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
    return len(steps)
