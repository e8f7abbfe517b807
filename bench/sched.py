"""vLLM's scheduler loop (sim.sched) against the sequential engine, and traces sent at their timestamps.

In one run, as ratios: the stepped engine at concurrency 1 against the
sequential engine on the same requests (the seed lab, its step ledger kept as
``simulate`` keeps it; the Mooncake sample's requests as the sequential replay
has them, one output token each, without the ledger as ``replay`` runs unless
``--steps`` asks for it), each side
alternated over several runs; the Mooncake sample with its timestamps and its
output tokens (``kvscope replay --timed``) as a user runs it, a fresh process,
beside ``python -c pass``; and the 13.4 M-reference synthetic day
(``bench._big_trace``) with its timestamps, one fresh process with its peak
resident memory (under a raised CLI budget: the estimate refuses it otherwise).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._big_trace import write_big_trace
from bench._timing import byte_compiled, command_runs, command_with_rss, spread
from bench._trace_task import CPU_BLOCKS, GPU_BLOCKS
from bench.startup import KVSCOPE

REPEATS = 5
DAY_BUDGET = "work=100000000000,memory=100000000000"  # the day's estimate is over the CLI's default budget
DAY_TIMEOUT_S = 900
DAY_MEMORY_CAP_BYTES = 6 * 2**30  # address space: numba's LLVM reserves some beyond what it touches
SEED_LAB_INNER = 20  # one seed lab takes ~20 ms


def _alternated(ours: Callable[[], Any], anchor: Callable[[], Any], repeats: int = REPEATS, inner: int = 1) -> dict[str, Any]:
    """Both timed in turn, so that each meets the same load on a shared machine (each timing ``inner`` calls, for a
    call too short to time alone); min and median of each, and their ratios."""
    a: list[float] = []
    b: list[float] = []
    for _ in range(repeats):
        for side, fn in ((a, ours), (b, anchor)):
            started = time.perf_counter()
            for _ in range(inner):
                fn()
            side.append(time.perf_counter() - started)
    return {
        "stepped": {**spread(a), "runs": repeats},
        "sequential": {**spread(b), "runs": repeats},
        "ratio_min": round(min(a) / min(b), 2),
        "ratio_median": round(statistics.median(a) / statistics.median(b), 2),
        "target_ratio": 1.5,
    }


def _seed_lab() -> dict[str, Any]:
    from sim.calibration.calibrate import seed_scenario
    from sim.costs.model import default_costs
    from sim.engine.loop import Engine
    from sim.sched.stepped import SteppedEngine
    from sim.simulation.run import tier_spec
    from sim.workloads.requests import build_requests

    scenario = seed_scenario()
    requests = build_requests(scenario)
    costs = default_costs()

    def engines() -> list[Engine]:
        return [Engine(name, tier_spec(scenario, name), costs) for name in scenario.run_names]

    figures = _alternated(
        lambda: [SteppedEngine(e).run(requests) for e in engines()], lambda: [e.run_all(requests) for e in engines()],
        inner=SEED_LAB_INNER,
    )
    return {"calls_per_timing": SEED_LAB_INNER, **figures}


def _mooncake_sample() -> dict[str, Any]:
    from sim.sched.stepped import SteppedEngine
    from sim.simulation.replay import ReplayTiers, replay_engine, trace_requests
    from sim.traces.reader import DEFAULT_TRACE, open_trace

    trace = open_trace(DEFAULT_TRACE)
    tiers = ReplayTiers(GPU_BLOCKS, CPU_BLOCKS, 1, "lmcache", ())
    requests = trace_requests(trace, tiers.chunk_blocks)
    figures = _alternated(
        lambda: SteppedEngine(replay_engine(trace, tiers, None)).run(requests, ledger=False),
        lambda: replay_engine(trace, tiers, None).run_all(list(requests)),
    )
    return {"tiers": {"gpu_blocks": GPU_BLOCKS, "cpu_blocks": CPU_BLOCKS}, **figures}


def _sample_timed() -> dict[str, Any]:
    argv = [KVSCOPE, "replay", "mooncake-synthetic", "--gpu-blocks", str(GPU_BLOCKS), "--cpu-blocks", str(CPU_BLOCKS),
            "--timed", "--no-save"]
    ours: list[float] = []
    anchor: list[float] = []
    for _ in range(REPEATS):
        ours += command_runs(argv, 1)
        anchor += command_runs([sys.executable, "-c", "pass"], 1)
    return {
        "command": " ".join(["kvscope", *argv[1:]]),
        **spread(ours, 3), "runs": REPEATS, "anchor_python_pass": spread(anchor, 3),
        "target_s": 2.0, "meets_target_median": statistics.median(ours) < 2.0,
    }


def _day_timed() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mooncake_x110.jsonl"
        trace = write_big_trace(path)
        # Capped (prlimit) so that a run holding too much fails alone rather than swapping a shared machine.
        argv = ["prlimit", f"--as={DAY_MEMORY_CAP_BYTES}", "timeout", str(DAY_TIMEOUT_S), KVSCOPE, "replay", str(path),
                "--gpu-blocks", str(GPU_BLOCKS), "--timed", "--no-save"]
        try:
            seconds, rss = command_with_rss(argv, env={**os.environ, "KVSCOPE_CLI_BUDGET": DAY_BUDGET})
        except RuntimeError as exc:
            return {"trace": trace, "not_done": f"{exc}"[-300:], "timeout_s": DAY_TIMEOUT_S,
                    "address_space_cap_gib": DAY_MEMORY_CAP_BYTES / 2**30, "target_s": 60, "target_peak_rss_mib": 1024}
    return {
        "trace": trace, "seconds": round(seconds, 1), "runs": 1, "peak_rss_mib": round(rss),
        "target_s": 60, "target_peak_rss_mib": 1024, "meets_targets": seconds < 60 and rss < 1024,
    }


def run() -> dict[str, Any]:
    return {
        **byte_compiled(),
        "stepped_concurrency_1_vs_sequential_seed_lab": _seed_lab(),
        "stepped_concurrency_1_vs_sequential_mooncake_sample": _mooncake_sample(),
        "mooncake_sample_timed_whole_process": _sample_timed(),
        "day_13m_references_timed_whole_process": _day_timed(),
    }
