"""Capacity thresholds: how big the GPU must be for a same-order re-read to hit, and the CPU to serve it.

Both searches are binary searches over capacity, which is sound because the
tiers are stack algorithms: the free-queue (LRU) order does not depend on
capacity, so what a smaller tier holds a larger one holds too. The tests
check the thresholds against a scan of every capacity. Served under load
(vLLM's scheduler loop) the searches are the same, but the order blocks are
freed in, and so the stack property, then depends on which requests overlap:
the thresholds are where the search lands.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.blocks.kv import gib_for
from sim.blocks.request import Request
from sim.bounds.budget import Cost
from sim.numeric.search import smallest
from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.sched.limit import StepLimit
from sim.sched.records import served_records
from sim.sched.serving import Serving
from sim.sched.simulate import step_work
from sim.simulation.run import run_records, tier_spec
from sim.workloads.estimate import simulation_cost
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario

SAME_ORDER = [PassSpec(order="forward"), PassSpec(order="forward")]


def pass2_hits(
    scenario: Scenario, run: str, tier_field: str, requests: list[Request] | None = None, serving: Serving | None = None,
    limit: StepLimit | None = None,
) -> int:
    if serving is None or not serving.stepped:
        records = run_records(scenario, run, requests)
    else:
        engine = Engine(run, tier_spec(scenario, run), scenario.costs or default_costs())
        records = served_records(engine, requests if requests is not None else build_requests(scenario), serving, limit)
    return sum(getattr(r, tier_field) for r in records if r.pass_ == 2)


@dataclass(frozen=True)
class Thresholds:
    """What the sweep found; capacities in tokens (None: no capacity in range works)."""

    gpu_block_tokens: int | None
    gpu_doc_tokens: int | None
    cpu_any_tokens: int | None
    cpu_full_tokens: int | None
    bytes_per_token: int
    docs: int
    doc_tokens: int

    def to_dict(self) -> dict[str, Any]:
        def gib(tokens: int | None) -> float | None:
            return None if tokens is None else round(gib_for(tokens, self.bytes_per_token), 4)

        return {
            "gpu": {
                "block_granularity_tokens": self.gpu_block_tokens,
                "doc_granularity_tokens": self.gpu_doc_tokens,
                "doc_granularity_docs": None if self.gpu_doc_tokens is None else self.gpu_doc_tokens // self.doc_tokens,
            },
            "cpu": {
                "any_hit_tokens": self.cpu_any_tokens,
                "any_hit_gib": gib(self.cpu_any_tokens),
                "all_served_tokens": self.cpu_full_tokens,
                "all_served_gib": gib(self.cpu_full_tokens),
            },
            "kv_bytes_per_token": self.bytes_per_token,
        }


def _gpu_search(scenario: Scenario, granularity: str) -> tuple[Scenario, int, int, int]:
    """The GPU search's scenario, its capacity unit (tokens) and its range of units."""
    base = scenario.model_copy(update={"passes": SAME_ORDER, "granularity": granularity, "cpu_gb": None, "cpu_tokens": None})
    if granularity == "doc":
        unit = scenario.shared_prefix_tokens + scenario.doc_tokens
        return base, unit, -(-(base.prompt_tokens + base.block_size) // unit), scenario.docs + 1
    unit = scenario.block_size
    return base, unit, -(-(base.prompt_tokens + unit) // unit), scenario.docs * -(-base.prompt_tokens // unit) + 2


def _cpu_search(scenario: Scenario) -> tuple[Scenario, int, int]:
    """The CPU search's scenario, its capacity unit (tokens) and the top of its range of units (from 1)."""
    base = scenario.model_copy(update={"passes": SAME_ORDER, "cpu_gb": None, "disk_gb": None, "disk_tokens": None})
    chunk = scenario.chunk_size if scenario.granularity == "block" else scenario.shared_prefix_tokens + scenario.doc_tokens
    return base, chunk, scenario.docs * -(-base.prompt_tokens // chunk) + 1


def probes(lo: int, hi: int) -> int:
    """The most simulations ``smallest(lo, hi, ok)`` runs: ``ok(hi)``, then one per halving."""
    return 1 + max(0, hi - lo).bit_length()


def sweep_cost(scenario: Scenario, serving: Serving | None = None) -> Cost:
    """What ``sweep`` costs at most: each probe of its binary searches is one run of the same-order re-read, costed
    at the top of its range (the largest tier holds the most); under load, with its steps (``step_work``)."""
    stepped = serving is not None and serving.stepped

    def probe(top: Scenario, run: str) -> Cost:
        cost = simulation_cost(top, runs=(run,), records=False)
        return cost + step_work(top, serving, runs=1) if serving is not None and stepped else cost

    cost = Cost(0, 0, 0)
    for granularity in ("block",) if stepped else ("block", "doc"):
        base, unit, lo, hi = _gpu_search(scenario, granularity)
        cost = cost + probe(base.model_copy(update={"gpu_tokens": hi * unit}), "gpu").times(probes(lo, hi))
    base, chunk, hi = _cpu_search(scenario)
    return cost + probe(base.model_copy(update={"cpu_tokens": hi * chunk}), "gpu+cpu").times(1 + 2 * probes(1, hi))


def gpu_threshold(
    scenario: Scenario, granularity: str, serving: Serving | None = None, limit: StepLimit | None = None
) -> int | None:
    """Smallest GPU capacity (tokens) at which pass 2 of a same-order re-read gets any GPU hit (served as ``serving``
    says; whole documents only one at a time, the scheduler serving blocks: None under load)."""
    if granularity == "doc" and serving is not None and serving.stepped:
        return None
    base, unit, lo, hi = _gpu_search(scenario, granularity)
    requests = build_requests(base)

    def ok(units: int) -> bool:
        update = {"gpu_tokens": units * unit}
        return pass2_hits(base.model_copy(update=update), "gpu", "gpu_hit_tokens", requests, serving, limit) > 0

    found = smallest(lo, hi, ok)
    return None if found is None else found * unit


def cpu_thresholds(
    scenario: Scenario, serving: Serving | None = None, limit: StepLimit | None = None
) -> tuple[int | None, int | None]:
    """Smallest CPU capacity (tokens) giving pass 2 any CPU hit, and the smallest serving all of it from CPU."""
    base, chunk, hi = _cpu_search(scenario)
    requests = build_requests(base)

    def hits(chunks: int) -> int:
        update = {"cpu_tokens": chunks * chunk}
        return pass2_hits(base.model_copy(update=update), "gpu+cpu", "cpu_hit_tokens", requests, serving, limit)

    best = hits(hi)

    any_hit = smallest(1, hi, lambda c: hits(c) > 0)
    full = smallest(1, hi, lambda c: hits(c) >= best) if best > 0 else None
    return (
        None if any_hit is None else any_hit * chunk,
        None if full is None else full * chunk,
    )


def sweep(scenario: Scenario, serving: Serving | None = None, limit: StepLimit | None = None) -> Thresholds:
    """The thresholds, each run served as ``serving`` says (one request at a time when None)."""
    cpu_any, cpu_full = cpu_thresholds(scenario, serving, limit)
    return Thresholds(
        gpu_threshold(scenario, "block", serving, limit),
        gpu_threshold(scenario, "doc", serving, limit),
        cpu_any,
        cpu_full,
        scenario.bytes_per_token,
        scenario.docs,
        scenario.shared_prefix_tokens + scenario.doc_tokens,
    )
