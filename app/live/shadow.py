"""The shadow simulation of a live target: the same scenario, simulated with what the server says about itself.

The GPU tier takes the server's ``num_gpu_blocks x block_size`` from
``vllm:cache_config_info``. A CPU tier is taken from the connector
configuration vLLM reports there (``kv_offloading_size`` GiB, when offloading
is configured through ``--kv-offloading-size``). A connector given with
``--kv-transfer-config`` is not reported, so otherwise a target has a CPU tier
when its name says so (``gpu+cpu``), sized by the scenario. The external
prefix counters' presence says nothing: vLLM exports them (as 0) without a
connector too. ``kvscope emulate`` says exactly
what it emulates (``/kvscope/emulator``): its GPU, CPU and chunk sizes, its
cost model and its speed, so the shadow predicts its TTFTs at its own scale.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from app.live.client import TargetInfo
from app.live.targets import Target
from sim.costs.model import CostModel, default_costs
from sim.engine.loop import Engine
from sim.explain.observer import attach
from sim.simulation.run import tier_spec
from sim.tiers.native import backend_runs
from sim.workloads.scenario import Scenario

_OFFLOAD_FIELDS = ("cpu_gb", "cpu_tokens", "disk_gb", "disk_tokens")


class ShadowError(ValueError):
    """The scenario cannot run on this target (e.g. its prompts do not fit the server's GPU cache)."""


def shadow_scenario(base: Scenario, target: Target, info: TargetInfo, output_tokens: int | None = None) -> Scenario:
    """``base`` with the target's GPU size and block size, and its CPU tier (or none); with ``output_tokens``, each
    request generating what the client asks for (``max_tokens``, with ``ignore_eos``)."""
    changes: dict[str, Any] = {}
    if output_tokens is not None and base.granularity != "doc":  # whole documents cache no generated token
        # The tokens decoded after the prompt fill the request's last block and may take one more: a prefix of the
        # LRU order shifts by that block (4 tokens on the seed lab's 5,024: 315 blocks held, not 314).
        changes.update(output_tokens=output_tokens)
    if info.capacity_tokens is not None and info.block_size is not None:
        changes.update(gpu_tokens=info.capacity_tokens, block_size=info.block_size)
    emulator = info.emulator
    if emulator is not None:
        changes.update(dict.fromkeys(_OFFLOAD_FIELDS))
        changes.update(cpu_tokens=emulator.get("cpu_tokens"), chunk_size=emulator.get("chunk_size", base.chunk_size))
    elif info.offload.configured:
        changes.update(dict.fromkeys(_OFFLOAD_FIELDS))
        changes.update(cpu_gb=info.offload.size_gb)
        if info.offload.backend == "native":
            # vLLM's own connector (config/vllm.py 1167-1175): its rules, its default policy unless the scenario's is
            # one it offers, and nothing behind the CPU.
            changes.update(cpu_backend="vllm-native", save_unfull_chunk=False, storage_tiers=[])
            if not backend_runs("vllm-native", base.cpu_policy, False):
                changes.update(cpu_policy="lru")
    elif not target.has_cpu_tier_name:
        changes.update(dict.fromkeys(_OFFLOAD_FIELDS))
    else:
        changes.update(disk_gb=None, disk_tokens=None)
    try:
        return base.replace(**changes)
    except ValidationError as exc:
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise ShadowError(f"target {target.name}: the scenario does not fit this server: {problems}") from None


def shadow_costs(base: Scenario, info: TargetInfo) -> CostModel:
    """The scenario's costs; for an emulator, its own costs at its own speed."""
    emulator = info.emulator
    if emulator is not None and isinstance(emulator.get("costs"), dict):
        try:
            costs = CostModel(**emulator["costs"])
            return costs.scaled(1 / float(emulator.get("speed") or 1.0))
        except (ValidationError, TypeError, ValueError, ZeroDivisionError):
            pass
    return base.costs or default_costs()


def shadow_engine(
    base: Scenario, target: Target, info: TargetInfo, output_tokens: int | None = None,
) -> tuple[Scenario, Engine]:
    """The shadow's scenario and its engine, whose run is named after the target; its records explain misses."""
    scenario = shadow_scenario(base, target, info, output_tokens)
    run = "gpu+cpu" if scenario.cpu_capacity_tokens is not None else "gpu"
    engine = Engine(target.name, tier_spec(scenario, run), shadow_costs(base, info))
    attach(engine)
    return scenario, engine
