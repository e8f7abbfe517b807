"""What if a tier evicted differently: the same workload under every eviction policy of the GPU and of the CPU tier.

The GPU comparison runs the GPU tier alone (``gpu``) under LRU (vLLM's), FIFO,
MRU and Belady's offline optimum, the upper bound no online policy beats. The
CPU comparison runs ``gpu+cpu`` with the scenario's GPU policy and each CPU
policy (LRU is LMCache's). The workload is built once and shared by every run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.blocks.policies import GPU_POLICY_NAMES
from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.engine.result import pass_summaries, run_totals
from sim.simulation.run import scenario_summary, tier_spec
from sim.tiers.chunk_store import CHUNK_POLICIES
from sim.tiers.native import backend_runs
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario


def compare(scenario: Scenario) -> dict[str, Any]:
    """Per tier and policy: pass summaries and totals; ``current`` marks the scenario's own policy."""
    requests = build_requests(scenario)
    costs = scenario.costs or default_costs()

    def run(name: str, **policies: str) -> dict[str, Any]:
        records = Engine(name, replace(tier_spec(scenario, name), **policies), costs).run_all(requests)
        return {"run": name, "passes": pass_summaries(records), "totals": run_totals(records)}

    gpu = [
        {"policy": p, "current": p == scenario.gpu_policy, **run("gpu", gpu_policy=p)} for p in GPU_POLICY_NAMES
    ]
    cpu = []
    if scenario.cpu_capacity_tokens is not None:
        cpu = [
            {"policy": p, "current": p == scenario.cpu_policy, **run("gpu+cpu", cpu_policy=p)}
            for p in CHUNK_POLICIES
            if backend_runs(scenario.cpu_backend, p, bool(scenario.behind_cpu))  # vllm-native: its lru and arc
        ]
    return {"scenario": scenario_summary(scenario), "gpu": gpu, "cpu": cpu}
