"""Simulator speed: the seed lab in-process, prompt blocks resolved per second at scale, the default offload backend beside the brief's."""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

from bench._timing import figure
from sim.calibration.calibrate import seed_scenario
from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.simulation.run import simulate, tier_spec
from sim.tiers.chunk_store import DEFAULT_CPU_BACKEND
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario


def _best_of(n: int, fn: Any) -> float:
    best = float("inf")
    for _ in range(n):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _scale(scenario: Scenario, run: str) -> dict[str, Any]:
    """Blocks per second through one run's tiers; the workload is hashed beforehand, as vLLM hashes on arrival."""
    started = time.perf_counter()
    requests = build_requests(scenario)
    build_s = time.perf_counter() - started
    blocks = sum(len(r.block_keys) for r in requests)
    engine = Engine(run, tier_spec(scenario, run), default_costs())
    started = time.perf_counter()
    records = engine.run_all(requests)
    elapsed = time.perf_counter() - started
    # Memory in a second, traced run: tracing slows Python too much to time it at once.
    tracemalloc.start()
    Engine(run, tier_spec(scenario, run), default_costs()).run_all(requests)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "run": run,
        "requests": len(records),
        "prompt_blocks": blocks,
        "gpu_hit_ratio": round(sum(r.gpu_hit_tokens for r in records) / sum(r.prompt_tokens for r in records), 4),
        "seconds": round(elapsed, 3),
        "block_lookups_per_s": round(blocks / elapsed),
        "workload_hashing_s": round(build_s, 3),
        "engine_peak_mib": round(peak / 2**20, 1),
    }


def _default_against_brief(scenario: Scenario, repeats: int = 3) -> dict[str, Any]:
    """The default backend's gpu+cpu run beside the brief's (the offload rules before LMCache's own), alternated
    so that both see the same load; wall seconds and the process's CPU seconds (less moved by other work)."""
    requests = build_requests(scenario)
    wall: dict[str, list[float]] = {DEFAULT_CPU_BACKEND: [], "brief": []}
    cpu: dict[str, list[float]] = {DEFAULT_CPU_BACKEND: [], "brief": []}
    for _ in range(repeats):
        for backend in wall:
            tiers = tier_spec(scenario.replace(cpu_backend=backend), "gpu+cpu")
            started, started_cpu = time.perf_counter(), time.process_time()
            Engine("gpu+cpu", tiers, default_costs()).run_all(requests)
            wall[backend].append(time.perf_counter() - started)
            cpu[backend].append(time.process_time() - started_cpu)
    return {
        "default_backend": DEFAULT_CPU_BACKEND,
        "wall": figure(wall[DEFAULT_CPU_BACKEND], wall["brief"], "the brief backend's gpu+cpu run"),
        "cpu": figure(cpu[DEFAULT_CPU_BACKEND], cpu["brief"], "the brief backend's gpu+cpu run"),
        "target_ratio_at_most": 1.15,
    }


def run() -> dict[str, Any]:
    default_costs()  # the one-off seed fit is not part of a simulation
    seed = seed_scenario()
    seed_ms = _best_of(20, lambda: simulate(seed)) * 1000
    # 1,000 seed-sized documents read in 10 passes: forward, reverse, then random orders.
    passes = "forward,reverse," + ",".join(f"random@{i}" for i in range(8))
    big_small_gpu = seed.replace(docs=1000, passes=passes)
    big_gpu = big_small_gpu.replace(gpu_tokens=2_600_000)
    return {
        "seed_lab_both_runs_ms": round(seed_ms, 2),
        "seed_lab_target_ms": 50,
        "scale_1000_docs_x_10_passes": [
            _scale(big_small_gpu, "gpu"),
            _scale(big_small_gpu, "gpu+cpu"),
            _scale(big_gpu, "gpu"),
        ],
        "scale_gpu_cpu_default_vs_brief_backend": _default_against_brief(big_small_gpu),
        "block_lookups_target_per_s": 1_000_000,
    }
