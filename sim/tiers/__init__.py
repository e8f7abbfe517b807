"""Offload tiers behind the GPU: LMCache's chunk store, vLLM's native CPU offloading, their policies and admission.

Imports: sim.blocks.
Exports: ``offload`` (``OffloadTier``: a tier as data), ``chunk_store`` (``ChunkStore``: LMCache's local backend),
``admission`` (store after N offers), ``policies`` (chunk eviction policies, one module each), ``native``
(vLLM's ``OffloadingConnector`` CPU tier and its LRU/ARC policies).
"""
