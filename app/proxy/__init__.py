"""The proxy to configured upstream servers and the watch beside it: KV events, measured requests and a shadow twin.

Imports: app.live, sim.blocks, sim.costs, sim.engine, sim.explain, sim.kvevents, sim.sched.
Exports: ``forward`` (the relay), ``upstreams``, ``watch`` (the watch state), ``kv_thread`` (the KV event feed),
``overlap_twin`` (the twin's KV state as requests overlapped).
"""
