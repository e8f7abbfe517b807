"""A run under load explained against itself alone: each request's TTFT parts, and what the overlap cost it.

Every run of the scenario is served twice by the same scheduler settings:
as the serving settings say (``loaded``) and one request at a time
(``ClosedLoop(1)``, ``alone``), over the same requests. Per request the
result gives its TTFT parts under load (``sim.sched.shares``), the same parts
alone, and the overlap's cost: the difference of each part (they sum to the
TTFT's difference) and the hit tokens it lost (alone's hits minus those under
load, GPU and offload tiers together; negative when the overlap helped).
The GPU blocks it lost are told apart by what became of them by its first
admission: evicted (by the allocation of the requests named, while others held
blocks the cache would otherwise have kept) or not yet cached (a request that
computes them had not got to them). ``pinned_blocks`` is the room the other
running requests held at that admission.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sim.blocks.request import Request
from sim.bounds.budget import Cost
from sim.costs.model import default_costs
from sim.engine.loop import Engine, RequestRecord
from sim.numeric.stats import DECIMALS, quantile
from sim.sched.arrivals import Arrivals, ClosedLoop
from sim.sched.config import SchedulerConfig
from sim.sched.limit import StepLimit
from sim.sched.output import StepOutput
from sim.sched.replay import served_requests
from sim.sched.report import run_summary
from sim.sched.serving import Serving
from sim.sched.shares import NOT_CACHED, PARTS, SharingEngine, ttft_parts
from sim.sched.simulate import stepped_cost
from sim.simulation.replay import ReplayTiers, replay_engine
from sim.simulation.run import scenario_summary, tier_spec
from sim.traces.reader import Trace
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

ALONE = ClosedLoop(1)


def overlap_cost(scenario: Scenario, serving: Serving) -> Cost:
    """Two stepped runs of every run of the scenario: under load and alone (the same request-steps each)."""
    one = stepped_cost(scenario, serving)
    return one + one


def explain_served(
    scenario: Scenario, serving: Serving, limit: StepLimit | None = None
) -> tuple[dict[str, Any], dict[str, list[StepOutput]]]:
    """Each run under load, explained against itself alone (``kvscope explain --concurrency N --json``), and each
    run's step ledger under load; ``limit``: the runs under load stop at its work budget (``OverWorkBudget``)."""
    requests = build_requests(scenario)
    costs = scenario.costs or default_costs()
    config = serving.scheduler_config()
    runs, ledgers = [], {}
    for name in scenario.run_names:
        make = lambda name=name: Engine(name, tier_spec(scenario, name), costs)  # noqa: E731
        entry, ledgers[name] = explain_run_served(make, config, requests, serving.arrivals(), limit)
        runs.append(entry)
    summary = scenario_summary(scenario)
    summary["serving"] = serving.summary()
    return {"scenario": summary, "runs": runs}, ledgers


def explain_trace_served(
    trace: Trace, tiers: ReplayTiers, serving: Serving, arrivals: Arrivals | None = None, limit: StepLimit | None = None,
) -> tuple[dict[str, Any], dict[str, list[StepOutput]]]:
    """A trace under load (at its timestamps when ``arrivals`` are they), explained against itself alone."""
    make = lambda: replay_engine(trace, tiers)  # noqa: E731
    entry, steps = explain_run_served(make, serving.scheduler_config(), served_requests(trace, tiers.chunk_blocks),
                                      arrivals or serving.arrivals(), limit)
    return {"trace": trace.summary(), "serving": serving.summary(), "runs": [entry]}, {entry["name"]: steps}


def explain_run_served(
    make: Callable[[], Engine], config: SchedulerConfig, requests: Sequence[Request], arrivals: Arrivals,
    limit: StepLimit | None = None,
) -> tuple[dict[str, Any], list[StepOutput]]:
    """One run (a fresh engine from ``make`` each time) under ``arrivals`` and alone, request by request; ``limit``:
    the run under load stops at its work budget (``OverWorkBudget``)."""
    loaded, alone = SharingEngine(make(), config), SharingEngine(make(), config)
    run, solo = loaded.run(requests, arrivals, limit), alone.run(requests, ALONE)
    name = loaded.engine.run
    block = loaded.block
    rows = []
    for rec, parts, flight, rec1, parts1 in zip(run.records, ttft_parts(loaded, run), run.flights,
                                                solo.records, ttft_parts(alone, solo)):
        lost_gpu = rec1.gpu_hit_tokens - rec.gpu_hit_tokens
        past_hit = loaded.admitted_at[rec.seq].past_hit[: max(lost_gpu, 0) // block]
        evictors = sorted({seq for seq in past_hit if seq != NOT_CACHED})
        overlap = {k: round(parts[k] - parts1[k], DECIMALS) for k in ("ttft_ms", *PARTS)}
        overlap.update(
            hit_tokens=_hits(rec1) - _hits(rec), gpu_hit_tokens=lost_gpu,
            evicted_tokens=sum(block for seq in past_hit if seq != NOT_CACHED),
            not_cached_tokens=sum(block for seq in past_hit if seq == NOT_CACHED), evicted_by=evictors,
        )
        rows.append({
            "seq": rec.seq, "pass": rec.pass_, "order": rec.order, "doc": rec.doc, "prompt_tokens": rec.prompt_tokens,
            "arrival_ms": round(flight.arrival_ms, DECIMALS), **parts, "gpu_hit_tokens": rec.gpu_hit_tokens,
            "offload_hit_tokens": _hits(rec) - rec.gpu_hit_tokens,
            "alone": {**{k: parts1[k] for k in ("ttft_ms", *PARTS)}, "gpu_hit_tokens": rec1.gpu_hit_tokens,
                      "offload_hit_tokens": _hits(rec1) - rec1.gpu_hit_tokens},
            "overlap": overlap,
        })
    by_pass: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_pass.setdefault(r["pass"], []).append(r)
    entry = {
        "name": name, "serving": run_summary(run), "alone": run_summary(solo),
        "passes": [{"pass": p, "order": rs[0]["order"], **group(rs)} for p, rs in sorted(by_pass.items())],
        "totals": group(rows), "requests": rows,
    }
    return entry, run.steps


def _hits(rec: RequestRecord) -> int:
    return rec.prompt_tokens - rec.computed_tokens


def group(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means of the parts under load and alone, TTFT p90 under load and alone, and the hit tokens the overlap cost."""
    n = len(rows)
    mean = lambda key, of=None: round(sum((r[of] if of else r)[key] for r in rows) / n, DECIMALS)  # noqa: E731
    return {
        "requests": n,
        "ttft_p90_ms": round(quantile([r["ttft_ms"] for r in rows], 0.9), DECIMALS),
        "alone_ttft_p90_ms": round(quantile([r["alone"]["ttft_ms"] for r in rows], 0.9), DECIMALS),
        "mean": {k: mean(k) for k in ("ttft_ms", *PARTS)},
        "alone_mean": {k: mean(k, "alone") for k in ("ttft_ms", *PARTS)},
        "lost_hit_tokens": sum(r["overlap"]["hit_tokens"] for r in rows),
        "lost_gpu_hit_tokens": sum(r["overlap"]["gpu_hit_tokens"] for r in rows),
        "evicted_tokens": sum(r["overlap"]["evicted_tokens"] for r in rows),
        "not_cached_tokens": sum(r["overlap"]["not_cached_tokens"] for r in rows),
    }
