"""The sizing advisor: the cheapest GPU/CPU/storage configuration whose simulated TTFT meets a target.

Imports: sim.analysis, sim.blocks, sim.bounds, sim.calibration, sim.engine, sim.numeric, sim.simulation, sim.tiers,
sim.traces, sim.workloads (the top layer).
Exports: ``search`` (``advise``), ``candidate``, ``facts`` (flags and settings with their sources), ``prices``,
``workloads`` (scenario or trace workloads).
"""
