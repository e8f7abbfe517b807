"""A fleet: replicas behind a router. So far its routers, each one project's rule from its source, behind one interface.

Imports: nothing of kvscope's yet (the replicas, each a scheduler over its own tiers, come with the stepped engine).
Exports: ``routers`` (``router(name)``, ``ROUTER_NAMES``; ``Router``, ``ReplicaState``, ``RoutedRequest``).
"""
