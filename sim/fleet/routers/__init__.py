"""Routers by name: a new router is one module and one line in ``ROUTERS``.

Each router follows one project's rule from its source (cited in its module): round-robin, seeded random, vLLM's
data-parallel balancer, prefix-hash affinity, SGLang's cache-aware router, llm-d's precise and approximate prefix
scorers with its load scorers, NVIDIA Dynamo's KV router.
"""

from __future__ import annotations

from typing import Any

from sim.fleet.routers.affinity import PrefixAffinity
from sim.fleet.routers.base import ReplicaState, RoutedRequest, Router
from sim.fleet.routers.dynamo_kv import DynamoKv
from sim.fleet.routers.llmd import LlmdApproximate, LlmdPrecise
from sim.fleet.routers.random_choice import RandomChoice
from sim.fleet.routers.round_robin import RoundRobin
from sim.fleet.routers.sglang_cache_aware import SglangCacheAware
from sim.fleet.routers.vllm_dp import VllmDataParallel

ROUTERS: dict[str, type[Router]] = {
    cls.name: cls
    for cls in (RoundRobin, RandomChoice, VllmDataParallel, PrefixAffinity, SglangCacheAware, LlmdPrecise,
                LlmdApproximate, DynamoKv)
}
ROUTER_NAMES = tuple(ROUTERS)


def router(name: str, **config: Any) -> Router:
    """A fresh router of that name with its defaults (or ``config``); ValueError naming the known ones."""
    cls = ROUTERS.get(name)
    if cls is None:
        raise ValueError(f"unknown router {name!r}; known: {', '.join(ROUTER_NAMES)}")
    return cls(**config)


__all__ = ["ROUTERS", "ROUTER_NAMES", "ReplicaState", "RoutedRequest", "Router", "router"]
