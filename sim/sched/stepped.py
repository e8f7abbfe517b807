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
Not modelled: asynchronous scheduling, vLLM's native offloading connector
(its loads are asynchronous), priorities, the watermark, speculative decoding.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sim.blocks.request import Request
from sim.bounds.budget import checkpoint
from sim.engine.loop import Engine, RequestRecord
from sim.sched.arrivals import Arrivals, ClosedLoop
from sim.sched.config import SchedulerConfig
from sim.sched.flight import Flight
from sim.sched.output import Admission, StepOutput
from sim.sched.queue import FcfsQueue
from sim.sched.status import RequestStatus
from sim.sched.step_costs import StepCosts


@dataclass(slots=True)
class SteppedRun:
    """A stepped run's outcome: records as the sequential engine's (by seq), the flights, and the step ledger."""

    records: list[RequestRecord]
    flights: list[Flight]
    steps: list[StepOutput]
    queue_ms: dict[int, float]


class SteppedEngine:
    """vLLM's scheduler loop over one ``Engine``'s GPU pool and offload tiers.

    ``steps(requests, arrivals)`` yields each step's ``StepOutput``; between
    two steps the pool, the tiers, ``running`` and ``waiting`` may be read.
    """

    def __init__(self, engine: Engine, config: SchedulerConfig | None = None, costs: StepCosts | None = None) -> None:
        self.config = config or SchedulerConfig()
        if self.config.async_scheduling:
            raise ValueError("async_scheduling: not modelled; the stepped engine runs vLLM's synchronous loop (False)")
        if engine.native and engine.offload:
            raise ValueError("cpu_backend vllm-native: its asynchronous loads are not modelled by the stepped engine")
        if engine.observer is not None:
            raise ValueError("the stepped engine does not explain misses; detach the observer")
        self.engine = engine
        self.gpu = engine.gpu
        self.block = engine.units.block
        self.costs = costs or StepCosts.from_request_costs(engine.costs)
        self.running: list[Flight] = []
        self.waiting: FcfsQueue[Flight] = FcfsQueue()
        self.refs: dict[int, int] = {}  # block id -> running requests holding it (vLLM's ref_cnt), held blocks only
        self.now_ms = 0.0
        self._starts: list[float] = []
        self._dts: list[float] = []
        self._queue_ms: dict[int, float] = {}

    # -- the run -------------------------------------------------------------

    def run(self, requests: Sequence[Request], arrivals: Arrivals = ClosedLoop(1)) -> SteppedRun:
        flights: list[Flight] = []
        steps = list(self.steps(requests, arrivals, flights))
        flights.sort(key=lambda f: f.seq)
        records = [self._record(f) for f in flights]
        return SteppedRun(records, flights, steps, dict(self._queue_ms))

    def steps(self, requests: Sequence[Request], arrivals: Arrivals, flights: list[Flight] | None = None) -> Iterator[StepOutput]:
        """Run every request to its end, one step at a time; ``flights`` collects each request as it arrives."""
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
            limit = self.config.max_model_len
            if limit is not None and req.prompt_tokens >= limit:
                raise ValueError(f"request {req.seq}: prompt of {req.prompt_tokens} tokens is not below max_model_len ({limit})")
        self.engine.plan(list(requests))
        arrived = flights if flights is not None else []
        times = None if isinstance(arrivals, ClosedLoop) else arrivals.times_ms(len(requests))
        nxt = 0
        if times is None:
            assert isinstance(arrivals, ClosedLoop)
            for req in requests[: arrivals.concurrency]:
                arrived.append(self._arrive(req, 0.0))
            nxt = len(arrived)
        finished = 0
        while finished < len(requests):
            if times is not None:
                while nxt < len(requests) and times[nxt] <= self.now_ms:
                    arrived.append(self._arrive(requests[nxt], times[nxt]))
                    nxt += 1
                if not self.running and not self.waiting:
                    self.now_ms = times[nxt]  # idle until the next arrival
                    continue
            checkpoint()
            out = self.step()
            if not out.scheduled:
                raise RuntimeError(f"step {out.step} scheduled nothing with {len(self.waiting)} requests waiting")
            finished += len(out.finished)
            if times is None:
                for _ in out.finished:
                    if nxt < len(requests):
                        arrived.append(self._arrive(requests[nxt], self.now_ms))
                        nxt += 1
            yield out

    def queue_ms(self, seq: int) -> float | None:
        """How long request ``seq`` waited from its arrival to its first admission (None: not admitted yet)."""
        return self._queue_ms.get(seq)

    def _arrive(self, req: Request, t_ms: float) -> Flight:
        flight = Flight(req, t_ms, req.prompt_tokens, offload_evicted=[[] for _ in self.engine.offload])
        self.waiting.add(flight)
        return flight

    # -- one step ------------------------------------------------------------

    def step(self) -> StepOutput:
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        eligible = len(self.running) + len(self.waiting)
        threshold = cfg.long_prefill_token_threshold if eligible > 1 else 0
        scheduled: dict[Flight, int] = {}
        preempted: list[Flight] = []
        self._schedule_running(budget, threshold, scheduled, preempted)
        budget -= sum(scheduled.values())
        admitted: list[Admission] = []
        loaded = [0] * len(self.engine.offload)
        if not preempted:
            self._schedule_waiting(budget, threshold, scheduled, admitted, loaded)
        return self._execute(scheduled, admitted, preempted, loaded)

    def _schedule_running(
        self, budget: int, threshold: int, scheduled: dict[Flight, int], preempted: list[Flight]
    ) -> None:
        running, limit, block = self.running, self.config.max_model_len, self.block
        i = 0
        while i < len(running) and budget > 0:
            f = running[i]
            new = f.num_tokens - f.num_computed
            if 0 < threshold < new:
                new = threshold
            new = min(new, budget)
            if limit is not None:
                new = min(new, limit - f.num_computed - 1)  # room for the token it samples (scheduler.py 851-857)
            if new <= 0:
                i += 1
                continue
            end = f.num_computed + new
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
        cfg, gpu, engine, block = self.config, self.gpu, self.engine, self.block
        while budget > 0 and self.waiting and len(self.running) < cfg.max_num_seqs:
            f = self.waiting.peek()
            req = f.req
            if engine.future is not None:
                engine.future.now = req.seq
            hit_blocks = gpu.find_prefix(req.block_keys, (f.num_tokens - 1) // block)
            gpu_hit = len(hit_blocks) * block
            if engine.lmcache and engine.offload:
                # LMCache looks a request up once and answers again from its lookup cache until the request is
                # admitted (``vllm_v1_adapter.py`` 1381-1432): a request left waiting does not refresh its chunks
                # again; what it loads is recounted against the GPU hit of the moment.
                if f.lmcache_hit is None:
                    f.lmcache_hit = engine.lmcache_lookup(req)
                ext = engine.lmcache_load(req, gpu_hit, f.lmcache_hit)
            else:
                ext = engine.lookup_offload(req, gpu_hit)
            hit_end = max(gpu_hit, ext.aligned)
            new = f.num_tokens - hit_end
            if 0 < threshold < new:
                new = threshold
            if not cfg.enable_chunked_prefill and new > budget:
                return
            new = min(new, budget)
            if not self._allocate(f, new, hit_blocks, hit_end - gpu_hit):
                return  # admission stops behind a request that cannot get its blocks (scheduler.py 1454-1461)
            self.waiting.pop()
            self.running.append(f)
            if f.first is None:
                f.first = (gpu_hit, ext, req.prompt_tokens - hit_end)
                f.first_step = len(self._dts)
                self._queue_ms[f.seq] = self.now_ms - f.arrival_ms
            f.status = RequestStatus.RUNNING
            f.lmcache_hit = None  # uncached once the request is allocated (update_state_after_alloc)
            f.num_computed = hit_end
            f.gpu_hit, f.hit_end, f.ext, f.store_pending = gpu_hit, hit_end, ext, True
            f.admissions.append(hit_end)
            admitted.append(Admission(f.seq, hit_end))
            for t, tokens in enumerate(ext.tokens):
                loaded[t] += tokens
            scheduled[f] = new
            budget -= new

    def _execute(
        self, scheduled: dict[Flight, int], admitted: list[Admission], preempted: list[Flight], loaded: list[int]
    ) -> StepOutput:
        """Run the step's batch: advance computed tokens, store finished prefills, price the step, sample, finish."""
        engine = self.engine
        prefill = decode = context = decodes = 0
        stored = [0] * len(engine.offload)
        written = 0
        for f, new in scheduled.items():
            if new == 1 and f.num_output and f.num_computed == f.num_tokens - 1:
                decodes += 1
                decode += 1
                context += f.num_computed
            else:
                prefill += new
            f.num_computed += new
            if f.store_pending and f.num_computed >= f.num_tokens:
                f.store_pending = False
                assert f.ext is not None
                by_tier, copied = engine.store_offload(f.req, f.gpu_hit, f.hit_end, f.ext, f.offload_evicted)
                for t, by_doc in enumerate(by_tier):
                    stored[t] += sum(by_doc.values())
                f.written += copied
                written += copied
        dt = self.costs.step_ms(engine.offload_specs, prefill, loaded, written, decodes, context)
        start = self.now_ms
        self._starts.append(start)
        self._dts.append(dt)
        self.now_ms = start + dt
        index = len(self._dts) - 1
        finished: list[int] = []
        limit = self.config.max_model_len
        for f, _ in scheduled.items():
            if f.num_computed < f.num_tokens:
                continue  # a prefill chunk: no token yet
            f.num_output += 1
            f.num_tokens += 1
            if f.first_token_step < 0:
                f.first_token_step = index + 1
                f.ttft_ms = self._elapsed(f, index)
            if f.num_output >= f.req.output_tokens or (limit is not None and f.num_tokens >= limit):
                f.status = RequestStatus.FINISHED_LENGTH_CAPPED
                f.e2e_ms = self._elapsed(f, index)
                self._free(f)
                finished.append(f.seq)
        if finished:
            self.running = [f for f in self.running if not f.done]
        names = [s.name for s in engine.offload]
        return StepOutput(
            step=index + 1, t_ms=start, dt_ms=dt, scheduled={f.seq: n for f, n in scheduled.items()},
            admitted=admitted, preempted=[f.seq for f in preempted], finished=finished,
            free_blocks=len(self.gpu.free_queue), running=len(self.running), waiting=len(self.waiting),
            prefill_tokens=prefill, decode_tokens=decode,
            loaded={n: t for n, t in zip(names, loaded) if t}, stored={n: t for n, t in zip(names, stored) if t},
        )

    def _elapsed(self, f: Flight, index: int) -> float:
        """From the request's arrival to the end of step ``index``: its wait for a first admission, then the steps
        since, summed from 0 so that one step alone is its own duration exactly."""
        return (self._starts[f.first_step] - f.arrival_ms) + sum(self._dts[f.first_step : index + 1])

    # -- blocks ----------------------------------------------------------------

    def _allocate(self, f: Flight, new: int, hit_blocks: Sequence[int] = (), external: int = 0) -> bool:
        """``allocate_slots``: blocks for the computed tokens (hits included) plus ``new``; False if they do not fit."""
        gpu, block, refs = self.gpu, self.block, self.refs
        free = len(gpu.free_queue)
        evictable = sum(1 for b in hit_blocks if b not in refs)  # hits sitting in the free queue
        computed = f.num_computed + len(hit_blocks) * block + external
        held = len(f.blocks) + len(hit_blocks)
        admitting = f.status.is_waiting
        if admitting and self.config.scheduler_reserve_full_isl:
            if max(-(-f.num_tokens // block) - held, 0) + evictable > free:
                return False
        need = max(-(-(computed + new) // block) - held, 0)
        if need + evictable > free:
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
        if to_cache > f.num_cached_blocks:
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
            self.gpu.free(released, hashed)  # the hashed blocks are the first ones: cached from the prompt's start
        f.blocks = []
        f.num_cached_blocks = 0

    def _preempt(self, f: Flight) -> None:
        self._free(f)
        f.status = RequestStatus.PREEMPTED
        f.num_computed = 0
        f.store_pending = False
        f.preemptions += 1
        self.waiting.prepend(f)

    def _record(self, f: Flight) -> RequestRecord:
        assert f.first is not None
        gpu_hit, ext, computed = f.first
        return self.engine.record(
            f.req, gpu_hit, ext, computed, f.written, round(f.ttft_ms, 3), f.evictions, f.offload_evicted
        )
