"""The emulator's engine room: vLLM's scheduler (the stepped engine) run against the wall clock, and its counters.

Requests are batched as vLLM batches them: one engine loop runs
``SteppedEngine`` steps back to back while any request is running or
waiting, each step lasting its modelled time / speed on the wall clock, and
every token a step samples is handed to its request's answer when the step
ends. A request enters the engine at its arrival (stamped before its body
was read), so the emulator's own processing (reading, tokenizing, hashing)
is not added to its TTFT: an idle engine starts its next step at the
arrival, and a busy one takes the request into the first step that starts
after it (as vLLM's engine core takes new requests between steps). A request
still being read when a step began missed that step: the engine sees it
arrive just after that step's start, so that its run is exactly the stepped
engine's offline run at those arrivals (``engine_arrival_ms``). The
engine's clock is the model's (``now_ms``); the wall clock is
``epoch + model ms / speed``, so a late wake-up delays one release, never
the schedule. A client that leaves aborts its request at the next step
boundary (``SteppedEngine.abort``), as vLLM aborts between steps.

The counters move as vLLM v1's do, at admission (``scheduler.py`` 1507-1512,
"record at admission so unscheduled lookups are not counted"):

- ``prefix_cache_queries`` += the request's tokens, ``prefix_cache_hits`` +=
  its GPU hit (``kv_cache_manager.py`` 255-264, ``request.num_tokens``);
- with a CPU tier, ``external_prefix_cache_queries`` += tokens minus the GPU
  hit (what vLLM asks its KV connector for) and ``external_prefix_cache_hits``
  += tokens loaded; without one both stay 0 (vLLM exports them whether or not
  a connector is configured);
- the scheduler's gauges are the last step's (``make_stats`` runs in
  ``update_from_output``: after the step, before later arrivals are queued).

``/metrics`` renders these same numbers, so an outside observer's deltas equal
the engine's records.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import logging
import math
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from app.emulator.config import EmulatorConfig
from app.emulator.deadline import sleep_until
from app.emulator.kv_events import KvEventsBridge, StepStore
from sim.blocks.prompt_keys import request_for_tokens
from sim.blocks.request import Request, Units
from sim.costs.model import default_costs
from sim.engine.loop import Engine, TierSpec
from sim.sched.config import SchedulerConfig
from sim.sched.flight import Flight
from sim.sched.output import StepOutput
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine

# vLLM's buckets for vllm:time_to_first_token_seconds.
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
    80.0, 160.0, 640.0, 2560.0,
)
# How long before a step ends its wait stops sleeping and starts yielding (see deadline.sleep_until): about a
# sleeping process's wake-up on a busy two-core machine.
STEP_SPIN_S = 0.0002
# Records and steps kept for /kvscope/emulator; older ones are dropped so a long-running emulator stays small.
KEPT_RECORDS = 10_000
KEPT_STEPS = 10_000

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Counters:
    """vLLM's cumulative counters, in tokens and requests."""

    requests: int = 0
    finished: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    external_prefix_cache_queries: int = 0
    external_prefix_cache_hits: int = 0
    preemptions: int = 0
    ttft_bucket_counts: list[int] = field(default_factory=lambda: [0] * len(TTFT_BUCKETS_S))
    ttft_count: int = 0
    ttft_sum_s: float = 0.0

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_count += 1
        self.ttft_sum_s += seconds
        for i, bound in enumerate(TTFT_BUCKETS_S):
            if seconds <= bound:
                self.ttft_bucket_counts[i] += 1

    def to_dict(self) -> dict[str, Any]:
        """The token and request counters (the TTFT histogram is in ``/metrics``)."""
        return {k: v for k, v in asdict(self).items() if not k.startswith("ttft_")}


