"""vLLM's native OffloadingConnector, scheduler side, step by step: asynchronous loads, stores a step behind, finishes.

vLLM 0.33.0 ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``:

- ``get_num_new_matched_tokens`` (1210-1277) looks the request up beyond its
  GPU hit and answers "load asynchronously" for every hit, since the
  synchronous-load budget is 0 unless configured (168, 1279-1302). The
  lookup is deferred (None: the scheduler skips the request this step,
  ``scheduler.py`` 1146-1151) while the request still has transfers in flight
  (1240-1245), while a hit block is still being written (``HIT_PENDING``,
  786-803) and while another request is loading one (1022-1044; prefix caching
  on, 641-643). It restarts the request's stores at block 0 (1236-1238).
- ``update_state_after_alloc`` (1351-1500) pins the blocks it loads
  (``prepare_load``), remembers them as being loaded, and moves the first
  block to store past the hit (1468-1472).
- ``build_connector_meta`` (2115-2196), at the end of every ``schedule``:
  ``_build_store_jobs`` (1815-2101) offers, for each request scheduled this
  step and then each request that finished in the step before (the
  scheduler hands finishes over one schedule later, ``finished_req_ids``,
  ``scheduler.py`` 3054, 1738), the full offload blocks computed by the end of
  the step beyond the last offered one (prompt blocks only while
  ``offload_prompt_only``; a finished request's up to all but its last token,
  1832-1836). ``prepare_store`` inserts them not ready; a store it refuses
  (the blocks it would evict still written or read, ``cpu/manager.py``
  321-336) is not moved on, so the request offers it again the next step it
  is scheduled or finishes in; after the finished pass the request is gone
  (2180-2185): a store refused then is dropped. Then ``on_request_finished``
  for each finished request (2176-2185).
- The worker copies a step's stores out at the start of the next step
  (``wait_for_save`` defers them, ``offloading_connector.py`` 134-138;
  ``offloading/worker.py`` 246-251, 272-284) and its loads before its forward
  pass (253-270). kvscope's transfers complete within the step that submits
  them, so the scheduler learns of them with that step's output
  (``update_connector_output`` 2229-2310): ``complete_load`` unpins, a
  ``finished_recving`` request is scheduled the step after its load
  (``scheduler.py`` 3467-3534), ``complete_store`` makes the blocks ready.
- Blocks are freed when a request finishes (``request_finished`` answers
  False, 2336-2376); a freed block reallocated while its store is still in
  flight makes the worker finish that store before the step (jobs_to_flush,
  2154-2166): the store then completes in that step as it would anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.engine.loop import _External, native_external
from sim.sched.flight import Flight
from sim.tiers.native.base import RequestAccess
from sim.tiers.native.tier import NativeCpuTier
from sim.tiers.policies.base import DOC, TOKENS


@dataclass(slots=True, eq=False)
class StoreJob:
    """One accepted ``prepare_store``: its request and the offload blocks it writes."""

    flight: Flight
    keys: list[int]
    tokens: int


@dataclass(slots=True)
class InFlight:
    """What one step transfers: the loads it runs and the stores it copies out."""

    loads: list[Flight]
    stores: list[StoreJob]

    @property
    def store_tokens(self) -> int:
        return sum(j.tokens for j in self.stores)


@dataclass(slots=True)
class StepStores:
    """What a step's ``build_connector_meta`` did with the stores: tokens newly held per document, offers refused,
    tokens dropped (refused at the request's last offer)."""

    added: dict[int, int]
    refused: int = 0
    dropped_tokens: int = 0


class NativeConnector:
    """The connector's scheduler side over one native CPU tier.

    ``loads``: flights whose load runs this step; ``queued``: store jobs built
    in the last schedule, submitted when the next step runs; ``submitted``:
    the jobs the running step copies out; ``finished``: requests that ended in
    the last step, handed to the connector in the next schedule.
    """

    def __init__(self, tier: NativeCpuTier) -> None:
        self.tier = tier
        self.loads: list[Flight] = []
        self.queued: list[StoreJob] = []
        self.submitted: list[StoreJob] = []
        self.finished: list[Flight] = []
        self._built: list[StoreJob] = []  # this schedule's jobs, queued when the step runs
        self._running = 0  # steps run whose output is not processed yet (two under asynchronous scheduling)

    @property
    def busy(self) -> bool:
        """Work left that keeps the engine stepping with nothing scheduled (``has_pending_push_work``, 2198-2216)."""
        return bool(self.loads or self.queued or self.submitted or self.finished or self._running)

    # -- schedule ------------------------------------------------------------------

    def lookup(self, f: Flight, gpu_hit: int) -> _External | None:
        """The CPU hit beyond ``gpu_hit``, or None when the lookup is deferred."""
        if f.access is None:
            f.access = RequestAccess()  # on_new_request (1197-1208): one per request, kept across preemptions
        if f.store_jobs:
            return None  # still has transfers in flight (1240-1245)
        found = self.tier.find(f.req, gpu_hit)
        if found is None:
            return None
        f.next_stored = 0
        return native_external(f.req, gpu_hit, *found)

    def start_load(self, f: Flight, ext: _External, gpu_hit: int) -> None:
        """``update_state_after_alloc``: pin the blocks read; the load runs in this step; stores start past the hit."""
        assert f.access is not None
        keys = ext.keys[0]
        self.tier.load(keys, gpu_hit // self.tier.chunk_size, f.access)
        f.loading, f.load_done = keys, False
        f.next_stored = self.tier.first_offered(gpu_hit, ext.own_hit)
        self.loads.append(f)

    def build(self, scheduled: dict[Flight, int]) -> StepStores:
        """``build_connector_meta``: the stores of the requests scheduled, then of those finished in the last step,
        then their ``on_request_finished``. ``scheduled`` holds the tokens each computes this step."""
        out = StepStores({})
        jobs: list[StoreJob] = []
        for f, new in scheduled.items():
            self._offer(f, f.num_computed + new, len(f.blocks), False, out, jobs)
        block = self.tier.chunk_size // self.tier.blocks_per_chunk
        for f in self.finished:
            # The connector keeps the block ids a finished request had (its blocks back in the free queue): KV for
            # all but the last sampled token.
            self._offer(f, max(f.req.prompt_tokens, f.num_tokens - 1), -(-(f.num_tokens - 1) // block), True, out, jobs)
        for f in self.finished:
            assert f.access is not None
            self.tier.finished(f.access)
        self.finished = []
        self._built.extend(jobs)  # an empty schedule's (finished passes only) go with the next step that runs
        return out

    def _offer(
        self, f: Flight, after: int, allocated: int, last: bool, out: StepStores, jobs: list[StoreJob]
    ) -> None:
        """One request's ``prepare_store`` in ``_build_store_jobs``: its full blocks computed by ``after`` tokens
        (of ``allocated`` GPU blocks); ``last``: its finished pass, after which a refused offer is dropped."""
        tier, req = self.tier, f.req
        if f.access is None:
            return  # never looked up: no request state (nothing offered)
        offloadable = min(after, f.num_tokens)
        if tier.offload_prompt_only:
            offloadable = min(offloadable, req.prompt_tokens)  # _calc_num_offloadable_tokens (762-771)
        keys = tier.offload_keys(req)
        bpc = tier.blocks_per_chunk
        # storable_chunks (442-473): full, allocated and keyed offload blocks
        end = min(offloadable // tier.chunk_size, allocated // bpc, f.num_tokens // tier.chunk_size, len(keys))
        if end <= f.next_stored:
            return
        offer = tier.offer_of(req, keys, f.next_stored, end)
        tier.eviction_seq = f.seq  # what this store evicts, this request evicts (sim.explain)
        stored = tier.prepare_store(offer, f.offload_evicted[0], f.access, pending=True)
        if stored is None:  # refused: not moved on (1991-1996)
            f.store_refused += 1
            out.refused += 1
            if last:
                tier.dropped(offer, f.seq)
                dropped = sum(c[TOKENS] for _, c, _ in offer)
                f.store_dropped_tokens += dropped
                out.dropped_tokens += dropped
            return
        f.next_stored = end
        if not stored:
            return
        tokens = 0
        for chunk in stored:
            out.added[chunk[DOC]] = out.added.get(chunk[DOC], 0) + chunk[TOKENS]
            tokens += chunk[TOKENS]
        if f.num_output == 0:
            f.written += tokens  # copied out of the prompt's prefill (the sequential engine's stored tokens)
        stored_keys = {k for k, c, _ in offer if c in stored}
        job = StoreJob(f, [k for k, _, _ in offer if k in stored_keys], tokens)
        f.store_jobs += 1
        jobs.append(job)

    # -- the step runs, and its output ------------------------------------------------

    def run(self) -> InFlight:
        """The worker's start of the step: submit the stores built in the last schedule and this step's loads; this
        step's stores wait for the next. Returns what the step transfers (its output completes it)."""
        step = InFlight(self.loads, self.queued)
        self._running += 1
        self.submitted.extend(self.queued)
        self.loads, self.queued, self._built = [], self._built, []
        return step

    def end_step(self, step: InFlight) -> None:
        """The step's output: its loads and the stores it copied out have completed (``complete_load``,
        ``complete_store``)."""
        tier = self.tier
        for f in step.loads:
            assert f.loading is not None
            tier.loaded(f.loading)
            f.loading, f.load_done = None, True
        for job in step.stores:
            tier.stored(job.keys)
            job.flight.store_jobs -= 1
        done = set(map(id, step.stores))
        self.submitted = [j for j in self.submitted if id(j) not in done]
        self._running -= 1

    def request_finished(self, f: Flight) -> None:
        """The request ended in this step: the next schedule hands it to the connector (``finished_req_ids``)."""
        self.finished.append(f)
