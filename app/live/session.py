"""A live run: a scenario's requests sent to one or more servers, measured, and simulated alongside.

For each target, in the event vocabulary of ``sim.engine.events`` (``run`` is the
target's name): ``warning``s from probing it, ``run`` (the shadow simulation's
tiers), then per request the shadow's events (``request``, ``lookup``, ...,
``ttft``: the prediction) followed by ``measured`` when the server has
answered; ``pass`` and ``done`` carry the measured summary with the
prediction under ``predicted``. A target that fails gives an ``error`` event
and stops; the others go on. Targets are measured one after the other, so
that one cannot slow the other down (two servers often share a GPU, and the
client and emulators share CPUs), or side by side with ``side_by_side``.
Within a target, requests go one at a time unless ``concurrency`` says
otherwise; then the shadow is vLLM's scheduler serving the requests at the
times they were sent (``overlap``), and its predictions (the ``request``,
``lookup`` and ``ttft`` events) come once the target's requests are all
answered, before the ``pass`` events.

Hit tokens per request are the change of the server's counters across the
request, so they need requests one at a time; with overlapping requests only
TTFT is recorded. Every measurement is handed to ``sink`` (the measurement
file, the runs database) as soon as it completes, before its event is sent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import httpx

from app.live.client import TargetError, TargetInfo, VllmClient
from app.live.overlap import overlap_events, predict_overlap
from app.live.prompts import PromptBook, build_prompts
from app.live.shadow import ShadowError, shadow_engine
from app.live.targets import Target
from sim.blocks.request import Request
from sim.calibration.measurements import Measurement
from sim.engine.events import Error, Event, Measured, PassDone, RunDone, RunWarning
from sim.engine.loop import Engine, RequestRecord
from sim.engine.result import pass_summaries, run_totals
from sim.explain.stream import explained
from sim.explain.summary import add_totals, totals
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

MAX_CONCURRENCY = 64
MAX_COMPLETION_TOKENS = 1024
MAX_TIMEOUT_S = 3600.0  # seconds to wait for any one answer: the CLI, the API and the page alike
DEFAULT_TIMEOUT_S = 60.0

# Given each measurement as it completes; a future it returns (the runs database's commit) is awaited before the
# measurement's event is sent and the target's next request goes out, without holding the event loop.
Sink = Callable[[Measurement], "concurrent.futures.Future[None] | None"]


@dataclass(frozen=True, slots=True)
class LiveOptions:
    """How requests are sent: how many at once per target, tokens to generate, the per-request timeout, and whether
    the targets are measured at the same time."""

    concurrency: int = 1
    max_tokens: int = 4
    timeout_s: float = DEFAULT_TIMEOUT_S
    side_by_side: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be 1..{MAX_CONCURRENCY}, got {self.concurrency}")
        if not 1 <= self.max_tokens <= MAX_COMPLETION_TOKENS:
            raise ValueError(f"max_tokens must be 1..{MAX_COMPLETION_TOKENS}, got {self.max_tokens}")
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout must be in (0, {MAX_TIMEOUT_S:.0f}] s, got {self.timeout_s}")


class LiveRun:
    """One scenario against several targets; iterate ``events()`` once."""

    def __init__(
        self,
        scenario: Scenario,
        targets: Sequence[Target],
        options: LiveOptions = LiveOptions(),
        sink: Sink | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.scenario = scenario
        self.targets = list(targets)
        self.options = options
        self.sink = sink
        self.transport = transport
        self.failed: dict[str, str] = {}
        self.infos: dict[str, TargetInfo] = {}
        self.measurements: list[Measurement] = []
        # Tags this run's documents so that no server still holds them from an earlier run.
        self.tag = secrets.token_hex(3)

    async def events(self) -> AsyncIterator[Event]:
        """Every target's events as they happen; cancelling the iteration stops every target."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        if self.options.side_by_side:
            tasks = [asyncio.create_task(self._guarded(t, queue.put_nowait)) for t in self.targets]
        else:
            tasks = [asyncio.create_task(self._one_after_another(queue.put_nowait))]
        running = len(self.targets)  # every target ends with a None
        try:
            while running:
                event = await queue.get()
                if event is None:
                    running -= 1
                else:
                    yield event
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _one_after_another(self, emit: Callable[[Event | None], None]) -> None:
        for target in self.targets:
            await self._guarded(target, emit)

    async def _guarded(self, target: Target, emit: Callable[[Event | None], None]) -> None:
        try:
            await _TargetRun(self, target, emit).run()
        except (TargetError, ShadowError) as exc:
            self._fail(target, str(exc), emit)
        except ValueError as exc:
            self._fail(target, f"target {target.name}: {exc}", emit)
        finally:
            emit(None)

    def _fail(self, target: Target, message: str, emit: Callable[[Event | None], None]) -> None:
        self.failed[target.name] = message
        emit(Error(target.name, message))