@dataclass(slots=True, eq=False)  # one object per request, compared by identity
class Prefill:
    """One served request's first admission: what it hit, the engine's TTFT (queueing included), its delay (TTFT /
    speed), the time it queued before its first step, and when its first token was due and released."""

    seq: int
    prompt_tokens: int
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    computed_tokens: int
    ttft_ms: float
    delay_ms: float
    queued_ms: float
    first_token_step: int
    engine_arrival_ms: float  # on the engine's clock (model ms, unrounded): what an offline run takes as arrivals
    arrived: float
    started: float
    due: float
    released: float = 0.0

    @property
    def cached_tokens(self) -> int:
        """vLLM's ``num_cached_tokens``: local and external hits."""
        return self.gpu_hit_tokens + self.cpu_hit_tokens

    def to_dict(self, epoch: float) -> dict[str, Any]:
        """The record as ``/kvscope/emulator`` shows it; its arrival, first step's start and due times in ms since
        ``epoch``."""
        hidden = ("arrived", "started", "due", "released")  # internal: perf_counter seconds
        out = {k: v for k, v in asdict(self).items() if k not in hidden}
        out["arrival_ms"] = round((self.arrived - epoch) * 1000, 3)
        out["start_ms"] = round((self.started - epoch) * 1000, 3)
        out["due_ms"] = round((self.due - epoch) * 1000, 3)
        # How long after its deadline the first token was handed to the server to send: the emulator's own
        # lateness (processing that outran the deadline, a late wake-up), apart from loopback and the client.
        out["late_ms"] = round((self.released - self.due) * 1000, 3) if self.released else None
        return out


@dataclass(slots=True, eq=False)
class Ticket:
    """One prompt in the engine: its tokens, where its sampled tokens go (``inbox``: (key, token index)), and its
    engine state once it has entered the engine."""

    request: Request
    tokens: list[int]
    arrived: float
    inbox: asyncio.Queue[tuple[int, int]]
    key: int
    flight: Flight | None = None
    engine_arrival_ms: float = 0.0  # when the engine saw it arrive, on its clock (see ``Backend.submit``)
    started: float = 0.0  # when the step that first admitted it started (perf_counter seconds)
    sampled: int = 0
    aborted: bool = False
    prefill: Prefill | None = None

    @property
    def finished(self) -> bool:
        return self.sampled >= self.request.output_tokens


