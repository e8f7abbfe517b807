"""Running things: a scenario through one engine per run (records or an event stream), and a trace replay,
each with its misses explained.

Imports: sim.blocks, sim.bounds, sim.costs, sim.engine, sim.explain, sim.tiers, sim.traces, sim.workloads.
Exports: ``run`` (``simulate``, ``stream``, ``run_records``), ``replay`` (``replay``, ``ReplayOutcome``),
``replay_rows`` (a replay's JSON rows as text).
"""
