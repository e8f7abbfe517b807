"""Trace replay and hit-ratio curves at scale: the bundled Mooncake sample, with libCacheSim's LRU beside kvscope's.

Each figure comes from a fresh process (``bench._trace_task``) so that peak
memory is the task's own. Times are the best of a few repeats, on one core.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import _libcachesim
from bench._timing import byte_compiled, command_runs, spread
from bench._trace_task import CPU_BLOCKS, CURVE_POINTS, GPU_BLOCKS
from bench.startup import KVSCOPE
from sim.traces.reader import DEFAULT_TRACE, bundled_trace_path, open_trace

CLI_REPEATS = 7

# libCacheSim's side of the whole-CLI comparison: a script that reads the flattened trace (converted beforehand,
# not timed) and runs its LRU at each of the curve's capacities.
LIBCACHESIM_SCRIPT = """
import sys
from pathlib import Path
from bench._libcachesim import lru_hit_ratios
capacities = [int(c) for c in sys.argv[3].split(",")]
print(lru_hit_ratios(Path(sys.argv[1]), capacities, int(sys.argv[2])))
"""


def _task(name: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench._trace_task", name], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _round(figures: dict[str, Any], keep: tuple[str, ...]) -> dict[str, Any]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items() if k in keep}


def run() -> dict[str, Any]:
    trace = open_trace(DEFAULT_TRACE).summary()
    timing = ("seconds", "block_lookups", "block_lookups_per_s", "hit_ratios", "peak_rss_mib", "peak_above_start_mib")
    gpu, gpu_cpu, gpu_cpu_brief = _task("replay_gpu"), _task("replay_gpu_cpu"), _task("replay_gpu_cpu_brief")
    end_to_end = _task("replay_end_to_end")
    curve, direct = _task("curve_kvscope"), _task("curve_direct_100")
    ours = [p["hit_ratio"] for p in curve["points"]]
    figures: dict[str, Any] = {
        "trace": {k: trace[k] for k in ("name", "requests", "block_references", "distinct_blocks", "sha256")},
        "tiers": {"gpu_blocks": GPU_BLOCKS, "cpu_blocks": CPU_BLOCKS, "block_tokens": 512},
        "replay_gpu": _round(gpu, timing),
        "replay_gpu_cpu": _round(gpu_cpu, timing),
        "replay_gpu_cpu_brief_backend": {
            **_round(gpu_cpu_brief, timing),
            "default_time_ratio_to_brief": round(gpu_cpu["seconds"] / gpu_cpu_brief["seconds"], 3),
        },
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
    compiled_curve = _task("curve_compiled")
    section["kvscope_one_pass_compiled"] = spread(compiled_curve["seconds_runs"])
    if _libcachesim.available() is None:
        section["libcachesim"] = "not installed (pip install 'kvscope[bench]')"
        return figures
    figures["replay_compiled_vs_libcachesim_lru"] = _versus_libcachesim()
    figures["curve_whole_cli_vs_libcachesim_script"] = _curve_cli_versus_script(trace["distinct_blocks"])
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


def _rate(figures: dict[str, Any]) -> dict[str, Any]:
    seconds = figures["seconds_runs"]
    refs = figures["block_references"]
    return {**spread(seconds, 5), "runs": len(seconds), "block_refs_per_s_median": round(refs / statistics.median(seconds))}


def _versus_libcachesim() -> dict[str, Any]:
    """kvscope's compiled replay against libCacheSim's LRU, on the same flattened block sequence, in block refs/s.

    Ours counts from the read trace to every request's outcome and TTFT (ids made dense, the loop, the columns);
    theirs is its C loop over the converted trace. Each side's median, several runs in one process each.
    """
    theirs = _rate(_task("lru_libcachesim"))
    out: dict[str, Any] = {"anchor_libcachesim_lru_gpu_blocks": {**theirs, "capacity_blocks": GPU_BLOCKS}}
    for name, task, target in (
        ("gpu", "replay_compiled_gpu", 0.5), ("gpu_cpu", "replay_compiled_gpu_cpu", 0.3),
        ("gpu_cpu_brief_backend", "replay_compiled_gpu_cpu_brief", 0.3),
    ):
        ours = _task(task)
        rate = _rate(ours)
        out[f"kvscope_{name}"] = {
            **rate,
            "engine": ours["engine"],
            "ratio_to_libcachesim_median": round(rate["block_refs_per_s_median"] / theirs["block_refs_per_s_median"], 3),
            "ratio_to_libcachesim_min_time": round(theirs["min_s"] / rate["min_s"], 3),
            "target_ratio": target,
        }
    return out


def _curve_cli_versus_script(distinct: int) -> dict[str, Any]:
    """``kvscope curve TRACE --json`` as a user runs it (a fresh process: start-up, reading, the curve, printing)
    against a fresh Python process running libCacheSim's LRU at the same 100 capacities (trace converted beforehand)."""
    from sim.analysis.stack_distance import curve_capacities

    capacities = ",".join(map(str, curve_capacities(distinct, CURVE_POINTS)))
    setup = byte_compiled()
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flat.oracleGeneral"
        _libcachesim.write_oracle_general(open_trace(DEFAULT_TRACE).block_stream(), path)
        for _ in range(CLI_REPEATS):  # alternated, so that both sides meet the same load on a shared machine
            ours += command_runs([KVSCOPE, "curve", DEFAULT_TRACE, "--json"], 1)
            theirs += command_runs([sys.executable, "-c", LIBCACHESIM_SCRIPT, str(path), str(distinct), capacities], 1)
    return {
        "trace": str(bundled_trace_path(DEFAULT_TRACE).name),
        **setup,
        "kvscope_curve_cli": {**spread(ours), "runs": len(ours)},
        "anchor_libcachesim_script_100_runs": {**spread(theirs), "runs": len(theirs)},
        "speedup_median": round(statistics.median(theirs) / statistics.median(ours), 2),
        "speedup_min": round(min(theirs) / min(ours), 2),
        "target_speedup": 10,
    }
