"""``kvscope fleet`` over the bundled Mooncake sample at its timestamps: 4 replicas, 5 routers, whole process, wall
time, beside the single-server ``kvscope replay --timed`` of the same sample and tiers (one replica's)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._timing import byte_compiled, command_runs, figure

KVSCOPE = str(Path(sys.executable).with_name("kvscope"))
TRACE = "mooncake-synthetic"
GPU_BLOCKS, CPU_BLOCKS, BLOCK_TOKENS = 2000, 20000, 512  # each replica's: the README's replay tiers
REPLICAS = 4
ROUTERS = ("round-robin", "vllm-dp", "affinity", "sglang", "llm-d")
FLEET_REPEATS, ANCHOR_REPEATS = 2, 3


def fleet_argv() -> list[str]:
    gpu_tokens = (GPU_BLOCKS + 1) * BLOCK_TOKENS  # as vLLM logs it: the null block in
    argv = [KVSCOPE, "fleet", "--trace", TRACE, "--replicas", str(REPLICAS), "--gpu-tokens", str(gpu_tokens),
            "--cpu-tokens", str(CPU_BLOCKS * BLOCK_TOKENS), "--no-save"]
    for name in ROUTERS:
        argv += ["--router", name]
    return argv


def run() -> dict[str, Any]:
    setup = byte_compiled()
    single = [KVSCOPE, "replay", TRACE, "--gpu-blocks", str(GPU_BLOCKS), "--cpu-blocks", str(CPU_BLOCKS), "--timed", "--no-save"]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KVSCOPE_DB": str(Path(tmp) / "runs.db")}  # never the user's runs database
        anchor = command_runs(single, ANCHOR_REPEATS, env)
        fleet = command_runs(fleet_argv(), FLEET_REPEATS, env)
    out = figure(fleet, anchor, " ".join(["kvscope", *single[1:]]))
    # 5 routers x 4 replicas serve the sample 5 times over (each router a fresh fleet), plus the pooled bound's
    # sequential replay: the ratio over 5 is the fleet's cost per router beside one server's.
    out["ratio_per_router_min"] = round(out["ratio_to_anchor_min"] / len(ROUTERS), 2)
    return {**setup, "command": " ".join(["kvscope", *fleet_argv()[1:]]), "fleet_4_replicas_5_routers": out}
