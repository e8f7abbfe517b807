"""Measurements and calibration: per-request measurement files and long_doc_qa's rounds, the least-squares fit
of the cost model to them, and measured beside predicted.

Imports: sim.bounds, sim.costs, sim.engine, sim.numeric, sim.sched, sim.simulation, sim.workloads.
Exports: ``measurements`` (``Measurement``, read/write), ``longdocqa_files``, ``readers`` (one door for both),
``calibrate`` (``fit``, ``fit_seed_table``), ``measured`` (a file's requests as a scenario), ``versus``.
"""
