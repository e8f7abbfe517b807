"""Benchmarks printed by ``make bench``: one module per area, each with ``run() -> dict`` of figures."""
