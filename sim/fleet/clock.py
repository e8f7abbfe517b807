"""The fleet's one clock: replicas step in time order, and each arrival is routed at its own time.

The next event is the earliest of: the next arrival, and the next turn of a
busy replica (one with a request running or waiting, those loading their CPU
hit too, or under asynchronous scheduling a step in flight: its turn,
``SteppedEngine.advance``, starts when its last step ended, ``now_ms``). An
arrival at the same time as a step comes first, as the single-server loop
queues arrivals up to ``now_ms`` before it steps (``SteppedEngine.steps``);
equal steps go lowest replica first. An arrival is routed when every busy
replica's next step starts no earlier, so no step still to run could change
what came before it; a replica that was idle takes up the arrival's time as
its ``now_ms`` if it is later, and first completes its connector's transfers
(``idle_until``: its last finishes handed over, its stores copied), as the
single-server loop does before an arrival it waits for.

What the router sees at time ``t`` (``ReplicaState``): each replica's
scheduler as it stands with every turn that started by ``t`` taken. A step in
flight at ``t`` has scheduled its batch, so its running requests and their
blocks are what vLLM's scheduler holds then; synchronously its finished
requests are already gone, a step earlier than vLLM's stats would say (under
asynchronous scheduling a step's output is processed at the turn that
schedules the step after it, at its end, as vLLM's). The router is told of a
first token and of a finish (``prefilled``, ``finished``) at the end of the
step that produced it, before any arrival at that time or later.

Arrivals as the single-server engine takes them: timestamps and an open loop
are times; a closed loop of C releases the next request, fleet-wide, when any
request finishes (one client with C in flight).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sim.blocks.request import Request
from sim.bounds.budget import checkpoint
from sim.engine.loop import RequestRecord
from sim.fleet.routers.base import ReplicaState, RoutedRequest, Router
from sim.sched.arrivals import Arrivals, ClosedLoop
from sim.sched.flight import Flight
from sim.sched.output import StepOutput
from sim.sched.stepped import SteppedEngine

_PREFILLED, _FINISHED = 0, 1


@dataclass(frozen=True, slots=True)
class Route:
    """Where one request went, and the leading prompt blocks each replica's GPU cache held when it was routed."""

    replica: int
    held_blocks: tuple[int, ...]
    arrival_ms: float


@dataclass(slots=True)
class FleetRun:
    """A fleet run: records and flights by seq (as the single-server run's), each request's route, each replica's steps."""

    records: list[RequestRecord]
    flights: list[Flight]
    routes: list[Route]
    steps: list[list[StepOutput]]
    queue_ms: dict[int, float]


class Fleet:
    """Replicas (stepped engines, each over its own pool and tiers) behind one router, on one clock."""

    def __init__(self, replicas: Sequence[SteppedEngine], router: Router) -> None:
        if not replicas:
            raise ValueError("a fleet needs at least one replica")
        self.replicas = list(replicas)
        self.router = router

    def run(
        self, requests: Sequence[Request], arrivals: Arrivals = ClosedLoop(1),
        watch: Callable[[int | None, list[int]], None] | None = None,
    ) -> FleetRun:
        """Every request routed and served to its end. ``watch`` (``sim.fleet.holdings.Holdings``) is called at each
        arrival, just before it is routed, with its seq and each replica's steps run so far, and at the end with None."""
        replicas, router = self.replicas, self.router
        n = len(requests)
        for replica in replicas:
            replica.check(requests)
        closed = isinstance(arrivals, ClosedLoop)
        # A closed loop's release times, a heap (each finish releases the next request); else every arrival's time.
        times = [0.0] * min(arrivals.concurrency, n) if isinstance(arrivals, ClosedLoop) else arrivals.times_ms(n)
        released = len(times) if closed else n
        notices: list[tuple[float, int, int, int, int]] = []  # (at, order, kind, seq, replica)
        flights: dict[int, Flight] = {}
        routes: dict[int, Route] = {}
        steps: list[list[StepOutput]] = [[] for _ in replicas]
        nxt = finished = order = 0
        while finished < n:
            t_step, who = min(((r.now_ms, i) for i, r in enumerate(replicas) if not r.idle), default=(float("inf"), -1))
            if nxt < n and (times or not closed):
                t_arr = times[0] if closed else times[nxt]
                if t_arr <= t_step:
                    if closed:
                        heapq.heappop(times)
                    while notices and notices[0][0] <= t_arr:
                        _, _, kind, seq, where = heapq.heappop(notices)
                        (router.prefilled if kind == _PREFILLED else router.finished)(seq, where)
                    req = requests[nxt]
                    if watch is not None:
                        watch(req.seq, [len(s) for s in steps])
                    route = self._route(req, t_arr)
                    target = replicas[route.replica]
                    if target.idle and t_arr > target.now_ms:
                        target.idle_until(t_arr)  # its connector's transfers done first, as the single server's loop
                    flights[req.seq], routes[req.seq] = target.arrive(req, t_arr), route
                    nxt += 1
                    continue
            if who < 0:
                raise RuntimeError(f"{n - finished} requests unfinished with nothing to run or arrive")
            replica = replicas[who]
            checkpoint()
            out = replica.advance()  # RuntimeError when it could do nothing
            if out is None:
                continue  # async: its first batch runs, no output yet
            steps[who].append(out)
            end = out.t_ms + out.dt_ms
            for seq in out.scheduled:
                if flights[seq].first_token_step == out.step:
                    heapq.heappush(notices, (end, order, _PREFILLED, seq, who))
                    order += 1
            for seq in out.finished:
                heapq.heappush(notices, (end, order, _FINISHED, seq, who))
                order += 1
                if released < n:
                    heapq.heappush(times, end)
                    released += 1
            finished += len(out.finished)
        if watch is not None:
            watch(None, [len(s) for s in steps])
        done = [flights[seq] for seq in sorted(flights)]
        kept = [routes[seq] for seq in sorted(routes)]
        records = [replicas[route.replica].record(f) for f, route in zip(done, kept)]
        queue_ms = {seq: t for r in replicas for seq, t in r.queue_ms.items()}
        return FleetRun(records, done, kept, steps, queue_ms)

    def _route(self, req: Request, now_ms: float) -> Route:
        """The router's choice for ``req`` at ``now_ms``, from what it may see of each replica then."""
        replicas = self.replicas
        block = replicas[0].block
        keys = req.block_keys[: req.prompt_tokens // block]  # the prompt's full blocks: generated ones come later
        held = tuple(len(r.gpu.find_prefix(keys, len(keys))) for r in replicas)
        events = self.router.reads_kv_events
        states = [
            ReplicaState(
                waiting=r.num_waiting, running=len(r.running), kv_usage=r.kv_usage,
                active_blocks=len(r.refs), held_prefix_blocks=h if events else 0,
            )
            for r, h in zip(replicas, held)
        ]
        chosen = self.router.route(RoutedRequest(req.seq, req.prompt_tokens, keys, block), states, now_ms)
        if not 0 <= chosen < len(replicas):
            raise RuntimeError(f"router {self.router.name} chose replica {chosen} of {len(replicas)}")
        return Route(chosen, held, now_ms)
