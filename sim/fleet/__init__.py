"""A fleet: replicas behind a router, on one clock; its routers, each one project's rule from its source, behind one interface.

Imports: sim.blocks, sim.bounds, sim.costs, sim.engine, sim.sched, sim.tiers.
Exports: ``routers`` (``router(name)``, ``ROUTER_NAMES``; ``Router``, ``ReplicaState``, ``RoutedRequest``),
``replicas`` (``replica_engines``, ``stepped_replicas``: each replica's engine, a tier they may share), ``clock``
(``Fleet``, ``FleetRun``, ``Route``).
"""
