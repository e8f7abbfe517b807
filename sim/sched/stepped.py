"""The stepped engine: vLLM v1's scheduler loop (schedule, execute, update_from_output) over kvscope's tiers.

Each step follows vLLM 0.33.0 ``vllm/v1/core/sched/scheduler.py``
``Scheduler.schedule`` (699-1660) with its FCFS policy, synchronously as
``EngineCore.step`` runs it (``vllm/v1/engine/core.py`` 667-691):

1. Running requests first, in order (795): each asks for the tokens it lacks
   (``num_tokens - num_computed_tokens``: a prefill chunk or one decode
   token), capped by ``long_prefill_token_threshold`` (844) and the budget
   left. If its blocks cannot be allocated, the newest running request is
   preempted (970, FCFS) until they can; if it is itself the newest, it is
   preempted and the loop stops (978, 993).
2. Waiting requests only in a step that preempted nothing (1050), while the
   budget lasts and fewer than ``max_num_seqs`` run (1073). The GPU prefix hit
   is looked up over ``num_tokens - 1`` tokens (``kv_cache_manager.py`` 302),
   then the connector's hit beyond it (1115-1131): for LMCache a synchronous
   load that lands in this step. It asks for ``num_tokens`` minus the hits
   (1306), capped by the threshold (1332); without chunked prefill a request
   that does not fit the budget whole stops admission (1338). If its blocks
   cannot be allocated, admission stops behind it (1454): no preemption for a
   waiting request.
3. ``long_prefill_token_threshold`` applies only when more than one request is
   running or waiting at the step's start (759-763).
4. Blocks are allocated as ``allocate_slots`` does (``kv_cache_manager.py``
   380-627): enough for the computed tokens plus the new ones; a hit block
   sitting in the free queue counts against the free blocks, since taking it
   removes it from there (``single_type_kv_cache_manager.py`` 255-262); with
   ``scheduler_reserve_full_isl`` a waiting request is admitted only if blocks
   for its whole ``num_tokens`` fit (531-542). The full blocks up to
   ``min(computed + new, num_tokens)`` are cached at once (621-625), so a
   request scheduled later in the same step, or in the next, hits them.
5. Preemption (``_preempt_request``, 1799-1842) frees the request's blocks,
   tail first (``kv_cache_manager.py`` 631: they stay cached until evicted),
   resets ``num_computed_tokens`` to 0, keeps its generated tokens and puts it
   at the head of the waiting queue; its next admission looks up hits over
   prompt and generated tokens.
6. After the step (``update_from_output``; ``_update_after_schedule`` 1858
   advanced ``num_computed_tokens``) a request whose computed tokens caught up
   with ``num_tokens`` samples one token; it finishes when it has its output
   tokens or reaches ``max_model_len`` (``sched/utils.py`` 114-119,
   ``check_stop``), and its blocks are freed.

Blocks shared by running requests (a hit on another's blocks) are counted per
request, as vLLM's ``ref_cnt``: a block returns to the free queue when its
last holder lets it go. The offload tiers are the sequential engine's own
(``Engine.lookup_offload``, ``Engine.store_offload``); a request's chunks are
stored when its prefill completes (LMCache saves chunk by chunk during a
chunked prefill; kvscope stores them together at its last chunk).
vLLM's native connector (``sim.sched.offloading``) answers every CPU hit
with an asynchronous load: the request is allocated its blocks and waits in
``WAITING_FOR_REMOTE_KVS`` (scheduler.py 1514-1546) in the queue of waiting
requests that hold blocks, drained first (233-236), until the step after
its load; a lookup the connector cannot answer yet skips the request for
the step (1146-1151), the skipped put back at the front (1598-1602). Its
stores are offered at the end of each schedule, copied out in the next
step, and a finished request is handed to it one schedule later
(``NativeConnector.build``); a step that schedules nothing while it has
transfers left lasts them.
With ``async_scheduling`` the loop is ``step_with_batch_queue``'s
(``advance``). Not modelled: priorities, the watermark, speculative decoding.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sim.blocks.request import Request
from sim.bounds.budget import checkpoint
from sim.engine.loop import Engine, RequestRecord, _External
from sim.sched.arrivals import Arrivals, ClosedLoop
from sim.sched.config import SchedulerConfig
from sim.sched.flight import Flight
from sim.sched.limit import StepLimit
from sim.sched.offloading import InFlight, NativeConnector, StepStores
from sim.sched.output import Admission, StepOutput
from sim.sched.queue import FcfsQueue
from sim.sched.status import RequestStatus
from sim.sched.step_costs import StepCosts


@dataclass(slots=True)
class SteppedRun:
    """A stepped run's outcome: records as the sequential engine's (by seq), the flights, and the step ledger
    (empty when the run was asked not to keep it: ``step_count`` and ``end_ms`` still say how many and when the last
    ended; given a ledger, they are read from it, in order of their ends)."""

    records: list[RequestRecord]
    flights: list[Flight]
    steps: list[StepOutput]
    queue_ms: dict[int, float]
    step_count: int = 0
    end_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.steps:
            last = self.steps[-1]
            self.step_count, self.end_ms = len(self.steps), last.t_ms + last.dt_ms


@dataclass(slots=True, eq=False)
class _Ran:
    """A step that ran (its tokens computed, its time taken) whose output is not processed yet."""

    scheduled: dict[Flight, int]
    admitted: list[Admission]
    preempted: list[Flight]
    loaded: list[int]
    stored: list[int]
    stores: StepStores | None
    sampling: list[Flight]  # the requests that sample a token in it
    inflight: InFlight | None
    index: int
    prefill: int
    decode: int
    held: int  # GPU blocks the step's batch held, before its finished requests let theirs go


class SteppedEngine:
    """vLLM's scheduler loop over one ``Engine``'s GPU pool and offload tiers.

    ``steps(requests, arrivals)`` yields each step's ``StepOutput``; between
    two steps the pool, the tiers, ``running`` and ``waiting`` may be read.
    """

    def __init__(self, engine: Engine, config: SchedulerConfig | None = None, costs: StepCosts | None = None) -> None:
        self.config = config or SchedulerConfig()
        self.engine = engine
        self.gpu = engine.gpu
        self.block = engine.units.block
        self.costs = costs or StepCosts.from_request_costs(engine.costs)
        self.connector = NativeConnector(engine.native_cpu) if engine.native_cpu is not None else None
        self.running: list[Flight] = []
        self.waiting: FcfsQueue[Flight] = FcfsQueue()
        # Waiting requests that hold blocks (loading their CPU hit), drained before ``waiting`` (scheduler.py 233-236)
        self.holding: FcfsQueue[Flight] = FcfsQueue()
        self.refs: dict[int, int] = {}  # block id -> running requests holding it (vLLM's ref_cnt), held blocks only
        self.now_ms = 0.0
        self._starts: list[float] = []
        self._dts: list[float] = []
        self.queue_ms: dict[int, float] = {}  # seq -> its wait before its first admission
        self._scheduled_steps = 0  # sched_step_seq: steps run (scheduler.py 466-472)
        self._processed_steps = 0  # processed_step_seq: steps whose output is processed
        # With asynchronous scheduling and a connector that loads into the GPU (vLLM's native one runs as kv_both, a
        # consumer), blocks a step still in flight may write are returned only when its output is processed
        # (defer_block_free, scheduler.py 187-194, 3077-3119): (fence step, blocks, how many of them are hashed).
        self.defer_free = self.config.async_scheduling and self.connector is not None
        self._deferred: deque[tuple[int, list[int], int]] = deque()
        self._pending: _Ran | None = None  # async: the step in flight, its output processed at the next turn
        self._tier_names = [store.name for store in engine.offload]

    # -- the run -------------------------------------------------------------

    def run(
        self, requests: Sequence[Request], arrivals: Arrivals = ClosedLoop(1), limit: StepLimit | None = None,
        ledger: bool = True, records: bool = True,
    ) -> SteppedRun:
        """Every request to its end; ``limit``: stopped (``OverWorkBudget``) when its work budget runs out. Without
        ``ledger`` the steps are not kept (a long trace's would outgrow its requests), without ``records`` the
        requests' records are not made (the flights still say each one's times)."""
        flights: list[Flight] = []
        stepping = self.steps(requests, arrivals, flights)
        metered = limit.metered(stepping) if limit is not None else stepping
        steps: list[StepOutput] = []
        count, end_ms = 0, 0.0
        if ledger:
            steps = list(metered)
        else:
            for out in metered:
                count, end_ms = count + 1, out.t_ms + out.dt_ms
        flights.sort(key=lambda f: f.seq)
        made = [self.record(f) for f in flights] if records else []
        return SteppedRun(made, flights, steps, dict(self.queue_ms), count, end_ms)

    def steps(self, requests: Sequence[Request], arrivals: Arrivals, flights: list[Flight] | None = None) -> Iterator[StepOutput]:
        """Run every request to its end, one step at a time; ``flights`` collects each request as it arrives."""
        self.check(requests)
        self.engine.plan(list(requests))
        arrived = flights if flights is not None else []
        times = None if isinstance(arrivals, ClosedLoop) else arrivals.times_ms(len(requests))
        nxt = 0
        if times is None:
            assert isinstance(arrivals, ClosedLoop)
            for req in requests[: arrivals.concurrency]:
                arrived.append(self.arrive(req, 0.0))
            nxt = len(arrived)
        yield from self._loop(requests, arrived, times, nxt)

    def _loop(
        self, requests: Sequence[Request], arrived: list[Flight], times: list[float] | None, nxt: int
    ) -> Iterator[StepOutput]:
        """Step (``advance``) until every request is done; idle, the engine waits for the next arrival."""
        finished = 0
        while finished < len(requests):
            if times is not None:
                while nxt < len(requests) and times[nxt] <= self.now_ms:
                    arrived.append(self.arrive(requests[nxt], times[nxt]))
                    nxt += 1
                if self.idle:
                    self.idle_until(times[nxt])
                    continue
            checkpoint()
            out = self.advance()
            if out is None:
                continue
            finished += len(out.finished)
            if times is None:
                end = out.t_ms + out.dt_ms  # a closed loop's next request comes when the output is known
                for _ in out.finished:
                    if nxt < len(requests):
                        arrived.append(self.arrive(requests[nxt], end))
                        nxt += 1
            yield out

    def check(self, requests: Sequence[Request]) -> None:
        """ValueError for a request this engine could never serve (not block-granular, larger than the pool, too long)."""
        capacity, block = self.gpu.capacity_blocks, self.block
        for req in requests:
            if req.alloc_blocks < -(-(req.prompt_tokens + req.output_tokens - 1) // block):
                raise ValueError(
                    f"request {req.seq}: its {req.alloc_blocks} GPU units do not hold its tokens in blocks of {block} "
                    "(the stepped engine needs granularity block)"
                )
            if req.alloc_blocks > capacity:
                raise ValueError(
                    f"request {req.seq} needs {req.alloc_blocks} GPU blocks, the pool has {capacity}: it could never run"
                )
            budget = self.config.max_num_batched_tokens
            if not self.config.enable_chunked_prefill and req.prompt_tokens > budget:
                # Never scheduled whole, so never scheduled: vLLM refuses such a budget at start-up (see
                # sim.sched.simulate.refusal), where a scenario's requests are checked before they are built.
                raise ValueError(
                    f"request {req.seq}: its prompt of {req.prompt_tokens:,} tokens is over max_num_batched_tokens "
                    f"({budget:,}) without chunked prefill: vLLM refuses a budget below max_model_len then"
                )
            limit = self.config.max_model_len
            if limit is not None and req.prompt_tokens >= limit:
                raise ValueError(f"request {req.seq}: prompt of {req.prompt_tokens} tokens is not below max_model_len ({limit})")

    def advance(self) -> StepOutput | None:
        """One turn of the scheduler loop, as a single server's loop and a fleet's clock take it: the next batch
        scheduled and run from ``now_ms``, and an output processed. Synchronously (``EngineCore.step``) it is this
        batch's. With ``async_scheduling`` (``EngineCore.step_with_batch_queue``, core.py 708-800, two batches in
        flight) each batch is scheduled while the one before it runs, and the output processed is that one's (None
        on the first turn): a request's next decode is scheduled a step ahead (``num_output_placeholders``), and what
        the last step frees, finishes or loads is seen a schedule later. Steps run one after another. RuntimeError
        when nothing could be scheduled with nothing in flight."""
        ran = self._next_batch(self._pending)
        if self.config.async_scheduling:
            done, self._pending = self._pending, ran
        else:
            done = ran
        return None if done is None else self._complete(done)

    def step(self) -> StepOutput:
        """One synchronous ``advance``, which always has an output."""
        assert not self.config.async_scheduling, "step() is synchronous; advance() schedules ahead"
        out = self.advance()
        assert out is not None
        return out

    @property
    def idle(self) -> bool:
        """Nothing in flight, running or waiting: the engine waits for an arrival (its connector may still be busy)."""
        return self._pending is None and not self.running and not self.num_waiting

    def idle_until(self, t_ms: float) -> None:
        """Idle until an arrival at ``t_ms``, later than ``now_ms``: the connector's transfers are done first."""
        assert self.idle and t_ms > self.now_ms
        self._drain()
        self.now_ms = t_ms

    def _next_batch(self, pending: _Ran | None) -> _Ran | None:
        """Schedule and run the next batch; None when nothing is left to schedule while ``pending`` (the step in
        flight, scheduled ahead) finishes. RuntimeError when nothing could be scheduled at all."""
        working = self.connector is not None and self.connector.busy
        plan = self._plan()
        scheduled, _, preempted, loaded, _ = plan
        # A step may schedule nothing while transfers run or after preempting its one running request (a load holding
        # blocks outside the running ones), never otherwise.
        if scheduled or any(loaded) or preempted or (pending is None and working):
            return self._run(*plan)
        if pending is None:
            raise RuntimeError(f"step {len(self._dts) + 1} scheduled nothing with {self.num_waiting} requests waiting")
        return None

    def _drain(self) -> None:
        """An idle engine keeps stepping while the connector has work (``has_pending_push_work``, offloading
        scheduler.py 2198-2216): its last finishes are handed over and its stores complete before the next arrival,
        in steps that schedule nothing (not in the ledger)."""
        connector = self.connector
        while connector is not None and connector.busy:
            connector.build({})
            connector.end_step(connector.run())

    @property
    def num_waiting(self) -> int:
        """Waiting requests, those holding blocks too (``get_request_counts``, scheduler.py 2920-2922)."""
        return len(self.waiting) + len(self.holding)

    @property
    def kv_usage(self) -> float:
        """The share of GPU blocks not free (``BlockPool.get_usage``, block_pool.py 921-932): blocks whose free is
        deferred are in use."""
        return 1 - len(self.gpu.free_queue) / self.gpu.capacity_blocks

    def abort(self, f: Flight) -> None:
        """The request's client went away: it leaves the running list or its queue and lets its blocks go.

        vLLM aborts between steps (``EngineCore`` handles the abort before the
        next ``schedule``): ``Scheduler.finish_requests`` (``scheduler.py``)
        removes it from ``running`` or ``waiting``, sets FINISHED_ABORTED and
        frees its blocks (tail first, still cached until evicted).
        """
        if f.done:
            return
        if f.status == RequestStatus.RUNNING:
            self.running.remove(f)
        elif f.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            self.holding.remove(f)
        else:
            self.waiting.remove(f)
        self._free(f)
        f.status = RequestStatus.FINISHED_ABORTED

    def arrive(self, req: Request, t_ms: float) -> Flight:
        """The request joins the waiting queue at ``t_ms``, once ``check`` says the engine could ever run it."""
        self.check((req,))
        flight = Flight(req, t_ms, req.prompt_tokens, offload_evicted=[[] for _ in self.engine.offload])
        self.waiting.add(flight)
        return flight

    # -- one step ------------------------------------------------------------

    def _plan(self) -> tuple[dict[Flight, int], list[Admission], list[Flight], list[int], StepStores | None]:
        """``schedule``: the running requests, then the waiting ones, then the connector's stores."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        eligible = len(self.running) + self.num_waiting
        threshold = cfg.long_prefill_token_threshold if eligible > 1 else 0
        scheduled: dict[Flight, int] = {}
        preempted: list[Flight] = []
        self._schedule_running(budget, threshold, scheduled, preempted)
        budget -= sum(scheduled.values())
        admitted: list[Admission] = []
        loaded = [0] * len(self.engine.offload)
        if not preempted:
            self._schedule_waiting(budget, threshold, scheduled, admitted, loaded)
        stores = self.connector.build(scheduled) if self.connector is not None else None
        return scheduled, admitted, preempted, loaded, stores

    def _schedule_running(
        self, budget: int, threshold: int, scheduled: dict[Flight, int], preempted: list[Flight]
    ) -> None:
        running, limit, block = self.running, self.config.max_model_len, self.block
        i = 0
        while i < len(running) and budget > 0:
            f = running[i]
            placeholders, computed = f.placeholders, f.num_computed
            if placeholders and computed + 2 - placeholders >= f.req.prompt_tokens + f.req.output_tokens:
                i += 1  # async: the step in flight samples its last token; nothing more to schedule (scheduler.py 800-813)
                continue
            new = f.num_tokens + placeholders - computed
            if 0 < threshold < new:
                new = threshold
            if new > budget:
                new = budget
            if limit is not None and new > limit - computed - 1:
                new = limit - computed - 1  # room for the token it samples (scheduler.py 851-857)
            if new <= 0:
                i += 1
                continue
            end = computed + new
            # Most decodes stay within the request's blocks and fill none: nothing to allocate or cache then.
            if end > len(f.blocks) * block or end // block > f.num_cached_blocks:
                while not self._allocate(f, new):
                    victim = running.pop()  # FCFS: the newest running request (scheduler.py 970)
                    self._preempt(victim)
                    preempted.append(victim)
                    if victim is f:
                        return  # nothing left to preempt for it: the running loop stops (scheduler.py 978-993)
            scheduled[f] = new
            budget -= new
            i += 1

    def _schedule_waiting(
        self, budget: int, threshold: int, scheduled: dict[Flight, int], admitted: list[Admission], loaded: list[int]
    ) -> None:
        """The waiting loop (scheduler.py 1050-1612): requests holding blocks first, a request the connector cannot
        answer yet (or still loading) skipped and put back at the front after the loop (1054-1060, 1598-1602)."""
        skipped: list[Flight] = []
        try:
            self._admit(budget, threshold, scheduled, admitted, loaded, skipped)
        finally:
            for f in reversed(skipped):
                (self.holding if f.status is RequestStatus.WAITING_FOR_REMOTE_KVS else self.waiting).prepend(f)

    def _admit(
        self, budget: int, threshold: int, scheduled: dict[Flight, int], admitted: list[Admission], loaded: list[int],
        skipped: list[Flight],
    ) -> None:
        cfg, gpu, engine, block, connector = self.config, self.gpu, self.engine, self.block, self.connector
        while budget > 0 and len(self.running) < cfg.max_num_seqs:
            queue = self.holding or self.waiting
            if not queue:
                return
            f = queue.peek()
            req = f.req
            if f.stale:
                skipped.append(queue.pop())  # its output still in flight from before its preemption (1076-1081)
                continue
            if f.status is RequestStatus.WAITING_FOR_REMOTE_KVS:
                if not f.load_done:
                    skipped.append(queue.pop())  # _handle_blocked_waiting_request (3519-3528)
                    continue
                self._loaded(f)
            if engine.future is not None:
                engine.future.now = req.seq
            if f.num_computed:  # its CPU hit loaded: no lookup again (scheduler.py 1262-1273)
                hit_blocks: list[int] = []
                gpu_hit, ext, hit_end = f.gpu_hit, f.ext, f.num_computed
                assert ext is not None
            else:
                hit_blocks = gpu.find_prefix(req.block_keys, (f.num_tokens - 1) // block)
                gpu_hit = len(hit_blocks) * block
                if connector is not None:
                    found = connector.lookup(f, gpu_hit)
                    if found is None:
                        skipped.append(queue.pop())  # the connector cannot tell yet (scheduler.py 1146-1151)
                        continue
                    ext = found
                elif engine.lmcache and engine.offload:
                    # LMCache looks a request up once and answers again from its lookup cache until the request is
                    # admitted (``vllm_v1_adapter.py`` 1381-1432): a request left waiting does not refresh its chunks
                    # again; what it loads is recounted against the GPU hit of the moment.
                    if f.lmcache_hit is None:
                        f.lmcache_hit = engine.lmcache_lookup(req)
                    ext = engine.lmcache_load(req, gpu_hit, f.lmcache_hit)
                else:
                    ext = engine.lookup_offload(req, gpu_hit)
                hit_end = max(gpu_hit, ext.aligned)
                if engine.observer is not None and f.first is None:
                    f.explained = engine.observer(req, gpu_hit, hit_end)  # at lookup time, as Engine.process
                if connector is not None and hit_end > gpu_hit:
                    # Every native hit loads asynchronously: blocks for the hit, nothing to compute this step
                    # (scheduler.py 1286-1289); the loaded blocks are cached once the load is done (1442, 3499).
                    reserved = self._inflight_reserved(skipped)
                    if not self._allocate(f, 0, hit_blocks, hit_end - gpu_hit, cache=False, reserved=reserved):
                        return
                    connector.start_load(f, ext, gpu_hit)
                    loaded[0] += ext.tokens[0]
                    self._taken(f, gpu_hit, ext, hit_end)
                    f.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                    skipped.append(queue.pop())  # scheduler.py 1514-1546
                    continue
            new = f.num_tokens - hit_end
            if 0 < threshold < new:
                new = threshold
            if not cfg.enable_chunked_prefill and new > budget:
                return
            new = min(new, budget)
            if not self._allocate(f, new, hit_blocks, 0 if f.num_computed else hit_end - gpu_hit):
                return  # admission stops behind a request that cannot get its blocks (scheduler.py 1454-1461)
            queue.pop()
            self.running.append(f)
            if not f.num_computed:
                self._taken(f, gpu_hit, ext, hit_end)
                for t, tokens in enumerate(ext.tokens):
                    loaded[t] += tokens
            f.status = RequestStatus.RUNNING
            f.lmcache_hit = None  # uncached once the request is allocated (update_state_after_alloc)
            f.num_computed = hit_end
            f.store_pending = True
            f.admissions.append(hit_end)
            admitted.append(Admission(f.seq, hit_end))
            scheduled[f] = new
            budget -= new

    def _taken(self, f: Flight, gpu_hit: int, ext: _External, hit_end: int) -> None:
        """The scheduler has taken the request up (its load started, or it runs): the admission's hits."""
        if f.first is None:
            f.first = (gpu_hit, ext, f.req.prompt_tokens - hit_end)
            f.first_step = len(self._dts)
            self.queue_ms[f.seq] = self.now_ms - f.arrival_ms
        f.num_computed = hit_end
        f.gpu_hit, f.hit_end, f.ext = gpu_hit, hit_end, ext

    def _loaded(self, f: Flight) -> None:
        """``_update_waiting_for_remote_kv`` (scheduler.py 3467-3517): cache the loaded blocks, back to waiting."""
        req, block = f.req, self.block
        to_cache = min(f.num_computed // block, len(req.block_keys))
        if to_cache > f.num_cached_blocks:
            self.gpu.cache_blocks(f.blocks, req.block_keys[:to_cache], f.num_cached_blocks, req.doc, req.shared_blocks)
            f.num_cached_blocks = to_cache
        f.status = RequestStatus.PREEMPTED if f.preemptions else RequestStatus.WAITING
        f.load_done = False

    def _run(
        self, scheduled: dict[Flight, int], admitted: list[Admission], preempted: list[Flight], loaded: list[int],
        stores: StepStores | None = None,
    ) -> _Ran:
        """Run the step's batch: advance computed tokens (``_update_after_schedule``), store finished prefills, price
        the step and take its time."""
        engine, connector = self.engine, self.connector
        prefill = context = decodes = 0
        stored = [0] * len(engine.offload)
        written = 0
        inflight = None
        if connector is not None and stores is not None:
            stored[0] = sum(stores.added.values())
            inflight = connector.run()  # the stores built in the last schedule are copied out during this step
            if not scheduled and not any(loaded):
                # No forward pass and nothing loaded: the step lasts its stores. Loads run beside stores (the worker's
                # two directions have their own streams), so a loading step lasts its loads.
                written = inflight.store_tokens
        sampling: list[Flight] = []
        ahead = self.config.async_scheduling
        step = self._scheduled_steps + 1
        for f, new in scheduled.items():
            computed, placeholders, num_tokens = f.num_computed, f.placeholders, f.num_tokens
            # A decode computes the KV of the last known token (a placeholder's, scheduled ahead, async_scheduler.py)
            if new == 1 and (f.num_output or placeholders) and computed == num_tokens + placeholders - 1:
                decodes += 1
                context += computed
            else:
                prefill += new
            computed += new
            f.num_computed = computed
            f.last_scheduled = step
            if computed >= num_tokens + placeholders:
                sampling.append(f)  # not a prefill chunk: it samples a token
                if ahead:
                    f.placeholders += 1  # async_scheduler.py 24-49
            if f.store_pending and computed >= num_tokens and connector is None:
                f.store_pending = False
                assert f.ext is not None
                by_tier, copied = engine.store_offload(f.req, f.gpu_hit, f.hit_end, f.ext, f.offload_evicted)
                f.written += copied
                written += copied
                for t, by_doc in enumerate(by_tier):
                    stored[t] += sum(by_doc.values())
        # A step that schedules nothing runs no forward pass (its loads alone, gpu_model_runner's no-forward path):
        # it lasts its transfers, without the fixed cost.
        dt = self.costs.step_ms(engine.offload_specs, prefill, loaded, written, decodes, context, forward=bool(scheduled))
        self._scheduled_steps += 1
        start = self.now_ms
        self._starts.append(start)
        self._dts.append(dt)
        self.now_ms = start + dt
        return _Ran(
            scheduled, admitted, preempted, loaded, stored, stores, sampling, inflight, len(self._dts) - 1,
            prefill, decodes, len(self.refs),
        )

    def _complete(self, ran: _Ran) -> StepOutput:
        """``update_from_output``: the step's transfers done, its tokens sampled, finished requests freed."""
        engine, connector = self.engine, self.connector
        index, scheduled, stores = ran.index, ran.scheduled, ran.stores
        self._processed_steps += 1
        self._drain_deferred_frees()
        if connector is not None and ran.inflight is not None:
            connector.end_step(ran.inflight)
        finished: list[int] = []
        gone: list[Flight] = []
        limit = self.config.max_model_len
        ahead = self.config.async_scheduling
        step = index + 1
        for f in ran.sampling:
            if f.stale:
                f.stale -= 1  # preempted since: its token is delivered, its placeholders were reset (scheduler.py 1830)
            elif ahead:
                f.placeholders -= 1
            f.num_output += 1
            f.num_tokens += 1
            if f.first_token_step < 0:
                f.first_token_step = step
                f.ttft_ms = self._elapsed(f, index)
            if f.num_output >= f.req.output_tokens or (limit is not None and f.num_tokens >= limit):
                if f.status is RequestStatus.PREEMPTED:
                    self.waiting.remove(f)  # stopped by output in flight when it was preempted (scheduler.py 2548)
                f.status = RequestStatus.FINISHED_LENGTH_CAPPED
                f.e2e_ms = self._elapsed(f, index)
                self._free(f)
                if connector is not None:
                    connector.request_finished(f)
                finished.append(f.seq)
                gone.append(f)
        if gone:
            left = set(gone)
            self.running = [f for f in self.running if f not in left]
        start, dt, prefill, decode, loaded, stored = (
            self._starts[index], self._dts[index], ran.prefill, ran.decode, ran.loaded, ran.stored,
        )
        preempted, admitted = ran.preempted, ran.admitted
        names = self._tier_names
        return StepOutput(
            step=step, t_ms=start, dt_ms=dt, scheduled={f.seq: n for f, n in scheduled.items()},
            admitted=admitted, preempted=[f.seq for f in preempted], finished=finished,
            free_blocks=len(self.gpu.free_queue), running=len(self.running), waiting=self.num_waiting,
            prefill_tokens=prefill, decode_tokens=decode,
            loaded={n: t for n, t in zip(names, loaded) if t} if any(loaded) else {},
            stored={n: t for n, t in zip(names, stored) if t} if any(stored) else {},
            held_blocks=ran.held,
            refused={names[0]: stores.refused} if stores is not None and stores.refused else {},
            dropped={names[0]: stores.dropped_tokens} if stores is not None and stores.dropped_tokens else {},
        )

    def _elapsed(self, f: Flight, index: int) -> float:
        """From the request's arrival to the end of step ``index``: its wait for a first admission, then the steps
        since, summed from 0 so that one step alone is its own duration exactly."""
        return (self._starts[f.first_step] - f.arrival_ms) + sum(self._dts[f.first_step : index + 1])

    # -- blocks ----------------------------------------------------------------

    def _inflight_reserved(self, skipped: Sequence[Flight]) -> int:
        """Blocks the prefills in flight (running ones not yet through their prompt, and loads) still need to hold
        their whole sequence (``_inflight_prefill_reserved_blocks``, scheduler.py 3404-3437): an asynchronous load
        is admitted only within the free blocks beyond them (1422-1431), so two loads never wait on each other."""
        block = self.block
        flights = [f for f in self.running if f.num_computed < f.num_tokens]
        flights += [f for f in (*self.holding, *skipped) if f.num_computed]  # loading, or loaded and waiting
        return sum(max(-(-f.num_tokens // block) - len(f.blocks), 0) for f in flights)

    def _allocate(
        self, f: Flight, new: int, hit_blocks: Sequence[int] = (), external: int = 0, cache: bool = True,
        reserved: int = 0,
    ) -> bool:
        """``allocate_slots``: blocks for the computed tokens (hits included) plus ``new``; False if they do not fit
        in the free blocks less ``reserved``. Without ``cache`` (an asynchronous load, ``delay_cache_blocks``) only
        the GPU hit's blocks are cached."""
        gpu, block, refs = self.gpu, self.block, self.refs
        gpu.eviction_seq = f.seq  # what this allocation evicts, this request evicts (sim.explain)
        free = len(gpu.free_queue)
        evictable = sum(1 for b in hit_blocks if b not in refs)  # hits sitting in the free queue
        computed = f.num_computed + len(hit_blocks) * block + external
        held = len(f.blocks) + len(hit_blocks)
        admitting = f.status.is_waiting
        if admitting and self.config.scheduler_reserve_full_isl:
            if max(-(-f.num_tokens // block) - held, 0) + evictable > free:
                return False
        need = max(-(-(computed + new) // block) - held, 0)
        if need + evictable > free - reserved:  # kv_cache_manager.py 582-588
            return False
        if hit_blocks:
            gpu.touch([b for b in hit_blocks if b not in refs])
            for b in hit_blocks:
                refs[b] = refs.get(b, 0) + 1
            f.blocks = list(hit_blocks)
            f.num_cached_blocks = len(hit_blocks)
        if need:
            fresh = gpu.allocate(need, f.evictions)
            refs.update(dict.fromkeys(fresh, 1))
            f.blocks.extend(fresh)
        req = f.req
        to_cache = min(min(computed + new, f.num_tokens) // block, len(req.block_keys))
        if cache and to_cache > f.num_cached_blocks:
            gpu.cache_blocks(f.blocks, req.block_keys[:to_cache], f.num_cached_blocks, req.doc, req.shared_blocks)
            f.num_cached_blocks = to_cache
        return True

    def _free(self, f: Flight) -> None:
        """Let go of the request's blocks; those no other request holds return to the free queue, tail first."""
        refs, blocks = self.refs, f.blocks
        if max(map(refs.__getitem__, blocks), default=1) == 1:  # nothing shared (the usual case): all go back
            deque(map(refs.pop, blocks), maxlen=0)
            released, hashed = blocks, f.num_cached_blocks
        else:
            released, hashed = [], 0
            for i, b in enumerate(blocks):
                left = refs[b] - 1
                if left:
                    refs[b] = left
                    continue
                del refs[b]
                released.append(b)
                hashed += i < f.num_cached_blocks
        if released:
            if self.defer_free and f.last_scheduled > self._processed_steps:
                # A step in flight may still write them: back to the pool when its output is processed (3084-3093).
                self._deferred.append((self._scheduled_steps, released, hashed))
            else:
                self.gpu.free(released, hashed)  # the hashed blocks are the first ones: cached from the prompt's start
        f.blocks = []
        f.num_cached_blocks = 0

    def _drain_deferred_frees(self) -> None:
        """``_drain_deferred_frees`` (scheduler.py 3106-3119): blocks whose fence step's output is processed."""
        deferred = self._deferred
        while deferred and deferred[0][0] <= self._processed_steps:
            _, blocks, hashed = deferred.popleft()
            self.gpu.free(blocks, hashed)

    def _preempt(self, f: Flight) -> None:
        self._free(f)
        f.stale, f.placeholders = f.placeholders, 0  # async: its output in flight is stale (scheduler.py 1822-1836)
        f.status = RequestStatus.PREEMPTED
        f.num_computed = 0
        f.store_pending = False
        f.preemptions += 1
        self.waiting.prepend(f)

    def record(self, f: Flight) -> RequestRecord:
        """The finished request's record, as the sequential engine writes it."""
        assert f.first is not None
        gpu_hit, ext, computed = f.first
        record = self.engine.record(
            f.req, gpu_hit, ext, computed, f.written, round(f.ttft_ms, 3), f.evictions, f.offload_evicted
        )
        if f.explained is not None:
            record.gpu_miss, record.computed, record.evicted_misses, record.infinite_hit_tokens = f.explained
        return record
