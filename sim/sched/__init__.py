"""The scheduler: vLLM 0.33.0's v1 scheduler loop, step by step, over the engine's GPU block pool and offload tiers.

Requests overlap here: a stepped engine (``stepped``) admits them from an FCFS
waiting queue (``queue``) under a token budget and ``max_num_seqs``
(``config``), chunks long prefills, decodes one token per step, preempts the
newest running request when blocks run out, and prices every step
(``step_costs``); arrivals come from a closed or open loop or timestamps
(``arrivals``); each step's decisions are a value object (``output``); a run's
per-request and per-run figures and its step ledger come from ``report``.
``serving`` holds the settings as a user gives them (CLI flags, API fields),
``simulate`` the whole result in ``simulate --json``'s shape and ``replay`` a
trace sent at its timestamps; none is imported here (they pull in
``sim.simulation.run``, ``sim.simulation.replay`` and the explainers).

Imports: sim.blocks, sim.bounds, sim.costs, sim.engine, sim.numeric, sim.tiers, sim.workloads; ``simulate``
and ``replay`` also sim.simulation and sim.traces (the drivers, imported by name, never from here).
Exports: ``SteppedEngine``, ``SteppedRun``, ``SchedulerConfig``,
``CLASS_DEFAULTS``, ``serve_batch_defaults``, ``StepCosts``, ``StepOutput``,
``Admission``, ``RequestStatus``, ``FcfsQueue``, ``ClosedLoop``, ``OpenLoop``,
``Timed``, ``Arrivals``, ``Flight``, ``request_rows``, ``run_summary``,
``write_steps``.
"""
from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use (PEP 562): reading the serving settings (sim.sched.serving) for a command's flags, say,
# need not import the stepped engine.
_EXPORTS = {
    "Admission": "sim.sched.output",
    "Arrivals": "sim.sched.arrivals",
    "CLASS_DEFAULTS": "sim.sched.config",
    "ClosedLoop": "sim.sched.arrivals",
    "FcfsQueue": "sim.sched.queue",
    "Flight": "sim.sched.flight",
    "OpenLoop": "sim.sched.arrivals",
    "RequestStatus": "sim.sched.status",
    "SchedulerConfig": "sim.sched.config",
    "StepCosts": "sim.sched.step_costs",
    "StepOutput": "sim.sched.output",
    "SteppedEngine": "sim.sched.stepped",
    "SteppedRun": "sim.sched.stepped",
    "Timed": "sim.sched.arrivals",
    "request_rows": "sim.sched.report",
    "run_summary": "sim.sched.report",
    "serve_batch_defaults": "sim.sched.config",
    "write_steps": "sim.sched.report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sim.sched' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
