"""The sizing advisor: the cheapest GPU/CPU/storage configuration whose simulated TTFT meets a target, idle or under load.

Imports: sim.analysis, sim.blocks, sim.bounds, sim.calibration, sim.costs, sim.engine, sim.fleet, sim.numeric,
sim.sched, sim.simulation, sim.tiers, sim.traces, sim.workloads (the top layer).
Exports: ``search`` (``advise``), ``candidate``, ``facts`` (flags and settings with their sources), ``prices``,
``workloads`` (scenario or trace workloads), ``load`` (served under load: the working set, the highest rate),
``fleet`` (``FleetWorkload``: a scenario through a fleet of a candidate's replicas at a rate).
"""
