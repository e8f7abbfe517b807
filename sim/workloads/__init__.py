"""Workloads: scenarios (validated, with presets), their passes and questions, and the requests they build.

Imports: sim.blocks, sim.bounds, sim.costs, sim.tiers.
Exports: ``scenario`` (``Scenario``, ``PassSpec``), ``presets``, ``questions``, ``longdocqa`` (long_doc_qa's query
round as a pass), ``requests`` (``build_requests``, ``units``), ``estimate`` (a scenario's work before it runs).
"""
