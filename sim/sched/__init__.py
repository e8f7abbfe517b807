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

from sim.sched.arrivals import Arrivals, ClosedLoop, OpenLoop, Timed
from sim.sched.config import CLASS_DEFAULTS, SchedulerConfig, serve_batch_defaults
from sim.sched.flight import Flight
from sim.sched.output import Admission, StepOutput
from sim.sched.queue import FcfsQueue
from sim.sched.report import request_rows, run_summary, write_steps
from sim.sched.status import RequestStatus
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine, SteppedRun

__all__ = [
    "CLASS_DEFAULTS", "Admission", "Arrivals", "ClosedLoop", "FcfsQueue", "Flight", "OpenLoop", "RequestStatus",
    "SchedulerConfig", "StepCosts", "StepOutput", "SteppedEngine", "SteppedRun", "Timed", "request_rows",
    "run_summary", "serve_batch_defaults", "write_steps",
]
