"""Analysis over many simulations: capacity curves and thresholds, LRU stack distances and hit-ratio curves,
eviction-policy what-ifs.

Imports: sim.blocks, sim.bounds, sim.costs, sim.engine, sim.numeric, sim.sched, sim.simulation, sim.tiers, sim.traces,
sim.workloads.
Exports: ``capacity``, ``sweep`` (``Thresholds``), ``stack_distance``, ``curve`` (``lru_curve``), ``whatif``.
"""
