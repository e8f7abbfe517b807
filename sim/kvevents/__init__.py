"""vLLM's KV cache events: the wire format, the resident-block state they describe, and ZMQ publish/subscribe."""
