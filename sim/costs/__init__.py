"""The TTFT cost model and its default constants, kept as data with their provenance (``sim/data/seed_fit.json``).

Imports: sim.numeric.
Exports: ``model`` (``CostModel``, ``default_costs``, ``COEFFICIENTS``).
"""
