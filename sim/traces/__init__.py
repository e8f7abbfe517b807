"""Request traces: Mooncake and Qwen-Bailian JSONL, read line by line into compact arrays, format detected.

Imports: sim.bounds.
Exports: ``reader`` (``Trace``, ``open_trace``, ``read_trace``, ``BUNDLED_TRACES``, ``TraceError``), ``line``
(a Mooncake line in its usual form, read fast).
"""
