"""The tiers of a run under vLLM's native offloading: the usual spec plus the connector's admission settings."""

from __future__ import annotations

from dataclasses import dataclass

from sim.engine.events import CPU
from sim.engine.loop import TierSpec
from sim.tiers.offload import OffloadTier


@dataclass(frozen=True, slots=True)
class NativeTierSpec(TierSpec):
    """``TierSpec`` with vLLM's ``store_threshold`` and ``offload_prompt_only``; its CPU tier is a native one.

    A subclass, not more fields on ``TierSpec``: specs of the other backends
    stay exactly what the compiled replay knows.
    """

    store_threshold: int = 0
    offload_prompt_only: bool = True

    def offload_tiers(self) -> list[OffloadTier]:
        if not self.cpu_tokens:
            return []
        return [
            OffloadTier(
                CPU, "cpu", self.cpu_tokens, self.cpu_policy, unit_tokens=self.units.chunk,
                admission=self.store_threshold, prompt_only=self.offload_prompt_only,
            )
        ]
