"""Live mode: run a scenario against real vLLM (or vLLM + LMCache) servers and measure TTFT and cache hits.

Imports: sim.blocks, sim.calibration, sim.costs, sim.engine, sim.explain, sim.sched, sim.simulation, sim.tiers, sim.workloads.
Exports: ``session`` (a live run), ``client`` (streamed completions, /metrics), ``targets``, ``registry``,
``prompts``, ``prom``, ``shadow`` (the simulated twin of a target), ``overlap`` (its stepped twin under concurrency).
"""
