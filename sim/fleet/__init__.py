"""A fleet: replicas behind a router, on one clock; its routers, each one project's rule from its source, behind one interface.

Imports: sim.blocks, sim.bounds, sim.costs, sim.engine, sim.numeric, sim.sched, sim.simulation, sim.tiers, sim.traces,
sim.workloads.
Exports: ``routers`` (``router(name)``, ``ROUTER_NAMES``; ``Router``, ``ReplicaState``, ``RoutedRequest``),
``replicas`` (``replica_engines``, ``stepped_replicas``: each replica's engine, a tier they may share), ``clock``
(``Fleet``, ``FleetRun``, ``Route``), ``holdings`` (``Holdings``: what each replica's tiers hold at each arrival),
``report`` (per request, per replica, the fleet and its two bounds), ``settings``
(``FleetSettings``), ``simulate`` (``simulate_fleet``, ``replay_fleet``: the JSON result, one entry per router), ``sweep``
(``configurations``, ``run_row``: one row per replica count, router and tier sizes).
"""
