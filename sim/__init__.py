"""kvscope's simulator: a block-exact vLLM GPU prefix cache with LMCache-style CPU and disk tiers."""

from sim.costs import CostModel, default_costs
from sim.engine import Engine, RequestRecord, TierSpec
from sim.scenario import PassSpec, Scenario
from sim.simulation import simulate, stream

__all__ = ["CostModel", "Engine", "PassSpec", "RequestRecord", "Scenario", "TierSpec", "default_costs", "simulate", "stream"]
