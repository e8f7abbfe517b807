"""A vLLM-compatible server backed by the simulator: live mode without a GPU (``kvscope emulate``)."""
