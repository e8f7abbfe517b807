"""vLLM's KV cache events: the wire format, the resident-block state they describe, and ZMQ publish/subscribe.

Imports: sim.bounds, sim.traces.
Exports: ``wire`` (msgspec structs), ``state`` (what a server holds), ``feed``/``subscriber``/``publisher``
(ZMQ), ``endpoints``, ``recording`` (JSON lines of a stream, read back as a trace).
"""
