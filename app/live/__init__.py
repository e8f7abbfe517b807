"""Live mode: run a scenario against real vLLM (or vLLM + LMCache) servers and measure TTFT and cache hits."""
