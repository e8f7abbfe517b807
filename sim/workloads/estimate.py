"""What a scenario's simulation, capacity curve and policy what-ifs will cost before they run (``sim.bounds.budget``'s units)."""

from __future__ import annotations

from sim.blocks.policies import GPU_POLICY_NAMES
from sim.bounds.budget import (
    BLOCK_BYTES,
    CHUNK_BYTES,
    DISTINCT_KEY_BYTES,
    EXPLAIN_BLOCK_BYTES,
    EXPLAIN_JSON_BYTES,
    EXPLAIN_STEPS,
    KEY_BYTES,
    RECORD_BYTES,
    RECORD_JSON_BYTES,
    REQUEST_BYTES,
    REQUEST_STEPS,
    SUMMARY_JSON_BYTES,
    WHAT_IF_STEPS,
    Cost,
)
from sim.tiers.chunk_store import CHUNK_POLICIES
from sim.workloads.scenario import Scenario


def _tier_bytes(scenario: Scenario, run: str, distinct_blocks: int) -> int:
    """What a run's tiers can hold at most: their capacity or the workload's distinct blocks, whichever is less."""
    gpu = min(scenario.gpu_tokens // scenario.block_size, distinct_blocks) * BLOCK_BYTES
    chunk_blocks = max(1, scenario.chunk_size // scenario.block_size)
    chunks = 0
    for tier, capacity in (("cpu", scenario.cpu_capacity_tokens), ("disk", scenario.disk_capacity_tokens)):
        if tier in run and capacity:
            chunks += min(capacity // scenario.chunk_size + 1, distinct_blocks // chunk_blocks + 1)
    return gpu + chunks * CHUNK_BYTES


def _distinct_blocks(scenario: Scenario) -> int:
    """At most: each document's blocks once, each request's question blocks (and its whole prompt if passes force
    misses), and never more than all the requests' blocks."""
    block = scenario.block_size
    doc_blocks = -(-(scenario.shared_prefix_tokens + scenario.doc_tokens) // block)
    question = scenario.question_tokens
    per_request = -(-(max(question) if isinstance(question, list) else question) // block) + 1
    if any(p.hit_miss_ratio for p in scenario.passes):
        per_request += doc_blocks  # a forced miss makes its document's text unique
    return min(scenario.total_blocks, scenario.docs * doc_blocks + scenario.total_requests * per_request)


def simulation_cost(scenario: Scenario, runs: tuple[str, ...] | None = None, records: bool = True, explain: bool = True) -> Cost:
    """One ``simulate`` of the scenario (every run, or ``runs``); ``records``: the answer lists every request;
    ``explain``: with each miss's cause (``simulate``'s default)."""
    names = runs if runs is not None else tuple(scenario.run_names)
    requests, blocks = scenario.total_requests, scenario.total_blocks
    distinct = _distinct_blocks(scenario)
    # A run with an offload tier also looks up and stores each prompt's offload units (LMCache's chunks, or
    # vllm-native's offload blocks of blocks_per_chunk GPU blocks: as many as blocks at one block a unit).
    chunks = requests * -(-scenario.prompt_tokens // scenario.offload_unit_tokens)
    work = len(names) * (blocks + requests * REQUEST_STEPS) + sum(chunks for run in names if "cpu" in run)
    workload = blocks * KEY_BYTES + distinct * DISTINCT_KEY_BYTES + requests * REQUEST_BYTES
    held = sum(_tier_bytes(scenario, run, distinct) for run in names)
    memory = workload + held + len(names) * requests * RECORD_BYTES
    answer = len(names) * (requests * RECORD_JSON_BYTES if records else len(scenario.passes) * SUMMARY_JSON_BYTES)
    if explain and records:
        work *= EXPLAIN_STEPS
        memory += len(names) * blocks * EXPLAIN_BLOCK_BYTES
        answer += len(names) * requests * EXPLAIN_JSON_BYTES
    return Cost(work, memory, answer)


def curve_cost(scenario: Scenario, tier: str, points: int) -> Cost:
    """A capacity curve (``sim.analysis.capacity``): the GPU's runs ``gpu`` at two granularities x ``points``; the CPU's runs
    ``gpu+cpu`` at ``points`` sizes and ``gpu`` once. A point keeps its pass summaries only."""
    if tier == "gpu":
        return simulation_cost(scenario, runs=("gpu",), records=False).times(2 * points)
    return simulation_cost(scenario, runs=("gpu+cpu",), records=False).times(points + 1)


def policies_cost(scenario: Scenario) -> Cost:
    """``sim.analysis.whatif.compare``: ``gpu`` under each GPU policy, ``gpu+cpu`` under each CPU policy if there is a CPU tier."""
    cost = simulation_cost(scenario, runs=("gpu",), records=False).times(len(GPU_POLICY_NAMES) * WHAT_IF_STEPS)
    if scenario.cpu_capacity_tokens is not None:
        cost = cost + simulation_cost(scenario, runs=("gpu+cpu",), records=False).times(len(CHUNK_POLICIES) * WHAT_IF_STEPS)
    return cost
