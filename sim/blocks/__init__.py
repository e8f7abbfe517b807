"""vLLM's GPU prefix cache, block-exact: block and chunk keys, the free queue, the block pool, its eviction policies.

Imports: sim.bounds.
Exports: ``hashing`` (prefix-chained keys), ``request`` (``Request``, ``Units``: a prompt as the tiers see it),
``prompt_keys`` (text -> token ids -> keys), ``free_queue`` (vLLM's ``FreeKVCacheBlockQueue``), ``pool``
(``GpuBlockPool``), ``policies`` (GPU eviction policies by name), ``kv`` (KV bytes per token of a model).
"""
