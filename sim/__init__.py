"""kvscope's simulator: a block-exact vLLM GPU prefix cache with LMCache-style CPU and disk tiers.

A package per concern, each a layer that imports only the layers below it
(bottom first; tests/test_layers.py holds this order and checks it):
``bounds``, ``numeric`` < ``blocks``, ``costs``, ``traces`` < ``tiers``,
``kvevents`` < ``workloads`` < ``engine`` < ``explain`` < ``simulation`` <
``sched`` < ``fleet`` < ``calibration`` < ``analysis`` < ``advise``.

The names below are loaded on first use (PEP 562), so that importing one
module of the package (the trace reader, say) does not import them all.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CostModel": "sim.costs.model",
    "default_costs": "sim.costs.model",
    "Engine": "sim.engine.loop",
    "RequestRecord": "sim.engine.loop",
    "TierSpec": "sim.engine.loop",
    "PassSpec": "sim.workloads.scenario",
    "Scenario": "sim.workloads.scenario",
    "simulate": "sim.simulation.run",
    "stream": "sim.simulation.run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sim' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
