"""The vLLM flags and LMCache settings the advisor prints, each with where its owner defines it, and the command lines built from them."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from sim.sched.config import SchedulerConfig
from sim.tiers.native import NATIVE_POLICY_NAMES
from sim.tiers.policies import POLICIES


@dataclass(frozen=True, slots=True)
class Name:
    """A flag or setting and the source line that defines it (checked by tests against the unpacked sources)."""

    name: str
    source: str  # path inside the owner's package
    line: int


# vLLM 0.x (the wheel in the reference set): vllm/engine/arg_utils.py adds each flag to its parser.
VLLM_FLAGS: dict[str, Name] = {
    "tensor_parallel_size": Name("--tensor-parallel-size", "vllm/engine/arg_utils.py", 1209),
    "block_size": Name("--block-size", "vllm/engine/arg_utils.py", 1387),
    "gpu_memory_utilization": Name("--gpu-memory-utilization", "vllm/engine/arg_utils.py", 1389),
    "kv_cache_memory_bytes": Name("--kv-cache-memory-bytes", "vllm/engine/arg_utils.py", 1395),
    "kv_cache_dtype": Name("--kv-cache-dtype", "vllm/engine/arg_utils.py", 1397),
    "kv_offloading_size": Name("--kv-offloading-size", "vllm/engine/arg_utils.py", 1453),
    "kv_offloading_backend": Name("--kv-offloading-backend", "vllm/engine/arg_utils.py", 1456),
    "kv_transfer_config": Name("--kv-transfer-config", "vllm/engine/arg_utils.py", 1881),
    "max_num_batched_tokens": Name("--max-num-batched-tokens", "vllm/engine/arg_utils.py", 1740),
    "max_num_seqs": Name("--max-num-seqs", "vllm/engine/arg_utils.py", 1754),
    "long_prefill_token_threshold": Name("--long-prefill-token-threshold", "vllm/engine/arg_utils.py", 1772),
    "enable_chunked_prefill": Name("--enable-chunked-prefill", "vllm/engine/arg_utils.py", 1785),
    "scheduler_reserve_full_isl": Name("--scheduler-reserve-full-isl", "vllm/engine/arg_utils.py", 1798),
    "async_scheduling": Name("--async-scheduling", "vllm/engine/arg_utils.py", 1811),
}
# The scheduler's boolean fields are argparse.BooleanOptionalAction flags (vllm/engine/arg_utils.py:384-386): each
# also has its --no-<name> form, which is how a command turns off what vllm serve turns on.
VLLM_BOOLEAN_ACTION = Name("BooleanOptionalAction", "vllm/engine/arg_utils.py", 386)
# vllm/config/cache.py:383-392: kv_offloading_size is GiB for the whole replica ("native" turns it into
# cpu_bytes_to_use = size * 2**30, vllm/config/vllm.py:1167-1175, which vllm/v1/kv_offload/cpu/spec.py:111-123
# spreads over world_size copies of each block: the total, not per rank).
VLLM_NATIVE_BACKEND = Name("native", "vllm/config/cache.py", 178)
# The offload's eviction policy is a key of --kv-transfer-config's kv_connector_extra_config, read by
# vllm/v1/kv_offload/cpu/spec.py:142 with "lru" the default; there is no flag for it. With only
# --kv-offloading-backend/--kv-offloading-size, vllm/config/vllm.py:1163-1175 builds the transfer config and
# *updates* its extra config with cpu_bytes_to_use, so a --kv-transfer-config carrying only
# {"kv_connector_extra_config": {"eviction_policy": ...}} keeps the policy (and sets no kv_connector, which
# vllm/config/kv_transfer.py:120-124 would require a kv_role for; vllm.py:1172 and 1185 set both).
VLLM_EVICTION_POLICY = Name("eviction_policy", "vllm/v1/kv_offload/cpu/spec.py", 142)
VLLM_DEFAULT_EVICTION_POLICY = "lru"  # vllm/v1/kv_offload/cpu/spec.py:142
# LMCache's cache_policy default, "LRU" (lmcache/v1/config.py:401-403): kvscope's lru.
LMCACHE_DEFAULT_POLICY = Name("LRU", "lmcache/v1/config.py", 403)
# "arc", the one other policy vLLM registers (vllm/v1/kv_offload/cpu/policies/factory.py:89-91).
VLLM_ARC_POLICY = Name("arc", "vllm/v1/kv_offload/cpu/policies/factory.py", 90)
# The connector LMCache registers with vLLM (vllm/distributed/kv_transfer/kv_connector/factory.py:166).
LMCACHE_CONNECTOR = Name("LMCacheConnectorV1", "vllm/distributed/kv_transfer/kv_connector/factory.py", 166)

# LMCache: lmcache/v1/config.py's _CONFIG_DEFINITIONS; each is read from the env as LMCACHE_<NAME upper>
# (get_env_name, lmcache/v1/config.py:1002-1003). max_local_cpu_size is in GB per LMCache engine, and every
# tensor-parallel rank runs its own engine: the size is per rank.
LMCACHE_POLICY_NAMES = tuple(p.lmcache_name for p in POLICIES.values() if p.lmcache_name)
LMCACHE_SETTINGS: dict[str, Name] = {
    "chunk_size": Name("chunk_size", "lmcache/v1/config.py", 90),
    "local_cpu": Name("local_cpu", "lmcache/v1/config.py", 91),
    "max_local_cpu_size": Name("max_local_cpu_size", "lmcache/v1/config.py", 96),
    "local_disk": Name("local_disk", "lmcache/v1/config.py", 103),
    "max_local_disk_size": Name("max_local_disk_size", "lmcache/v1/config.py", 113),
    "cache_policy": Name("cache_policy", "lmcache/v1/config.py", 401),
}


def default_policy(backend: str) -> str:
    """The offload policy (kvscope's name) the backend's engine runs unless told otherwise: vLLM's offloading its
    ``lru``; LMCache (and the brief rules, its simplification) its ``LRU``."""
    if backend == "vllm-native":
        return VLLM_DEFAULT_EVICTION_POLICY
    return next(name for name, p in POLICIES.items() if p.lmcache_name == LMCACHE_DEFAULT_POLICY.name)


def lmcache_env(setting: str) -> str:
    """The environment variable LMCache reads a setting from (lmcache/v1/config.py:1002-1003)."""
    return f"LMCACHE_{LMCACHE_SETTINGS[setting].name.upper()}"


def scheduler_args(config: SchedulerConfig) -> list[str]:
    """The scheduler settings the simulation assumed, as ``vllm serve`` flags: the budget and sequence limit always
    (``vllm serve`` would otherwise pick them by the GPU, arg_utils.py 2973-3005), the threshold when set, and each
    boolean that differs from what ``vllm serve`` resolves: chunked prefill and full-prompt reservation are on there,
    asynchronous scheduling too (vllm/config/vllm.py 1685-1719), which kvscope does not model, so it is turned off."""
    f = VLLM_FLAGS
    args = [f["max_num_batched_tokens"].name, str(config.max_num_batched_tokens), f["max_num_seqs"].name, str(config.max_num_seqs)]
    if config.long_prefill_token_threshold:
        args += [f["long_prefill_token_threshold"].name, str(config.long_prefill_token_threshold)]
    for field, served in (("enable_chunked_prefill", True), ("scheduler_reserve_full_isl", True), ("async_scheduling", True)):
        if getattr(config, field) != served:
            args.append(f[field].name if getattr(config, field) else "--no-" + f[field].name.removeprefix("--"))
    return args


def _gib(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def vllm_native(model: str, tp: int, block_size: int, gpu_kv_bytes: int, cpu_gib_total: float | None,
                kv_cache_dtype: str = "auto", policy: str = VLLM_DEFAULT_EVICTION_POLICY,
                scheduler: SchedulerConfig = SchedulerConfig()) -> str:
    """``vllm serve`` with vLLM's own CPU offload; ``--kv-offloading-size`` is the replica's total GiB.

    ``--kv-cache-memory-bytes`` is per GPU and overrides ``--gpu-memory-utilization``
    (vllm/config/cache.py:374-381), so the GPU tier's size is given exactly. A CPU policy other than
    vLLM's default goes in ``--kv-transfer-config``; one vLLM does not ship gets a sentence, not a command
    (vLLM would raise ValueError, vllm/v1/kv_offload/cpu/policies/factory.py:63-67).
    """
    f = VLLM_FLAGS
    args = ["vllm", "serve", model, f["tensor_parallel_size"].name, str(tp),
            f["block_size"].name, str(block_size), f["kv_cache_memory_bytes"].name, str(gpu_kv_bytes)]
    if kv_cache_dtype != "auto":
        args += [f["kv_cache_dtype"].name, kv_cache_dtype]
    args += scheduler_args(scheduler)
    if cpu_gib_total:
        if policy not in NATIVE_POLICY_NAMES:
            return f"vLLM 0.33's offloading has no {policy} eviction policy (only {', '.join(NATIVE_POLICY_NAMES)}): this configuration is a what-if"
        args += [f["kv_offloading_backend"].name, VLLM_NATIVE_BACKEND.name, f["kv_offloading_size"].name, _gib(cpu_gib_total)]
        if policy != VLLM_DEFAULT_EVICTION_POLICY:
            extra = {"kv_connector_extra_config": {VLLM_EVICTION_POLICY.name: policy}}
            args += [f["kv_transfer_config"].name, json.dumps(extra, separators=(",", ":"))]
    return shlex.join(args)


def lmcache(model: str, tp: int, block_size: int, gpu_kv_bytes: int, chunk_size: int,
            cpu_gib_per_rank: float | None, disk_gib_per_rank: float | None, policy: str, kv_cache_dtype: str = "auto",
            scheduler: SchedulerConfig = SchedulerConfig()) -> str:
    """LMCache's environment and ``vllm serve`` with its connector; sizes are per tensor-parallel rank. A CPU
    policy LMCache does not ship gets no command (it would not start), but a sentence saying so."""
    env = {lmcache_env("chunk_size"): str(chunk_size)}
    if cpu_gib_per_rank:
        name = POLICIES[policy].lmcache_name
        if name is None:
            return f"LMCache 0.5.6 has no {policy} cache policy (only {', '.join(LMCACHE_POLICY_NAMES)}): this configuration is a what-if"
        env[lmcache_env("local_cpu")] = "True"
        env[lmcache_env("max_local_cpu_size")] = _gib(cpu_gib_per_rank)
        env[lmcache_env("cache_policy")] = name
    if disk_gib_per_rank:
        env[lmcache_env("local_disk")] = "file:///tmp/lmcache/"
        env[lmcache_env("max_local_disk_size")] = _gib(disk_gib_per_rank)
    f = VLLM_FLAGS
    transfer = json.dumps({"kv_connector": LMCACHE_CONNECTOR.name, "kv_role": "kv_both"}, separators=(",", ":"))
    args = ["vllm", "serve", model, f["tensor_parallel_size"].name, str(tp),
            f["block_size"].name, str(block_size), f["kv_cache_memory_bytes"].name, str(gpu_kv_bytes)]
    if kv_cache_dtype != "auto":
        args += [f["kv_cache_dtype"].name, kv_cache_dtype]
    args += scheduler_args(scheduler)
    args += [f["kv_transfer_config"].name, transfer]
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(args)
