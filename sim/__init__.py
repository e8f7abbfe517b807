"""kvscope's simulator: a block-exact vLLM GPU prefix cache with LMCache-style CPU and disk tiers.

The names below are loaded on first use (PEP 562), so that importing one
module of the package (the trace reader, say) does not import them all.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CostModel": "sim.costs",
    "default_costs": "sim.costs",
    "Engine": "sim.engine",
    "RequestRecord": "sim.engine",
    "TierSpec": "sim.engine",
    "PassSpec": "sim.scenario",
    "Scenario": "sim.scenario",
    "simulate": "sim.simulation",
    "stream": "sim.simulation",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sim' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