class Backend:
    """Serves requests through the stepped engine on the wall clock and keeps vLLM's counters of them."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.units = Units(config.block_size, config.chunk_size)
        tiers = TierSpec(units=self.units, gpu_tokens=config.gpu_tokens, cpu_tokens=config.cpu_tokens)
        self.engine = Engine("emulator", tiers, config.costs or default_costs())
        self.scheduler = SchedulerConfig(
            max_num_batched_tokens=config.max_num_batched_tokens, max_num_seqs=config.max_num_seqs,
            max_model_len=config.context_tokens,
        )
        self.stepped = SteppedEngine(self.engine, self.scheduler, StepCosts.from_request_costs(self.engine.costs))
        self.counters = Counters()
        self.records: deque[Prefill] = deque(maxlen=KEPT_RECORDS)
        self.steps: deque[tuple[float, float, StepOutput]] = deque(maxlen=KEPT_STEPS)  # (due end, released, step)
        # (running, waiting, free blocks) as the last step left them: the scheduler's stats, made after each step.
        self._gauges = (0, 0, self.engine.gpu.capacity_blocks)
        # Set by ``kvscope emulate --kv-events``: publishes what each step did to the tiers.
        self.kv_events: KvEventsBridge | None = None
        self.epoch = time.perf_counter()  # the engine's clock starts here; records give their times from here
        self._seq = 0
        self._tickets: dict[int, Ticket] = {}  # seq -> ticket, from submission to the end
        self._pending: list[tuple[float, int, Ticket]] = []  # (engine arrival ms, seq, ticket): not in the engine yet
        self._latest_start_ms = -math.inf  # the start of the latest step taken (model ms)
        self._aborts: list[Ticket] = []
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    @property
    def has_cpu_tier(self) -> bool:
        return self.engine.cpu is not None

    # -- what /metrics reads ------------------------------------------------------

    @property
    def running(self) -> int:
        """vLLM's ``num_requests_running``, as of the last step."""
        return self._gauges[0]

    @property
    def waiting(self) -> int:
        """vLLM's ``num_requests_waiting``, as of the last step."""
        return self._gauges[1]

    @property
    def kv_cache_usage(self) -> float:
        """vLLM's ``kv_cache_usage_perc`` as of the last step: 1 - free blocks / usable blocks (``block_pool.py``
        921-931); free blocks include cached ones nobody holds, so it counts what running requests hold."""
        return 1.0 - self._gauges[2] / self.engine.gpu.capacity_blocks

    # -- requests -------------------------------------------------------------------

    def submit(self, tokens: list[int], output_tokens: int, arrived: float, inbox: asyncio.Queue[tuple[int, int]], key: int) -> Ticket:
        """Queue one prompt for the engine: it enters at its arrival (``time.perf_counter()``), generates
        ``output_tokens``, and each sampled token's index is put in ``inbox`` with ``key`` when its step ends.
        Nothing here awaits: prompts submitted together enter together."""
        block = self.units.block
        request = dataclasses.replace(
            request_for_tokens(tokens, self.units, seq=self._seq),
            output_tokens=output_tokens, alloc_blocks=-(-(len(tokens) + output_tokens - 1) // block),
        )
        self.stepped.check([request])
        self._seq += 1
        ticket = Ticket(request, tokens, arrived, inbox, key)
        self._tickets[request.seq] = ticket
        # When the engine sees it arrive: at its arrival, unless a step began while it was being read (it missed
        # that step, as it would have on a server that is only told of a request once it has read it): then just
        # after that step's start. The engine's run is then the one Timed(these arrivals) gives offline.
        ticket.engine_arrival_ms = max(self._model_ms(arrived), math.nextafter(self._latest_start_ms, math.inf))
        bisect.insort(self._pending, (ticket.engine_arrival_ms, request.seq, ticket))
        if self._loop is None or self._loop.done():  # the first request, or the first on a new event loop
            self._wake = asyncio.Event()
            self._loop = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()
        return ticket

    def abort(self, ticket: Ticket) -> None:
        """The prompt's client went away: it leaves the engine at the next step boundary (its tokens stop)."""
        if ticket.aborted or ticket.finished:
            return
        ticket.aborted = True
        if ticket.flight is None:
            self._pending = [p for p in self._pending if p[2] is not ticket]
            del self._tickets[ticket.request.seq]
        else:
            self._aborts.append(ticket)

    def finish(self, ticket: Ticket, generated_tokens: int) -> None:
        """The answer's last token for this prompt was sent."""
        self.counters.generation_tokens += generated_tokens
        self.counters.finished += 1

    # -- the engine loop ------------------------------------------------------------

    def _model_ms(self, wall: float) -> float:
        return (wall - self.epoch) * 1000 * self.config.speed

    def _wall(self, model_ms: float) -> float:
        return self.epoch + model_ms / 1000 / self.config.speed

    async def _run(self) -> None:
        stepped = self.stepped
        try:
            while True:
                self._apply_aborts()
                if not stepped.running and not stepped.waiting:
                    if not self._pending:
                        self._wake.clear()
                        await self._wake.wait()
                        continue
                    # Idle: the next step starts when the first request arrived, never before the last step ended.
                    stepped.now_ms = max(stepped.now_ms, self._pending[0][0])
                start = stepped.now_ms
                while self._pending and self._pending[0][0] <= start:
                    arrived, _, ticket = self._pending.pop(0)
                    ticket.flight = stepped.arrive(ticket.request, arrived)
                if not stepped.running and not stepped.waiting:
                    continue
                self._latest_start_ms = start
                out = self._step()
                end = self._wall(out.t_ms + out.dt_ms)
                await sleep_until(end, STEP_SPIN_S)
                self._gauges = (out.running, out.waiting, out.free_blocks)
                # vLLM handles the aborts that came during the step before its outputs and stats (core.py 687-691);
                # an abort that leaves the engine idle still gets its step, so the gauges come down.
                self._apply_aborts()
                self._deliver(out, end)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not leave clients waiting forever
            log.exception("the emulator's engine loop failed")
            for ticket in list(self._tickets.values()):
                ticket.inbox.put_nowait((ticket.key, -1))
            self._tickets.clear()
            raise

    def _apply_aborts(self) -> None:
        if not self._aborts:
            return
        stepped = self.stepped
        for ticket in self._aborts:
            assert ticket.flight is not None
            stepped.abort(ticket.flight)
            self._tickets.pop(ticket.request.seq, None)
        self._aborts.clear()
        self._gauges = (len(stepped.running), len(stepped.waiting), len(self.engine.gpu.free_queue))

    def _step(self) -> StepOutput:
        """One scheduler step: its decisions, the counters of its admissions, its KV events."""
        stepped = self.stepped
        cached_before = {f.seq: f.num_cached_blocks for f in stepped.running}
        tokens_before = {f.seq: f.num_tokens for f in stepped.waiting}
        out = stepped.step()  # RuntimeError rather than an empty step: the loop never spins on nothing
        tickets = self._tickets
        c = self.counters
        for a in out.admitted:
            f = tickets[a.seq].flight
            assert f is not None
            num_tokens = tokens_before[a.seq]
            c.prefix_cache_queries += num_tokens
            c.prefix_cache_hits += f.gpu_hit
            if self.has_cpu_tier:
                c.external_prefix_cache_queries += num_tokens - f.gpu_hit
                c.external_prefix_cache_hits += f.hit_end - f.gpu_hit
            if len(f.admissions) == 1:
                tickets[a.seq].started = self._wall(out.t_ms)
                c.requests += 1
                c.prompt_tokens += f.req.prompt_tokens
        c.preemptions += len(out.preempted)
        if self.kv_events is not None:
            block = self.units.block
            stored = []
            for seq in out.scheduled:
                t = tickets[seq]
                f = t.flight
                assert f is not None
                before = cached_before.get(seq, f.gpu_hit // block)
                after = min(f.num_computed // block, len(f.req.block_keys))
                stored.append(StepStore(f.req, t.tokens, before, max(before, after)))
            self.kv_events.publish_step(stored)
        return out

    def _deliver(self, out: StepOutput, end: float) -> None:
        """The step ended: every token it sampled goes to its answer."""
        now = time.perf_counter()
        self.steps.append((end, now, out))
        for seq in out.scheduled:
            ticket = self._tickets.get(seq)
            if ticket is None:
                continue
            f = ticket.flight
            assert f is not None
            while ticket.sampled < f.num_output:
                if ticket.sampled == 0:
                    self._first_token(ticket, f, end, now)
                if not ticket.aborted:
                    ticket.inbox.put_nowait((ticket.key, ticket.sampled))
                ticket.sampled += 1
            if f.done:
                del self._tickets[seq]

    def _first_token(self, ticket: Ticket, f: Flight, end: float, now: float) -> None:
        assert f.first is not None
        gpu_hit, ext, computed = f.first
        started = ticket.started
        prefill = Prefill(
            f.seq, f.req.prompt_tokens, gpu_hit, sum(ext.tokens), computed,
            round(f.ttft_ms, 3), round(f.ttft_ms / self.config.speed, 3),
            round(max(started - ticket.arrived, 0.0) * 1000, 3), f.first_token_step, ticket.engine_arrival_ms,
            ticket.arrived, started, end, now,
        )
        ticket.prefill = prefill
        self.records.append(prefill)
        if not ticket.aborted:
            self.counters.observe_ttft(now - ticket.arrived)

    def info(self) -> dict[str, Any]:
        """What the emulator is, for live mode's shadow simulation and for tests: ``/kvscope/emulator``."""
        cfg, sched = self.config, self.scheduler
        return {
            "emulator": "kvscope",
            "model": cfg.model,
            "speed": cfg.speed,
            "block_size": cfg.block_size,
            "chunk_size": cfg.chunk_size,
            "gpu_tokens": cfg.gpu_tokens,
            "num_gpu_blocks": cfg.num_gpu_blocks,
            "cpu_gb": cfg.cpu_gb,
            "cpu_tokens": cfg.cpu_tokens,
            "max_model_len": cfg.context_tokens,
            # perf_counter (CLOCK_MONOTONIC, one clock for every process on Linux) at the engine's time 0: the
            # records' and steps' *_ms are from here.
            "epoch_s": self.epoch,
            "scheduler": {
                "max_num_batched_tokens": sched.max_num_batched_tokens, "max_num_seqs": sched.max_num_seqs,
                "max_model_len": sched.max_model_len,
            },
            "costs": self.engine.costs.model_dump(mode="json"),
            "counters": self.counters.to_dict(),
            "requests": [p.to_dict(self.epoch) for p in self.records],
            # Each step's ledger line, when it was due to end and when its tokens were handed to the answers.
            "steps": [
                {**out.to_dict(), "end_ms": round((end - self.epoch) * 1000, 3), "released_ms": round((at - self.epoch) * 1000, 3)}
                for end, at, out in self.steps
            ],
        }
