"""A vLLM-compatible server backed by the simulator: live mode without a GPU (``kvscope emulate``).

Imports: sim.blocks, sim.bounds, sim.costs, sim.engine, sim.kvevents, sim.sched, sim.workloads.
Exports: ``server`` (``make_app``), ``backend`` (vLLM's scheduler on the wall clock), ``protocol``/``replies`` (vLLM's OpenAI API),
``prometheus`` (vLLM's metric names), ``kv_events`` (vLLM's KV event publisher).
"""
