"""A day of traffic: ~13 M block references (the Mooncake sample x110, fresh ids) replayed and curved by the CLI.

Each figure is a fresh ``kvscope`` process as a user runs it (start-up,
reading and checking the 150 MB file, the work, the output), with its wall
time and peak resident memory (the kernel's ``ru_maxrss``). Anchors measured
in the same run: ``python -c pass``, and libCacheSim's LRU over the same
flattened block sequence (one run at the GPU's capacity; for the curve, runs
at 3 of the curve's 100 capacities, low, middle and high, scaled by 100/3 to
estimate its 100 runs, because 100 full runs take about 15 minutes here).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import _libcachesim
from bench._big_trace import write_big_trace
from bench._timing import command_runs, command_with_rss, spread
from bench._trace_task import CPU_BLOCKS, CURVE_POINTS, GPU_BLOCKS
from bench.startup import KVSCOPE
from bench.trace import byte_compiled

REPEATS = 3

LIBCACHESIM_RUNS = """
import json, sys
from pathlib import Path
from bench._libcachesim import lru_seconds
path, distinct = Path(sys.argv[1]), int(sys.argv[2])
print(json.dumps([lru_seconds(path, int(c), distinct, 1)[0] for c in sys.argv[3].split(",")]))
"""


def _cli(argv: list[str], repeats: int = REPEATS) -> dict[str, Any]:
    results = [command_with_rss(argv) for _ in range(repeats)]
    seconds = [r[0] for r in results]
    return {**spread(seconds, 2), "runs": repeats, "peak_rss_mib_max": round(max(r[1] for r in results))}


def _libcachesim_anchor(trace_path: Path) -> dict[str, Any]:
    import json
    import subprocess

    from sim.analysis.curve import trace_stream
    from sim.analysis.stack_distance import curve_capacities
    from sim.traces.reader import distinct_count, read_trace

    trace = read_trace(trace_path)
    distinct = distinct_count(trace.hash_ids)
    capacities = curve_capacities(distinct, CURVE_POINTS)[16::33]  # 3 of the 100: the 17th, 50th and 83rd
    with tempfile.TemporaryDirectory() as tmp:
        flat = Path(tmp) / "flat.oracleGeneral"
        _libcachesim.write_oracle_general(trace_stream(trace), flat)
        del trace
        one = json.loads(subprocess.run(
            [sys.executable, "-c", LIBCACHESIM_RUNS, str(flat), str(distinct), ",".join([str(GPU_BLOCKS)] * REPEATS)],
            capture_output=True, text=True, check=True,
        ).stdout)
        some = json.loads(subprocess.run(
            [sys.executable, "-c", LIBCACHESIM_RUNS, str(flat), str(distinct), ",".join(map(str, capacities))],
            capture_output=True, text=True, check=True,
        ).stdout)
    return {
        "lru_one_run_gpu_blocks": spread(one, 2),
        "lru_3_capacities": dict(zip(map(str, capacities), [round(s, 2) for s in some])),
        "lru_100_runs_estimated_s": round(sum(some) * 100 / len(some), 1),
        "distinct_blocks": distinct,
    }


def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mooncake_x110.jsonl"
        trace = write_big_trace(path)
        setup = byte_compiled()
        anchor = command_runs([sys.executable, "-c", "pass"], 5)
        replay = [KVSCOPE, "replay", str(path), "--gpu-blocks", str(GPU_BLOCKS)]
        figures: dict[str, Any] = {
            "trace": trace,
            **setup,
            "anchor_python_pass": spread(anchor),
            "replay_gpu": _cli(replay),
            "replay_gpu_cpu": _cli([*replay, "--cpu-blocks", str(CPU_BLOCKS)]),
            "replay_gpu_cpu_json_to_devnull": _cli([*replay, "--cpu-blocks", str(CPU_BLOCKS), "--json"], 1),
            # Without the miss causes (compiled either way, the records streamed): what the causes add.
            "replay_gpu_cpu_json_no_explain_to_devnull": _cli(
                [*replay, "--cpu-blocks", str(CPU_BLOCKS), "--json", "--no-explain"], 1
            ),
            "curve": _cli([KVSCOPE, "curve", str(path), "--json"]),
            "targets": {"replay_s": 15, "replay_peak_rss_mib": 1024, "curve_s": 10, "curve_speedup_over_libcachesim_100": 10},
        }
        if _libcachesim.available() is not None:
            theirs = _libcachesim_anchor(path)
            figures["anchor_libcachesim"] = theirs
            one = theirs["lru_one_run_gpu_blocks"]["median_s"]
            for name in ("replay_gpu", "replay_gpu_cpu"):
                figures[name]["ratio_to_one_libcachesim_lru_run_median"] = round(figures[name]["median_s"] / one, 2)
            # The whole process's speed as a fraction of one libCacheSim LRU run over the same ids (target >= 0.5).
            lru = theirs["lru_one_run_gpu_blocks"]
            figures["replay_gpu"]["speed_vs_libcachesim_lru"] = {
                "median": round(one / figures["replay_gpu"]["median_s"], 2),
                "min": round(lru["min_s"] / figures["replay_gpu"]["min_s"], 2), "target": 0.5,
            }
            figures["curve"]["speedup_over_libcachesim_100_runs_estimated"] = round(
                theirs["lru_100_runs_estimated_s"] / figures["curve"]["median_s"], 1
            )
    return figures
