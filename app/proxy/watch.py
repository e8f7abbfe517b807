"""One upstream watched: its proxied requests measured, its shadow twin fed the same prompts, its KV events, and
where the twin and the server part ways.

Per proxied request, once its answer has been passed on (never delaying it,
nor another request's first byte: the bookkeeping waits while any proxied
request has yet to pass its first chunk to its client):
the prompt's token ids from the upstream's ``/tokenize``; GPU and CPU hit
tokens from ``/metrics`` deltas when they can be attributed (no other proxied
request overlapped it, and the counters were read since the last one); the
twin (the simulator's engine, sized from the upstream's ``/metrics`` and,
for ``kvscope emulate``, its ``/kvscope/emulator``) serves the same token ids
and predicts its TTFT. Then the server's blocks (from its KV events) are set
against the twin's KV state, which vLLM's scheduler keeps with the requests
in their real overlap (``overlap_twin``: held from arrival to end). Everything kept is bounded: the last ``MAX_EVENTS`` events
and ``MAX_RECORDS`` requests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio

from app.live.client import TargetError, TargetInfo, VllmClient
from app.live.prom import CacheCounters
from app.live.targets import Target
from app.proxy.forward import Exchange
from app.proxy.kv_thread import KvThread
from app.proxy.overlap_twin import OverlapTwin
from app.proxy.upstreams import Upstream
from sim.blocks.prompt_keys import request_for_tokens
from sim.blocks.request import Units
from sim.costs.model import CostModel, default_costs
from sim.engine.events import Divergence, Event, Explained, Measured, RunWarning, Ttft
from sim.engine.loop import Engine, TierSpec
from sim.explain import attach
from sim.kvevents.wire import MEDIUM_CPU, MEDIUM_GPU, hash_label

MAX_EVENTS = 5_000
MAX_RECORDS = 1_000
# Evicted blocks (and chunks) the twin remembers to explain misses by (sim.explain): about 100 MB at most.
TWIN_REMEMBERS = 500_000
KEPT_WARNINGS = 20
PROBE_TIMEOUT_S = 5.0
TWIN = "twin"
SETTLE_IDLE_S = 0.1
SETTLE_MAX_S = 2.0
SETTLE_POLL_S = 0.02
# Why a request's hits are unknown (the server's /metrics counters are cumulative: a request's hits are the change
# across it, read before and after, which only a request alone between two readings has).
OVERLAPPED_TEXT = "it ran while another request was in flight, and the server's counters add up both"
BACK_TO_BACK_TEXT = ("it came right after the last request, before the server's counters were read again, "
                     "so its hits cannot be told from that request's")
NO_COUNTERS_TEXT = "the server's /metrics has no prefix-cache counters"


@dataclass(slots=True)
class _Twin:
    engine: Engine  # one request at a time, in the order answers ended: predictions and their explanations
    exact_keys: bool  # the upstream hashes blocks as the twin does (kvscope emulate)
    overlap: OverlapTwin  # the server's KV state: requests held from arrival to end, as they overlapped


class UpstreamWatch:
    """The watch of one upstream; ``on_exchange`` is the proxy's ``done`` callback."""

    def __init__(self, upstream: Upstream, timeout_s: float = 60.0) -> None:
        self.upstream = upstream
        self.client = VllmClient(Target(upstream.name, upstream.url), timeout_s=timeout_s, token=upstream.token)
        self.events: deque[tuple[int, Event]] = deque(maxlen=MAX_EVENTS)
        self.records: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDS)
        self.warnings: deque[str] = deque(maxlen=KEPT_WARNINGS)
        self._events_lock = threading.Lock()
        # Called with each event after it is logged (the runs database keeps them: app.runs.recording.ProxyRecorder).
        self.listeners: list[Callable[[Event], None]] = []
        # A future done once every event emitted so far is kept (ProxyRecorder.kept): a request is listed only then.
        self.kept: Callable[[], concurrent.futures.Future[None]] | None = None
        self._next_id = 0
        self.info: TargetInfo | None = None
        self.problem: str | None = None
        self.twin: _Twin | None = None
        self._seq = 0
        self._running: set[int] = set()  # requests being forwarded now
        # When each request began and ended (perf_counter), until the overlap twin is told of it.
        self._begun_at: dict[int, float] = {}
        self._ended_at: dict[int, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._overlapped: dict[int, str] = {}  # request -> why its hits cannot be told from the counters
        self._baseline: CacheCounters | None = None
        self._baseline_fresh = False
        self._queue: asyncio.Lock | None = None
        self._preparing: asyncio.Task[None] | None = None
        self._awaiting_first_byte = 0
        self._first_bytes_out: asyncio.Event | None = None  # set while no request awaits its first byte
        self.first_parted: int | None = None
        # Blocks the server held at the first comparison that the twin never saw (None before it): a twin started
        # after the server cached them differs from the start, which is not a parting after some request.
        self._held_before: int | None = None
        self._apart_from_start = False
        self._warned_silent = False
        self.divergence: dict[str, Any] | None = None
        # The twin's GPU blocks by hash label -> place in its eviction queue (0 goes first); replaced whole after
        # each step, so the KV thread reads one consistent order.
        self._gpu_ranks: dict[str, int] = {}
        self.kv: KvThread | None = None
        if upstream.kv_events:
            self.kv = KvThread(upstream.name, upstream.kv_events, upstream.kv_replay, self.emit, self._capacity,
                               rank=self._rank)

    # -- the event log --------------------------------------------------------------------------------------

    def emit(self, event: Event) -> None:
        with self._events_lock:
            self.events.append((self._next_id, event))
            self._next_id += 1
            if isinstance(event, RunWarning):
                self.warnings.append(event.message)
        for listener in self.listeners:
            listener(event)

    def _warnings(self) -> list[str]:
        with self._events_lock:  # the KV thread adds warnings too
            return list(self.warnings)

    def events_after(self, last_id: int) -> list[tuple[int, Event]]:
        with self._events_lock:
            return [(i, e) for i, e in self.events if i > last_id]

    # -- requests --------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """At start-up: probe the upstream and read its counters in the background, so the first request need not
        wait for them (it waits only if they are still under way)."""
        if self._preparing is None:
            self._preparing = asyncio.get_running_loop().create_task(self._prepare())

    async def _prepare(self) -> None:
        await self._ensure_probed()
        await self._read_baseline()

    def stop_preparing(self) -> None:
        if self._preparing is not None:
            self._preparing.cancel()

    async def begin(self) -> int:
        """A request is about to be forwarded: its number, and whether it overlaps another is noted.

        The first request waits for the upstream's probe and counters if they are not read yet (once).
        """
        if self._seq == 0:
            self.prepare()
            assert self._preparing is not None
            await asyncio.shield(self._preparing)  # a client that leaves does not cancel the probe
        seq = self._seq  # from 0, as a simulated run's requests (the JSON's seq) and every view number them
        self._seq += 1
        self._begun_at[seq] = time.perf_counter()
        self._awaiting_first_byte += 1
        self._quiet().clear()
        if self._running:
            for other in self._running:
                self._overlapped.setdefault(other, OVERLAPPED_TEXT)
            self._overlapped[seq] = OVERLAPPED_TEXT
        self._running.add(seq)
        if not self._baseline_fresh:  # the counters were not read since the last request: no attribution
            self._overlapped.setdefault(seq, BACK_TO_BACK_TEXT)
        self._baseline_fresh = False
        return seq

    def _quiet(self) -> asyncio.Event:
        if self._first_bytes_out is None:
            self._first_bytes_out = asyncio.Event()
            self._first_bytes_out.set()
        return self._first_bytes_out

    def first_byte_passed(self) -> None:
        """The proxy's ``first_byte`` callback: once per request begun."""
        self._awaiting_first_byte -= 1
        if self._awaiting_first_byte == 0:
            self._quiet().set()

    def on_exchange(self, seq: int, exchange: Exchange) -> None:
        self._running.discard(seq)
        self._ended_at[seq] = time.perf_counter()
        task = asyncio.get_running_loop().create_task(self._account(seq, exchange))
        self._tasks.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._tasks.discard)

    async def _account(self, seq: int, exchange: Exchange) -> None:
        if self._queue is None:
            self._queue = asyncio.Lock()
        # One at a time, in the order their answers ended (the order of arrival, one request at a time).
        async with self._queue:
            await self._quiet().wait()
            await self._ensure_probed()
            record = await self._measure(seq, exchange)
            self._tell_overlap(seq, None)  # a request the twin could not serve (no twin, no prompt) still ends
            if not self._running:
                # Before the commit is awaited: a request that begins while it runs finds fresh counters.
                await self._read_baseline()
            if self.kept is not None:
                # Committed on the runs database's thread while the loop goes on forwarding; listed once it is,
                # so whatever the watch shows survives a crash.
                await asyncio.wrap_future(self.kept())
            self.records.append(record)
            if record["error"]:
                self.emit(RunWarning(self.upstream.name, f"request {seq}: {record['error']}"))
            elif record["status"] is not None and record["status"] >= 500:
                message = f"request {seq}: the upstream answered HTTP {record['status']}"
                self.emit(RunWarning(self.upstream.name, message))

    async def _ensure_probed(self) -> None:
        if self.info is not None:
            return
        try:
            self.info = await asyncio.wait_for(self.client.probe(), PROBE_TIMEOUT_S)
        except (TargetError, TimeoutError) as exc:
            self.problem = str(exc) or f"upstream {self.upstream.name}: no answer to the probe in {PROBE_TIMEOUT_S:g} s"
            self.emit(RunWarning(self.upstream.name, self.problem))
            return
        self.problem = None
        self.twin = _make_twin(self.info)

    async def _read_baseline(self) -> None:
        try:
            self._baseline = await self.client.counters()
            self._baseline_fresh = not self._running
        except TargetError:
            self._baseline, self._baseline_fresh = None, False

    async def _measure(self, seq: int, ex: Exchange) -> dict[str, Any]:
        overlapped = self._overlapped.pop(seq, None)
        record: dict[str, Any] = {
            "seq": seq, "path": ex.path, "status": ex.status, "streamed": ex.streamed, "ttft_ms": ex.ttft_ms,
            "latency_ms": ex.latency_ms, "error": ex.error, "prompt_tokens": None, "gpu_hit_tokens": None,
            "cpu_hit_tokens": None, "hits_unknown": None, "predicted_ttft_ms": None, "predicted_gpu_hit_tokens": None,
            "predicted_cpu_hit_tokens": None, "gpu_miss": None, "computed": None, "evicted_misses": None,
            "infinite_hit_tokens": None,
            "started_at": datetime.fromtimestamp(ex.started_wall_s, UTC).isoformat(timespec="milliseconds"),
        }
        if ex.status != 200 or ex.error or not ex.path.endswith("completions"):
            self._tell_overlap(seq, None)
            return record
        body = _json_body(ex.body)
        tokens = await self._token_ids(body)
        if tokens is None:
            self._tell_overlap(seq, None)
            return record
        record["prompt_tokens"] = len(tokens)
        before = self._baseline if not overlapped else None
        unknown = overlapped
        if self.info is not None and not self.info.has_counters:
            unknown = NO_COUNTERS_TEXT
        elif before is not None and self.info is not None:
            try:
                after = await self.client.counters_after(before, len(tokens))
                delta = after.delta(before)
                record["gpu_hit_tokens"] = _int(delta.gpu_hits)
                record["cpu_hit_tokens"] = _int(delta.external_hits) if self.info.has_external_counters else None
            except TargetError as exc:
                unknown = f"reading the server's /metrics failed ({exc})"
        elif before is None and unknown is None:
            unknown = BACK_TO_BACK_TEXT  # no baseline read yet
        record["hits_unknown"] = unknown if record["gpu_hit_tokens"] is None else None
        if self.twin is not None and tokens:
            await self._quiet().wait()  # the twin's work is the CPU's: after any request's first byte
            engine = self.twin.engine
            predicted, _ = engine.process(request_for_tokens(tokens, engine.units, seq=seq), emit=False)
            engine.records.clear()  # the twin keeps no history: the watch's records are bounded
            self._tell_overlap(seq, tokens)
            if self.twin.exact_keys and self.kv is not None:
                self._gpu_ranks = _eviction_ranks(self.twin.overlap.engine)
                self.kv.touch()
            record.update(predicted_ttft_ms=predicted.ttft_ms, predicted_gpu_hit_tokens=predicted.gpu_hit_tokens,
                          predicted_cpu_hit_tokens=predicted.cpu_hit_tokens, gpu_miss=predicted.gpu_miss,
                          computed=predicted.computed, evicted_misses=predicted.evicted_misses,
                          infinite_hit_tokens=predicted.infinite_hit_tokens)
            self.emit(Explained(f"{self.upstream.name} {TWIN}", seq, 1, -1, predicted.gpu_miss or {},
                                predicted.computed or {}, predicted.evicted_misses or [],
                                predicted.infinite_hit_tokens or 0))
            self.emit(Ttft(f"{self.upstream.name} {TWIN}", seq, 1, -1, predicted.ttft_ms, predicted.source,
                           predicted.gpu_hit_tokens, predicted.cpu_hit_tokens, 0, predicted.computed_tokens))
        if ex.ttft_ms is not None:
            gpu_hit, cpu_hit = record["gpu_hit_tokens"], record["cpu_hit_tokens"]
            computed = None if gpu_hit is None else len(tokens) - gpu_hit - (cpu_hit or 0)
            self.emit(Measured(self.upstream.name, seq, 1, "proxy", -1, len(tokens), ex.ttft_ms, gpu_hit, cpu_hit,
                               computed, str(body.get("model") or ""), record["started_at"], record["hits_unknown"]))
        await self._compare(seq)
        return record

    def _tell_overlap(self, seq: int, tokens: list[int] | None) -> None:
        """The overlap twin learns the request's tokens, arrival and end; it plays what can no longer change."""
        begun, ended = self._begun_at.pop(seq, None), self._ended_at.pop(seq, None)
        if self.twin is None or begun is None:
            return
        self.twin.overlap.tell(seq, tokens, begun, ended if ended is not None else begun, list(self._begun_at.values()))

    async def _token_ids(self, body: dict[str, Any]) -> list[int] | None:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
            return prompt
        query: dict[str, Any] = {"model": body.get("model")}
        if isinstance(prompt, str):
            query["prompt"] = prompt
        elif isinstance(body.get("messages"), list):
            query["messages"] = body["messages"]
        else:
            return None
        try:
            return await self.client.token_ids(query)
        except TargetError as exc:
            self.problem = str(exc)
            return None

    # -- twin against server ---------------------------------------------------------------------------------

    def _capacity(self, medium: str) -> int | None:
        if self.twin is None:
            return None
        engine = self.twin.engine
        if medium == MEDIUM_GPU:
            return engine.gpu.capacity_blocks * engine.units.block
        if medium == MEDIUM_CPU and engine.cpu is not None:
            return engine.cpu.capacity_tokens
        return None

    def _rank(self, medium: str) -> dict[str, int]:
        """Where each of the twin's blocks of ``medium`` stands in its eviction order (only where the twin hashes
        blocks as the server does: otherwise it cannot name the server's prefixes)."""
        return self._gpu_ranks if medium == MEDIUM_GPU else {}

    async def _compare(self, seq: int) -> None:
        if self.kv is None or self.twin is None:
            return
        if self._begun_at:
            # Requests still under way or not accounted for yet: the server holds (some of) their blocks and the
            # twin does not know their prompts yet. Compared once they are told.
            return
        twin_keys = set(self.twin.overlap.engine.gpu.cached)  # the KV state: blocks held as the requests overlapped
        kv = self.kv

        def server() -> tuple[set[Any], bool, float]:
            with kv.lock:
                idle_s = time.monotonic() - kv.last_message_at if kv.last_message_at is not None else float("inf")
                return set(kv.feed.state.media[MEDIUM_GPU].blocks), kv.feed.batches == 0, idle_s

        # The server's events for this request may still be on their way: until the two agree, look again until
        # the event stream has been quiet for SETTLE_IDLE_S (at most SETTLE_MAX_S), so a lag is not a parting.
        # Off the event loop: the subscriber holds the lock while it fills a gap from the replay endpoint.
        started = time.monotonic()
        while True:
            server_keys, silent, idle_s = await anyio.to_thread.run_sync(server)
            waited = time.monotonic() - started
            if _differ(server_keys, twin_keys, self.twin.exact_keys) == 0 or waited >= SETTLE_MAX_S:
                break
            if idle_s >= SETTLE_IDLE_S and waited >= SETTLE_IDLE_S:
                break
            await asyncio.sleep(SETTLE_POLL_S)
        if silent and not self._warned_silent:
            self._warned_silent = True
            self.emit(RunWarning(
                self.upstream.name,
                f"no KV events from {self.upstream.name}'s publisher after a request: is the server started with "
                "--kv-events-config, on the endpoint and topic given?",
            ))
        differ = _differ(server_keys, twin_keys, self.twin.exact_keys)
        if self._held_before is None:  # the first comparison: what the server held that the twin never saw
            self._held_before = len(server_keys - twin_keys) if self.twin.exact_keys else max(len(server_keys) - len(twin_keys), 0)
            self._apart_from_start = bool(differ and self._held_before)
        if differ and self.first_parted is None and not self._apart_from_start:
            self.first_parted = seq
        event = Divergence(self.upstream.name, seq, "gpu", len(server_keys), len(twin_keys), differ,
                           self.twin.exact_keys, self.first_parted, self._held_before)
        self.divergence = event.to_dict()
        self.emit(event)

    async def snapshot(self) -> dict[str, Any]:
        """``GET /api/watch/{name}``: the upstream, its tiers by its KV events, the twin's, requests and divergence."""
        media: dict[str, Any] = {}
        kv: dict[str, Any] | None = None
        if self.kv is not None:
            summary = await anyio.to_thread.run_sync(self.kv.summary)
            media = summary.pop("media")
            kv = summary
        twin = None
        if self.twin is not None:
            engine = self.twin.overlap.engine
            twin = {"gpu_blocks": engine.gpu.cached_blocks, "gpu_capacity_blocks": engine.gpu.capacity_blocks,
                    "cpu_tokens": engine.cpu.used_tokens if engine.cpu else None,
                    "cpu_capacity_tokens": engine.cpu.capacity_tokens if engine.cpu else None}
        return {
            "name": self.upstream.name,
            "kv_events": self.upstream.kv_events is not None,
            "server": self.info.to_dict() if self.info else None,
            "problem": self.problem,
            "media": media,
            "kv": kv,
            "twin": twin,
            "divergence": self.divergence,
            "warnings": self._warnings(),
            "requests": list(self.records),
        }

    def close(self) -> None:
        if self.kv is not None:
            self.kv.stop()


