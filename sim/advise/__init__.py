"""The sizing advisor: the cheapest GPU/CPU/storage configuration whose simulated TTFT meets a target."""
