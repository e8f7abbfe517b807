"""The sizing advisor at scale: 200 candidates over the bundled Mooncake sample, on local worker processes and on Ray.

The anchor is one candidate's replay (the unit of work the search repeats),
timed in the same run; each search's figure is its wall time and its ratio
to the anchor (200 candidates on 2 workers would be about 100 anchors if
they split perfectly). Both searches must return the same outcomes.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench._timing import figure, runs
from sim.advise.candidate import Candidate
from sim.advise.search import Space, candidates, evaluate_all
from sim.advise.workloads import TraceWorkload
from sim.blocks.kv import MODELS

CANDIDATES = 200
REPEATS = 2
WORKERS = 2


def _workload() -> TraceWorkload:
    # As the search evaluates it: its replays together are worth the compiled replay (sim.engine.compiled).
    return TraceWorkload("mooncake-synthetic", "qwen2.5-1.5b", MODELS["qwen2.5-1.5b"].bytes_per_token).searching(CANDIDATES)


def _candidates(workload: TraceWorkload) -> list[Candidate]:
    # 14 GPU sizes x (no CPU tier + 14 CPU sizes) = 210 on the grid, up to the 72 GiB of KV an H100 holds at 0.9.
    max_gpu = int(80 * 0.9 * 2**30) // workload.bytes_per_token
    return candidates(workload, Space(buy=("gpu", "cpu"), points=14, max_gpu_tokens=max_gpu))[:CANDIDATES]


def run() -> dict[str, Any]:
    workload = _workload()
    cands = _candidates(workload)
    middle = cands[len(cands) // 2]
    anchor = runs(lambda: workload.evaluate(middle, None), 3)
    out: dict[str, Any] = {"candidates": len(cands), "workers": WORKERS, "cores": os.cpu_count()}
    results: dict[str, Any] = {}

    def local() -> None:
        with ProcessPoolExecutor(max_workers=WORKERS) as pool:
            results["local"] = evaluate_all(workload, cands, None, pool)

    out["local_workers"] = figure(runs(local, REPEATS), anchor, "one candidate's replay (Mooncake sample)")
    try:
        import ray
        from ray.util.multiprocessing import Pool
    except ImportError:
        out["ray"] = "skipped: Ray is not installed (pip install 'kvscope[cluster]')"
        return out
    ray.init(num_cpus=WORKERS, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        pool = Pool()

        def on_ray() -> None:
            results["ray"] = evaluate_all(workload, cands, None, pool)

        out["ray_local_cluster"] = figure(runs(on_ray, REPEATS), anchor, "one candidate's replay (Mooncake sample)")
        pool.close()
    finally:
        ray.shutdown()
    out["same_outcomes"] = results["ray"] == results["local"]
    return out
