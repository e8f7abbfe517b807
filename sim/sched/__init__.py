"""The scheduler: vLLM 0.33.0's v1 scheduler loop, step by step, over the engine's GPU block pool and offload tiers.

Requests overlap here: a stepped engine (``stepped``) admits them from an FCFS
waiting queue (``queue``) under a token budget and ``max_num_seqs``
(``config``), chunks long prefills, decodes one token per step, preempts the
newest running request when blocks run out, and prices every step
(``step_costs``); arrivals come from a closed or open loop or timestamps
(``arrivals``); vLLM's native offloading connector loads asynchronously
(``offloading``); each step's decisions are a value object (``output``); a run's
per-request and per-run figures and its step ledger come from ``report``.
``serving`` holds the settings as a user gives them (CLI flags, API fields), ``replay_serving`` a
trace's (its timestamps too), ``stream`` a run under load as the page's step stream (``step`` events among them),
``limit`` the work budget a run under load is held to as it goes, ``records`` a run's records for analyses,
``simulate`` the whole result in ``simulate --json``'s shape, ``replay`` a
trace sent at its timestamps, ``shares`` a request's TTFT in its parts and ``overlap`` a run explained against
itself one request at a time. Nothing is imported here: each module is imported by its own name, so
reading the serving settings does not load the stepped engine.

Imports: sim.blocks, sim.bounds, sim.costs, sim.engine, sim.explain, sim.numeric, sim.tiers, sim.workloads; ``simulate``,
``stream``, ``overlap`` and ``replay`` also sim.simulation and sim.traces (the drivers, imported by name, never from here).
Exports: by module, ``stepped`` (``SteppedEngine``, ``SteppedRun``), ``config`` (``SchedulerConfig``,
``CLASS_DEFAULTS``, ``serve_batch_defaults``), ``step_costs``, ``output``, ``status``, ``queue``, ``arrivals``,
``flight``, ``offloading`` (``NativeConnector``), ``report``, ``serving``, ``replay_serving``, ``stream``, ``limit``, ``records``, ``simulate``, ``replay``,
``shares``, ``overlap``.
"""
