"""The sizing advisor: the cheapest GPU/CPU/storage configuration whose simulated TTFT meets a target.

Imports: sim.analysis, sim.blocks, sim.bounds, sim.calibration, sim.engine, sim.fleet, sim.numeric, sim.sched,
sim.simulation, sim.tiers, sim.traces, sim.workloads (the top layer).
Exports: ``search`` (``advise``), ``candidate``, ``facts`` (flags and settings with their sources), ``prices``,
``workloads`` (scenario or trace workloads), ``fleet``
(``FleetWorkload``: a scenario through a fleet of a candidate's replicas at a rate).
"""
