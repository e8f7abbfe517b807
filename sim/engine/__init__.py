"""The engine: the request loop through a tier stack (Python, and compiled kernels for traces), its records,
their summaries, and the one event vocabulary.

Imports: sim.blocks, sim.bounds, sim.costs, sim.numeric, sim.tiers.
Exports: ``loop`` (``Engine``, ``RequestRecord``, ``TierSpec``), ``events`` (the event vocabulary), ``result``
(per-pass summaries, run totals, comparisons), ``native_spec`` (tiers under vLLM's native offloading),
``compiled``/``kernels``/``explain_kernel`` (when and how the numba loops run).
"""