class _TargetRun:
    """One target's part of a live run."""

    def __init__(self, live: LiveRun, target: Target, emit: Callable[[Event | None], None]) -> None:
        self.live = live
        self.target = target
        self.emit = emit
        self.options = live.options
        self.measured: list[Measurement] = []
        self.sent_s: dict[int, float] = {}  # seq -> when its request was sent (perf_counter seconds)
        self._warned_counters = False

    async def run(self) -> None:
        name = self.target.name
        async with VllmClient(self.target, self.options.timeout_s, self.live.transport) as client:
            info = await client.probe()
            self.live.infos[name] = info
            for message in info.warnings:
                self.emit(RunWarning(name, message))
            scenario, engine = shadow_engine(self.live.scenario, self.target, info, self.options.max_tokens)
            requests = build_requests(scenario)

            async def count(text: str) -> int:
                return await client.count_tokens(info.model, text)

            book = await build_prompts(count, scenario, [(r.pass_, r.doc) for r in requests], self.live.tag)
            attribute = info.has_counters and self.options.concurrency == 1
            if info.has_counters and not attribute:
                self.emit(
                    RunWarning(
                        name,
                        f"{self.options.concurrency} requests at a time: the server's counters cannot be split "
                        "between overlapping requests, so only TTFT is recorded per request",
                    )
                )
            self.emit(engine.start_event(len(requests), scenario.docs, scenario.doc_tokens))
            if self.options.concurrency == 1:
                await self._send_all(client, info, engine, book, requests, attribute)
                predicted: list[RequestRecord] = engine.records
            else:
                await self._send_all(client, info, None, book, requests, attribute)
                predicted = predict_overlap(
                    self.live.scenario, scenario, self.target, info, requests, self.sent_s, self.options.max_tokens
                )
                for event in overlap_events(name, predicted):
                    self.emit(event)
                for pass_ in sorted({r.pass_ for r in requests}):
                    self._pass_done(pass_, predicted)
            self.emit(RunDone(name, len(self.measured), {**run_totals(self.measured), "predicted": {**run_totals(predicted), **totals(predicted)}}))

    def _pass_done(self, pass_: int, records: list[RequestRecord]) -> None:
        mine = [m for m in self.measured if m.pass_ == pass_]
        predicted = [r for r in records if r.pass_ == pass_]
        summary = {**pass_summaries(mine)[0], "predicted": add_totals(pass_summaries(predicted), predicted)[0]}
        self.emit(PassDone(self.target.name, summary))

    async def _send_all(
        self, client: VllmClient, info: TargetInfo, engine: Engine | None, book: PromptBook, requests: list[Request],
        attribute: bool,
    ) -> None:
        """Send every request, ``concurrency`` in flight. With an ``engine`` (one at a time), each is predicted as it
        leaves and its pass summed up when its last request is answered; without, the caller predicts afterwards."""
        pass_sizes = Counter(r.pass_ for r in requests)
        slots = asyncio.Semaphore(self.options.concurrency)

        async def one(request: Request) -> None:
            try:
                await self._measure(client, info, book, request, attribute)
            finally:
                slots.release()
            if engine is not None and sum(m.pass_ == request.pass_ for m in self.measured) == pass_sizes[request.pass_]:
                self._pass_done(request.pass_, engine.records)

        try:
            async with asyncio.TaskGroup() as group:
                for request in requests:
                    await slots.acquire()
                    if engine is not None:
                        # The prediction is sent as the request leaves; the measurement when it is answered.
                        _, predicted = engine.process(request)
                        for event in explained(engine, predicted):
                            self.emit(event)
                    group.create_task(one(request))
        except ExceptionGroup as group_error:
            raise _first(group_error) from None

    async def _measure(
        self, client: VllmClient, info: TargetInfo, book: PromptBook, request: Request, attribute: bool
    ) -> None:
        name, model = self.target.name, info.model
        prompt = book.prompt(request.pass_, request.doc)
        before = await client.counters() if attribute else None
        completion = await client.complete(model, prompt, self.options.max_tokens)
        self.sent_s[request.seq] = completion.sent_s
        prompt_tokens = completion.prompt_tokens or await client.count_tokens(model, prompt)
        gpu_hit: int | None = None
        cpu_hit: int | None = None
        computed: int | None = None
        if before is not None:
            moved = (await client.counters_after(before, prompt_tokens)).delta(before)
            if moved.gpu_queries == prompt_tokens and moved.gpu_hits is not None:
                gpu_hit = int(moved.gpu_hits)
                if moved.external_hits is not None:
                    cpu_hit = int(moved.external_hits)
                    computed = prompt_tokens - gpu_hit - cpu_hit
            elif not self._warned_counters:
                self._warned_counters = True
                self.emit(
                    RunWarning(
                        name,
                        f"the prefix-cache counters moved by {moved.gpu_queries} tokens for a {prompt_tokens}-token "
                        "prompt: other traffic reaches this server, so hit tokens are not recorded for such requests",
                    )
                )
        m = Measurement(
            name, request.pass_, request.order, request.seq, request.doc, prompt_tokens, completion.ttft_ms,
            gpu_hit, cpu_hit, computed, "live", self.target.url, model, completion.started_at,
        )
        self.measured.append(m)
        self.live.measurements.append(m)
        if self.live.sink is not None:
            kept = self.live.sink(m)
            if kept is not None:
                await asyncio.wrap_future(kept)
        self.emit(
            Measured(
                name, m.seq, m.pass_, m.order, m.doc, m.prompt_tokens, m.ttft_ms, gpu_hit, cpu_hit, computed, model,
                completion.started_at,
            )
        )


def _first(group: BaseExceptionGroup) -> BaseException:
    """The first real failure in a task group's exceptions (nested groups included)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _first(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group
