"""Offload tiers: their eviction policies (``sim.tiers.policies``), one module per policy."""
