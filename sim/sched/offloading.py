"""vLLM's native OffloadingConnector, scheduler side, step by step: asynchronous loads over a ``NativeCpuTier``.

vLLM 0.33.0 ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``:

- ``get_num_new_matched_tokens`` (1210-1277) looks the request up beyond its
  GPU hit and answers "load asynchronously" for every hit, since the
  synchronous-load budget is 0 unless configured (168, 1279-1302). The
  lookup is deferred (None: the scheduler skips the request this step,
  ``scheduler.py`` 1146-1151) while the request still has transfers in flight
  (1240-1245), while a hit block is still being written (``HIT_PENDING``,
  786-803) and while another request is loading one (1022-1044; prefix caching
  on, 641-643).
- ``update_state_after_alloc`` (1351-1500) pins the blocks it loads
  (``prepare_load``) and remembers them as being loaded.
- The worker submits the step's loads before its forward pass
  (``offloading/worker.py`` 246-270); kvscope's transfers complete within the
  step that submits them (the load's time is that step's), so the request's
  ``finished_recving`` comes with that step's output and ``complete_load``
  unpins the blocks (2287-2295). The next ``schedule`` moves the request from
  ``WAITING_FOR_REMOTE_KVS`` back to waiting and caches its loaded blocks
  (``scheduler.py`` 3467-3517, 3519-3534).
"""

from __future__ import annotations

from sim.engine.loop import _External, native_external
from sim.sched.flight import Flight
from sim.tiers.native.base import RequestAccess
from sim.tiers.native.tier import NativeCpuTier


class NativeConnector:
    """The connector's scheduler side over one native CPU tier; ``loads`` are the flights whose load runs this step."""

    def __init__(self, tier: NativeCpuTier) -> None:
        self.tier = tier
        self.loads: list[Flight] = []

    def lookup(self, f: Flight, gpu_hit: int) -> _External | None:
        """The CPU hit beyond ``gpu_hit``, or None when the lookup is deferred."""
        if f.access is None:
            f.access = RequestAccess()  # on_new_request (1197-1208): one per request, kept across preemptions
        found = self.tier.find(f.req, gpu_hit)
        if found is None:
            return None
        return native_external(f.req, gpu_hit, *found)

    def start_load(self, f: Flight, ext: _External, gpu_hit: int) -> None:
        """``update_state_after_alloc``: pin the blocks read; the load runs in this step."""
        assert f.access is not None
        keys = ext.keys[0]
        self.tier.load(keys, gpu_hit // self.tier.chunk_size, f.access)
        f.loading, f.load_done = keys, False
        self.loads.append(f)

    def end_step(self) -> None:
        """The step's output: every load it ran has completed; its blocks are unpinned (``complete_load``)."""
        for f in self.loads:
            assert f.loading is not None
            self.tier.loaded(f.loading)
            f.loading, f.load_done = None, True
        self.loads.clear()

    def store(self, f: Flight, evicted: list) -> tuple[dict[int, int], int]:
        """The request's stores, every step's at once, and its end (``NativeCpuTier.store``)."""
        assert f.ext is not None and f.access is not None
        return self.tier.store(f.req, f.gpu_hit, f.ext.own_hit, f.req.output_tokens, evicted, f.access)
