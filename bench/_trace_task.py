"""One trace benchmark task in a fresh process (``python -m bench._trace_task TASK``), so its peak memory is its own.

Prints JSON: the best time of a few repeats and the task's peak resident memory
above what the process held before it (the interpreter, imports and the
trace already read). The peak is the kernel's high-water mark (``VmHWM``),
reset just before the task, so it sees C allocations (libCacheSim's) as well
as Python's, and not the reading of the trace.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _libcachesim
from bench._timing import runs
from sim.analysis.curve import curve_points
from sim.analysis.stack_distance import curve_capacities, lru_hits, stack_profile
from sim.costs.model import default_costs
from sim.engine import compiled
from sim.simulation.replay import ReplayOutcome, ReplayTiers, replay, replay_engine, run_replay, trace_requests
from sim.traces.reader import DEFAULT_TRACE, bundled_trace_path, read_trace

GPU_BLOCKS = 2_000  # 1.0M tokens of 512-token blocks
CPU_BLOCKS = 20_000  # 10x the GPU
CURVE_POINTS = 100
REPEATS = 7


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for row in f:
            if row.startswith(field + ":"):
                return int(row.split()[1])
    raise KeyError(field)


def _reset_high_water() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def _replay(trace: Any, tiers: ReplayTiers) -> dict[str, Any]:
    requests = trace_requests(trace, tiers.chunk_blocks)

    def run() -> Any:
        return replay_engine(trace, tiers).run_all(requests)

    seconds, records = _timed(run, 5)
    rows = ReplayOutcome.from_records(trace, tiers, default_costs(), records).tier_hits()
    lookups = rows[0]["lookup_blocks"]
    return {
        "seconds": seconds,
        "block_lookups": lookups,
        "block_lookups_per_s": lookups / seconds,
        "hit_ratios": {r["name"]: r["hit_ratio"] for r in rows},
    }


def _replay_compiled(trace: Any, tiers: ReplayTiers) -> dict[str, Any]:
    """From the read trace to every request's outcome and TTFT, through the compiled loop (its code loaded first)."""
    os.environ[compiled.ENGINE_ENV] = "compiled"
    run_replay(trace, tiers)  # loads numba and the cached machine code: not part of a replay
    seconds = runs(lambda: run_replay(trace, tiers), REPEATS)
    outcome = run_replay(trace, tiers)
    return {"seconds_runs": seconds, "block_references": trace.total_blocks, "engine": outcome.engine,
            "hit_ratios": {r["name"]: r["hit_ratio"] for r in outcome.tier_hits()}}


def _libcachesim_lru(stream: Any) -> dict[str, Any]:
    """libCacheSim's LRU of ``GPU_BLOCKS`` blocks over the same flattened block sequence (its C loop alone)."""
    distinct = len(set(stream))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flat.oracleGeneral"
        _libcachesim.write_oracle_general(stream, path)
        seconds = _libcachesim.lru_seconds(path, GPU_BLOCKS, distinct, REPEATS)
    return {"seconds_runs": seconds, "block_references": len(stream), "version": _libcachesim.available()}


def _end_to_end(path: Path) -> dict[str, Any]:
    def run() -> Any:
        return replay(read_trace(path), ReplayTiers(GPU_BLOCKS, CPU_BLOCKS))

    seconds, result = _timed(run, 3)
    return {"seconds": seconds, "requests": len(result["requests"])}


def _curve(stream: list[int]) -> dict[str, Any]:
    seconds, points = _timed(lambda: curve_points(stack_profile(stream), CURVE_POINTS), 3)
    return {"seconds": seconds, "points": points}


def _curve_compiled(stream: Any) -> dict[str, Any]:
    os.environ[compiled.ENGINE_ENV] = "compiled"
    curve_points(stack_profile(stream), CURVE_POINTS)  # loads numba and the cached machine code
    return {"seconds_runs": runs(lambda: curve_points(stack_profile(stream), CURVE_POINTS), REPEATS)}


def _direct(stream: list[int]) -> dict[str, Any]:
    capacities = curve_capacities(len(set(stream)), CURVE_POINTS)
    seconds, hits = _timed(lambda: [lru_hits(stream, c) for c in capacities], 1)
    return {"seconds": seconds, "hit_ratios": [h / len(stream) for h in hits]}


def _libcachesim_curve(stream: list[int]) -> dict[str, Any]:
    distinct = len(set(stream))
    capacities = curve_capacities(distinct, CURVE_POINTS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flat.oracleGeneral"
        started = time.perf_counter()
        _libcachesim.write_oracle_general(stream, path)
        convert_s = time.perf_counter() - started
        seconds, ratios = _timed(lambda: _libcachesim.lru_hit_ratios(path, capacities, distinct), 3)
    return {
        "seconds": seconds,
        "trace_conversion_s": convert_s,
        "hit_ratios": ratios,
        "hashpower": _libcachesim.hashpower_for(distinct),
        "version": _libcachesim.available(),
    }


def main(task: str) -> dict[str, Any]:
    path = bundled_trace_path(DEFAULT_TRACE)
    trace = read_trace(path)
    stream = trace.block_stream()
    default_costs()  # the one-off seed fit is not part of a replay
    tasks: dict[str, Callable[[], dict[str, Any]]] = {
        "replay_gpu": lambda: _replay(trace, ReplayTiers(GPU_BLOCKS)),
        "replay_gpu_cpu": lambda: _replay(trace, ReplayTiers(GPU_BLOCKS, CPU_BLOCKS)),
        "replay_end_to_end": lambda: _end_to_end(path),
        "curve_kvscope": lambda: _curve(stream),
        "curve_direct_100": lambda: _direct(stream),
        "curve_libcachesim_100": lambda: _libcachesim_curve(stream),
        "replay_compiled_gpu": lambda: _replay_compiled(trace, ReplayTiers(GPU_BLOCKS)),
        "replay_compiled_gpu_cpu": lambda: _replay_compiled(trace, ReplayTiers(GPU_BLOCKS, CPU_BLOCKS)),
        # The seed brief's CPU rules beside the default (LMCache's), to show what the default costs.
        "replay_gpu_cpu_brief": lambda: _replay(trace, ReplayTiers(GPU_BLOCKS, CPU_BLOCKS, cpu_backend="brief")),
        "replay_compiled_gpu_cpu_brief": lambda: _replay_compiled(trace, ReplayTiers(GPU_BLOCKS, CPU_BLOCKS, cpu_backend="brief")),
        "lru_libcachesim": lambda: _libcachesim_lru(stream),
        "curve_compiled": lambda: _curve_compiled(stream),
    }
    before_kib = _status_kib("VmRSS")
    _reset_high_water()
    figures = tasks[task]()
    peak_kib = _status_kib("VmHWM")
    figures["peak_rss_mib"] = peak_kib / 1024
    figures["peak_above_start_mib"] = max(0, peak_kib - before_kib) / 1024
    return figures


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
