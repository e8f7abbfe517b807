"""Why each prompt token missed: a cause for every token a tier did not serve, and the capacity that would have hit.

``attach(engine)`` makes an engine's records carry ``gpu_miss`` and
``computed`` (cause -> tokens) and ``evicted_misses``; ``capacity.fill_needs``
adds the exact capacities by re-simulation; ``summary`` totals them.

Imports: sim.blocks, sim.costs, sim.engine, sim.numeric.
Exports: ``attach``, ``Attributor``, ``CAUSES``, ``PRECEDENCE``; modules ``causes``, ``observer``, ``capacity``,
``summary``, ``stream``, ``columns``, ``narrate``, ``report``.
"""

from sim.explain.causes import CAUSES, PRECEDENCE
from sim.explain.observer import Attributor, attach

__all__ = ["CAUSES", "PRECEDENCE", "Attributor", "attach"]
