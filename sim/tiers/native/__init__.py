"""vLLM's native CPU offloading (its OffloadingConnector with CPUOffloadingSpec), as a serial simulation: policies and tier.

vLLM 0.33's ``CachePolicyFactory`` registers two policies, ``lru`` and ``arc``
(``vllm/v1/kv_offload/cpu/policies/factory.py`` 86-91); ``NATIVE_POLICIES``
names them here, once, for the scenario, the CLI and the page.
"""

from __future__ import annotations

from sim.tiers.native.arc import NativeArc
from sim.tiers.native.base import NativePolicy
from sim.tiers.native.lru import NativeLru

NATIVE_POLICIES: dict[str, type[NativePolicy]] = {p.name: p for p in (NativeLru, NativeArc)}
NATIVE_POLICY_NAMES: tuple[str, ...] = tuple(NATIVE_POLICIES)


def backend_runs(backend: str | None, policy: str, tiers_behind: bool) -> bool:
    """Whether a backend runs a CPU policy (with tiers behind the CPU or not): vllm-native runs its own two, alone."""
    return backend != "vllm-native" or (policy in NATIVE_POLICIES and not tiers_behind)


def native_policy(name: str, capacity_chunks: int) -> NativePolicy:
    """A fresh policy for a tier of ``capacity_chunks`` chunks; the error lists the known names."""
    try:
        return NATIVE_POLICIES[name](capacity_chunks)
    except KeyError:
        raise ValueError(f"vllm-native offers the policies {', '.join(NATIVE_POLICIES)}; got {name!r}") from None
