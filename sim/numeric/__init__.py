"""Numbers without a domain: statistics of TTFT samples, least squares and what it determines, monotone search.

Imports: nothing of kvscope's.
Exports: ``stats`` (p50, mean, p90, speed-ups, ``RESOLUTION_MS``), ``lstsq`` (non-negative least squares),
``identify`` (which fitted constants the data determine), ``search`` (``smallest``: bisection over capacities), ``fanout`` (``fan_out``: jobs side by side on an
executor, with progress).
"""
