"""A fleet's replicas: one engine per replica over the same tier shape, each with its own GPU pool and offload tiers,
and optionally one more tier whose single store every replica reaches (LMCache's remote backend, a Mooncake store).

The shared tier sits behind each replica's own tiers, searched last; its one
capacity and policy are the store's, and each replica reads it at the tier's
``load_ms_per_token``. LMCache's remote backend is a backend of its storage
manager, behind the local CPU memory every store passes through
(``storage_manager.py`` 411-431), so a shared tier needs a CPU tier on each
replica, as a disk tier does.
"""

from __future__ import annotations

from dataclasses import replace

from sim.blocks.policies import GPU_POLICIES
from sim.costs.model import CostModel
from sim.engine.loop import Engine, TierSpec
from sim.sched.config import SchedulerConfig
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.tiers.offload import OffloadTier

MAX_REPLICAS = 256


class FleetError(ValueError):
    """A fleet that cannot be built; ``field`` names the setting at fault (``replicas``, ``shared_tier``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def __reduce__(self) -> tuple[type[FleetError], tuple[str, str]]:  # both arguments, so that it unpickles
        return type(self), (self.field, str(self))


def replica_engines(
    run: str, spec: TierSpec, replicas: int, costs: CostModel | None = None, shared: OffloadTier | None = None,
) -> list[Engine]:
    """``replicas`` engines of ``spec``; with ``shared``, its tier appended to each and one store behind them all."""
    if not 1 <= replicas <= MAX_REPLICAS:
        raise FleetError("replicas", f"must be between 1 and {MAX_REPLICAS}, got {replicas}")
    check_shared(shared, spec.cpu_tokens, spec.cpu_backend)
    if shared is not None:
        spec = replace(spec, more_tiers=(*spec.more_tiers, shared))
        run = f"{run}+{shared.name}"
    first = Engine(run, spec, costs)
    stores = {shared.name: first.offload[-1]} if shared is not None else {}
    return [first, *(Engine(run, spec, costs, shared=stores) for _ in range(replicas - 1))]


def check_shared(shared: OffloadTier | None, cpu_tokens: int | None, cpu_backend: str) -> None:
    """FleetError unless a shared tier has each replica's CPU tier in front of it, one that stores through to it."""
    if shared is None:
        return
    if not cpu_tokens:
        raise FleetError("shared_tier", f"tier {shared.name}: needs a CPU tier on each replica (every store passes through it)")
    if cpu_backend == "vllm-native":
        # vLLM's OffloadingConnector has its one CPU tier and nothing behind it (as a scenario's disk tier is refused)
        raise FleetError("shared_tier", f"tier {shared.name}: vllm-native offloads to its CPU tier alone; give lmcache")


def stepped_replicas(
    engines: list[Engine], config: SchedulerConfig | None = None, costs: StepCosts | None = None,
) -> list[SteppedEngine]:
    """Each engine behind vLLM's scheduler loop (its native offloading and asynchronous scheduling as a single server's,
    ``SteppedEngine.advance``); refused for a GPU policy that plans from the requests ahead."""
    for engine in engines:
        check_stepping(engine.gpu.policy)
    return [SteppedEngine(engine, config, costs) for engine in engines]


def check_stepping(gpu_policy: str) -> None:
    """FleetError when the replicas cannot step under ``gpu_policy``; checked again before a fleet is built, so that a
    server refuses it at once rather than in its worker."""
    if hasattr(GPU_POLICIES[gpu_policy], "plan"):  # a policy's queue that needs plan()
        raise FleetError(
            "gpu_policy", f"gpu_policy {gpu_policy}: it plans from every request a replica will serve, which the "
            "router decides only as requests arrive; use lru, fifo or mru",
        )
