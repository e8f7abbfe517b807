"""Trace replay and hit-ratio curves at scale: the bundled Mooncake sample, with libCacheSim's LRU beside kvscope's.

Each figure comes from a fresh process (``bench._trace_task``) so that peak
memory is the task's own. Times are the best of a few repeats, on one core.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from bench import _libcachesim
from bench._trace_task import CPU_BLOCKS, CURVE_POINTS, GPU_BLOCKS
from sim.trace import DEFAULT_TRACE, open_trace


def _task(name: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench._trace_task", name], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _round(figures: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items() if k in keep}


def run() -> dict[str, Any]:
    trace = open_trace(DEFAULT_TRACE).summary()
    timing = ("seconds", "block_lookups", "block_lookups_per_s", "hit_ratios", "peak_rss_mib", "peak_above_start_mib")
    gpu, gpu_cpu = _task("replay_gpu"), _task("replay_gpu_cpu")
    end_to_end = _task("replay_end_to_end")
    curve, direct = _task("curve_kvscope"), _task("curve_direct_100")
    ours = [p["hit_ratio"] for p in curve["points"]]
    figures: dict[str, Any] = {
        "trace": {k: trace[k] for k in ("name", "requests", "block_references", "distinct_blocks", "sha256")},
        "tiers": {"gpu_blocks": GPU_BLOCKS, "cpu_blocks": CPU_BLOCKS, "block_tokens": 512},
        "replay_gpu": _round(gpu, timing),
        "replay_gpu_cpu": _round(gpu_cpu, timing),
        "block_lookups_target_per_s": 1_000_000,
        "replay_whole_sample_gpu_cpu": {
            "seconds": round(end_to_end["seconds"], 4),
            "includes": "reading and parsing the file, replaying, building the JSON-able result",
            "target_seconds": 1.0,
            "peak_above_start_mib": round(end_to_end["peak_above_start_mib"], 1),
        },
        "lru_curve_100_capacities": {
            "kvscope_one_pass_s": round(curve["seconds"], 4),
            "kvscope_one_pass_peak_above_start_mib": round(curve["peak_above_start_mib"], 1),
            "kvscope_100_direct_simulations_s": round(direct["seconds"], 3),
            "kvscope_100_direct_peak_above_start_mib": round(direct["peak_above_start_mib"], 1),
            "direct_equals_one_pass": direct["hit_ratios"] == ours,
        },
    }
    section = figures["lru_curve_100_capacities"]
    if _libcachesim.available() is None:
        section["libcachesim"] = "not installed (pip install 'kvscope[bench]')"
        return figures
    theirs = _task("curve_libcachesim_100")
    section.update(
        libcachesim_version=theirs["version"],
        libcachesim_100_simulations_s=round(theirs["seconds"], 4),
        libcachesim_peak_above_start_mib=round(theirs["peak_above_start_mib"], 1),
        libcachesim_trace_conversion_s=round(theirs["trace_conversion_s"], 4),
        libcachesim_hashpower=theirs["hashpower"],
        max_abs_diff_vs_libcachesim=max(abs(a - b) for a, b in zip(ours, theirs["hit_ratios"])),
        speedup_over_libcachesim=round(theirs["seconds"] / curve["seconds"], 2),
        speedup_over_direct=round(direct["seconds"] / curve["seconds"], 2),
        points=CURVE_POINTS,
    )
    return figures