def _make_twin(info: TargetInfo) -> _Twin:
    emulator = info.emulator or {}
    block = info.block_size or 16
    chunk = int(emulator.get("chunk_size") or 256)
    gpu_tokens = info.capacity_tokens or 21_520
    costs = default_costs()
    if isinstance(emulator.get("costs"), dict):
        try:
            costs = CostModel(**emulator["costs"]).scaled(1 / float(emulator.get("speed") or 1.0))
        except (TypeError, ValueError):
            pass
    spec = TierSpec(units=Units(block, chunk), gpu_tokens=gpu_tokens, cpu_tokens=emulator.get("cpu_tokens"))
    engine = Engine(TWIN, spec, costs)
    attach(engine, remember=TWIN_REMEMBERS)  # its records explain their misses, as every record does
    return _Twin(engine, exact_keys=bool(emulator), overlap=OverlapTwin(spec, costs))


def _eviction_ranks(engine: Engine) -> dict[str, int]:
    """The twin's cached GPU blocks, by hash label, numbered in the order its free queue would evict them (vLLM's
    LRU: the front first, FreeKVCacheBlockQueue at vllm/v1/core/kv_cache_utils.py:258)."""
    gpu = engine.gpu
    hashes = gpu.block_hash  # grows as blocks are first handed out: ids past its end were never cached
    ranks: dict[str, int] = {}
    for block_id in gpu.free_queue:
        key = hashes[block_id] if block_id < len(hashes) else None
        if key is not None and gpu.cached.get(key) == block_id:
            ranks[hash_label(key)] = len(ranks)
    return ranks


def _differ(server: set[Any], twin: set[Any], exact: bool) -> int:
    """Blocks held by one and not the other when both name blocks alike; else the difference of the counts."""
    return len(server ^ twin) if exact else abs(len(server) - len(twin))


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # a client's body nested past the parser's stack is no prompt we can read
        return {}
    return data if isinstance(data, dict) else {}


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)
