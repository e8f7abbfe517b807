"""A fleet as a user gives it: how many replicas, which routers to compare, and a tier they may share; with limits.

One definition for the CLI flags (``--replicas``, ``--router`` repeatable,
``--shared-tier NAME:SIZE[:POLICY[:LOAD_MS_PER_TOKEN]]``) and the API body's
fields (``replicas``, ``routers``, ``shared_tier``). The shared tier is
spelt as a storage tier (``sim.workloads.scenario.StorageTier``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sim.fleet.replicas import MAX_REPLICAS, FleetError
from sim.fleet.routers import ROUTER_NAMES
from sim.tiers.offload import OffloadTier
from sim.workloads.scenario import RESERVED_TIER_NAMES, StorageTier

DEFAULT_ROUTERS = ("round-robin", "affinity")


class FleetSettings(BaseModel):
    """The replicas, the routers compared over them (each its own fleet run) and the shared tier, if any."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    replicas: int = Field(default=2, ge=1, le=MAX_REPLICAS, description="replicas behind the router, each its own GPU and tiers")
    routers: tuple[str, ...] = Field(
        default=DEFAULT_ROUTERS, min_length=1, max_length=len(ROUTER_NAMES),
        description=f"routers to compare, each over a fresh fleet: {', '.join(ROUTER_NAMES)}",
    )
    shared_tier: StorageTier | None = Field(
        default=None,
        description="a tier behind every replica's own, one store for all (LMCache's remote backend): "
        "NAME:SIZE[:POLICY[:LOAD_MS_PER_TOKEN]], SIZE in GiB (8) or tokens (50000t); needs a CPU tier",
    )

    @field_validator("routers")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in ROUTER_NAMES]
        if unknown:
            raise ValueError(f"unknown router {unknown[0]!r}; known: {', '.join(ROUTER_NAMES)}")
        twice = sorted({name for name in value if value.count(name) > 1})
        if twice:
            raise ValueError(f"each router once: {', '.join(twice)} given twice")
        return value

    @field_validator("shared_tier", mode="before")
    @classmethod
    def _parse(cls, value: object) -> object:
        return StorageTier.parse(value) if isinstance(value, str) else value

    @field_validator("shared_tier")
    @classmethod
    def _not_reserved(cls, value: StorageTier | None) -> StorageTier | None:
        if value is not None and value.name in RESERVED_TIER_NAMES:
            raise ValueError(f"the shared tier's name must be none of {', '.join(RESERVED_TIER_NAMES)}: {value.name}")
        return value

    def shared(self, bytes_per_token: int | None) -> OffloadTier | None:
        """The shared tier as the engines take it; ``bytes_per_token`` None (a trace names no model): tokens only."""
        t = self.shared_tier
        if t is None:
            return None
        if bytes_per_token is None and t.tokens is None:
            raise FleetError("shared_tier", f"tier {t.name}: give its size in tokens (50000t): a trace has no model to size GiB")
        tokens = t.capacity_tokens(bytes_per_token or 1)
        return OffloadTier(t.name, "disk", tokens, t.policy, t.load_ms_per_token, t.unit_tokens, t.admission)
