"""The web front end: the FastAPI app (``make_app``), its routers by feature, and the SSE step stream.

Imports: app.budgets, app.costs_profile, app.live, app.proxy, app.runs, app.scenario_input, sim.advise,
sim.analysis, sim.blocks, sim.bounds, sim.calibration, sim.costs, sim.engine, sim.explain, sim.fleet, sim.numeric,
sim.sched, sim.simulation, sim.tiers, sim.traces, sim.workloads.
Exports: ``app`` (``make_app``), ``routes`` (one router per feature), ``sse``, ``guard``, ``workers``.
"""
