"""A scenario served under load as events: each run's steps, with the arrivals before each and the requests finished in it.

The events are the vocabulary's (``sim.engine.events``): per run ``run``, then
for each step the ``request`` of each arrival before it, the ``step`` (the
ledger's line) and the ``ttft`` of each request that finished in it (its
record, as ``simulate --json`` gives it: TTFT counts queueing); then a ``pass``
per pass and ``done``. Runs advance side by side, a step of each in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import zip_longest

from sim.blocks.request import Request
from sim.engine.events import Event, PassDone, RequestStarted, RunDone
from sim.engine.loop import Engine, RequestRecord, ttft_event
from sim.engine.result import pass_summaries, run_totals
from sim.explain.summary import add_totals, totals
from sim.sched.flight import Flight
from sim.sched.serving import Serving
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import engines
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario


def _run_events(scenario: Scenario, serving: Serving, engine: Engine, requests: list[Request]) -> Iterator[list[Event]]:
    """One run's events, a step's at a time (the first list: the run's start)."""
    stepped = SteppedEngine(engine, serving.scheduler_config())
    run = engine.run
    yield [engine.start_event(len(requests), scenario.docs, scenario.doc_tokens)]
    flights: list[Flight] = []
    by_seq: dict[int, Flight] = {}
    records: list[RequestRecord] = []
    after: list[Event] = []  # arrivals at the end of the last step (a closed loop's next, as one finished)
    for out in stepped.steps(requests, serving.arrivals(), flights):
        events, after = after, []
        for f in flights[len(by_seq):]:
            by_seq[f.seq] = f
            r = f.req
            # The engine queues a closed loop's next request as the step that finished one ends, before yielding it.
            (after if f.arrival_ms > out.t_ms else events).append(
                RequestStarted(run, r.seq, r.pass_, r.order, r.doc, r.prompt_tokens)
            )
        events.append(out.event(run))
        for seq in out.finished:
            record = stepped.record(by_seq[seq])
            records.append(record)
            events.append(ttft_event(run, record))
        yield events
    records.sort(key=lambda r: r.seq)
    passes = add_totals(pass_summaries(records), records)  # with each pass's misses by cause, as the JSON result's
    yield [*(PassDone(run, summary) for summary in passes), RunDone(run, len(requests), {**run_totals(records), **totals(records)})]


def served_stream(scenario: Scenario, serving: Serving) -> Iterator[Event]:
    """Every run's events, a step of each run in turn."""
    requests = build_requests(scenario)
    # Every miss explained, as simulate_stepped explains them (sim.explain, attached at each first lookup).
    runs = [_run_events(scenario, serving, engine, requests) for engine in engines(scenario, explain=True, requests=requests)]
    for batches in zip_longest(*runs):
        for batch in batches:
            if batch is not None:
                yield from batch
