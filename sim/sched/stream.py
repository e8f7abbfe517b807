"""A scenario served under load as a step stream: the sequential stream's events, step by step, every run side by side.

Each run's steps come in lockstep (step k of every run, then step k + 1), and
each step's events end with its ``step`` event: first, for every request whose
first token the step sampled, its ``request``, ``lookup``, ``evict``, ``load``
and ``ttft`` (with its queueing and arrival); then the tiers' ``occupancy``
where it changed, the GPU's telling blocks held by running requests (pinned:
no eviction can take them) from cached ones in the free queue; then a pass's
summary once every request of it has finished (``done`` after the last). A
request's events wait for its first token so that its lines read as the
sequential stream's: its hits are those of its first admission.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sim.engine.events import GPU, Event, Occupancy, PassDone, RunDone, Step, Ttft
from sim.engine.loop import Engine, RequestRecord
from sim.engine.result import pass_summaries, run_totals
from sim.explain.summary import add_totals, totals
from sim.numeric.stats import DECIMALS
from sim.sched.flight import Flight
from sim.sched.output import StepOutput
from sim.sched.serving import Serving
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import engines
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario

STEP_END = Step.kind  # the kind of the event that ends each step's events


@dataclass(frozen=True, slots=True)
class PinnedOccupancy(Occupancy):
    """The GPU's occupancy under load: ``docs`` counts every block a document holds, and ``pinned`` those of them
    that running requests hold (the rest are cached in the free queue, LRU's to evict)."""

    pinned: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueuedTtft(Ttft):
    """A request's TTFT under load: it counts ``queue_ms``, waited from its arrival (``arrival_ms``) to its first
    admission; ``step`` sampled its first token."""

    queue_ms: float = 0.0
    arrival_ms: float = 0.0
    step: int = 0


@dataclass(slots=True)
class _Run:
    """One run's engine, its steps as they come, and what it has reported."""

    engine: Engine
    stepped: SteppedEngine
    steps: Iterator[StepOutput]
    flights: list[Flight]
    by_seq: dict[int, Flight] = field(default_factory=dict)
    records: dict[int, RequestRecord] = field(default_factory=dict)
    pass_left: dict[int, int] = field(default_factory=dict)  # pass -> its requests not yet finished
    last_occupancy: dict[str, Any] = field(default_factory=dict)  # tier -> what its last occupancy event said
    gpu_state: tuple[int, int] = (-1, -1)  # (held blocks, free blocks) when the GPU's split was last counted
    done: bool = False


def stepped_stream(scenario: Scenario, serving: Serving) -> Iterator[Event]:
    """Every run's events, a step of each at a time (the engines' ``steps``), as the module docstring orders them."""
    requests = build_requests(scenario)
    config, arrivals = serving.scheduler_config(), serving.arrivals()
    runs = []
    # Every miss explained as simulate_stepped explains them (sim.explain, attached at each first lookup), so that
    # the stream's figures are the JSON result's.
    for engine in engines(scenario, explain=True, requests=requests):
        stepped = SteppedEngine(engine, config)
        flights: list[Flight] = []
        run = _Run(engine, stepped, stepped.steps(requests, arrivals, flights), flights)
        for req in requests:
            run.pass_left[req.pass_] = run.pass_left.get(req.pass_, 0) + 1
        runs.append(run)
        yield engine.start_event(len(requests), scenario.docs, scenario.doc_tokens)
    while not all(r.done for r in runs):
        for run in runs:
            if run.done:
                continue
            out = next(run.steps, None)
            if out is None:  # an engine with no requests ends at once
                run.done = True
                yield RunDone(run.engine.run, 0, run_totals([]))
                continue
            yield from _step_events(run, out)


def _step_events(run: _Run, out: StepOutput) -> Iterator[Event]:
    engine, stepped = run.engine, run.stepped
    name = engine.run
    for f in run.flights[len(run.by_seq) :]:
        run.by_seq[f.seq] = f
    firsts = [run.by_seq[seq] for seq in out.scheduled if run.by_seq[seq].first_token_step == out.step]
    for f in firsts:
        yield from _first_token(run, f, out.step)
    first_seq = next(iter(out.scheduled))
    yield from _occupancy(run, first_seq, out)
    for seq in out.finished:
        p = run.by_seq[seq].req.pass_
        run.pass_left[p] -= 1
        if run.pass_left[p] == 0:
            yield PassDone(name, _pass_summary(run, p))
    if not any(run.pass_left.values()):
        run.done = True
        records = sorted(run.records.values(), key=lambda r: r.seq)
        yield RunDone(name, len(records), {**run_totals(records), **totals(records)})
    # The ledger's line (one definition of a step's fields, sim.sched.output) and who runs and waits after it: the
    # requests that arrived at its end (a closed loop's next ones) already waiting, which the ledger's counts leave
    # out; ``seq`` is the first request it scheduled (the only one when requests do not overlap).
    yield Step(name, {
        **out.to_dict(), "seq": first_seq, "running_seqs": [f.seq for f in stepped.running],
        "waiting_seqs": [f.seq for f in (*stepped.holding, *stepped.waiting)],
    })


def _first_token(run: _Run, f: Flight, step: int) -> Iterator[Event]:
    """A request's events as the sequential stream sends them, at the step that sampled its first token."""
    engine = run.engine
    name, req = engine.run, f.req
    assert f.first is not None
    ext = f.first[1]
    queue_ms = run.stepped.queue_ms.get(f.seq, 0.0)
    rec = run.stepped.record(f)  # with its misses' causes
    run.records[f.seq] = rec
    yield from engine.lookup_events(req, rec, ext)
    yield QueuedTtft(
        name, req.seq, req.pass_, req.doc, rec.ttft_ms, rec.source, rec.gpu_hit_tokens, rec.cpu_hit_tokens,
        rec.disk_hit_tokens, rec.computed_tokens, rec.stored_tokens, dict(rec.tier_hits),
        queue_ms=round(queue_ms, 3), arrival_ms=round(f.arrival_ms, 3), step=step,
    )


def gpu_split(stepped: SteppedEngine) -> tuple[dict[int, int], dict[int, int]]:
    """(blocks per document on the GPU, those of them running requests hold); -1 is the shared prefix.

    A held block belongs to the document whose request holds it (its first
    ``shared_blocks`` to the shared prefix), counted once however many
    requests share it; a cached block in the free queue to the document that
    cached it. A block held twice over (a hit on another running request's
    blocks) is one block.
    """
    gpu = stepped.gpu
    owner: dict[int, int] = {}
    for f in stepped.running:
        shared, doc = f.req.shared_blocks, f.req.doc
        for i, b in enumerate(f.blocks):
            owner.setdefault(b, -1 if i < shared else doc)
    pinned: dict[int, int] = {}
    held_cached: dict[int, int] = {}
    block_hash, block_doc, cached = gpu.block_hash, gpu.block_doc, gpu.cached
    for b, doc in owner.items():
        pinned[doc] = pinned.get(doc, 0) + 1
        key = block_hash[b]
        if key is not None and cached.get(key) == b:  # one of doc_blocks' distinct cached blocks
            held_cached[block_doc[b]] = held_cached.get(block_doc[b], 0) + 1
    total = dict(pinned)
    for doc, blocks in gpu.doc_blocks.items():
        free = blocks - held_cached.get(doc, 0)
        if free > 0:
            total[doc] = total.get(doc, 0) + free
    return total, pinned


def _occupancy(run: _Run, seq: int, out: StepOutput) -> Iterator[Event]:
    """Each tier's occupancy after the step, where it changed since the run's last one."""
    engine, stepped = run.engine, run.stepped
    block = engine.units.block
    # A step that admitted, finished and preempted nothing and took no block (most decode steps) leaves the split as
    # it was: counted again only when it may have changed, not over every held block at every step.
    state = (len(stepped.refs), len(engine.gpu.free_queue))
    if state != run.gpu_state or out.admitted or out.finished or out.preempted:
        run.gpu_state = state
        total, pinned = gpu_split(stepped)
        docs = {str(d): b * block for d, b in sorted(total.items()) if b}
        held = {str(d): b * block for d, b in sorted(pinned.items()) if b}
        said = (docs, held)
        if run.last_occupancy.get(GPU) != said:
            run.last_occupancy[GPU] = said
            capacity = engine.gpu.capacity_blocks * block
            yield PinnedOccupancy(engine.run, seq, GPU, sum(docs.values()), capacity, docs, held)
    for store in engine.offload:
        by_doc = {str(d): t for d, t in store.doc_tokens.items() if t}
        if run.last_occupancy.get(store.name) != by_doc:
            run.last_occupancy[store.name] = by_doc
            yield Occupancy(engine.run, seq, store.name, store.used_tokens, store.capacity_tokens, by_doc)


def _pass_summary(run: _Run, number: int) -> dict[str, Any]:
    """The pass's summary as the JSON result's ``passes`` (TTFT with queueing), with its time per output token (the
    mean over requests that generated more than one) and its output tokens per second from its first arrival to
    its last finish."""
    records = [r for r in run.records.values() if r.pass_ == number]
    summary = add_totals(pass_summaries(records), records)[0]
    flights = [run.by_seq[r.seq] for r in records]
    tpots = [(f.e2e_ms - f.ttft_ms) / (f.num_output - 1) for f in flights if f.num_output > 1]
    start = min(f.arrival_ms for f in flights)
    end = max(f.arrival_ms + f.e2e_ms for f in flights)
    span_s = (end - start) / 1000.0
    summary["tpot_ms"] = round(sum(tpots) / len(tpots), DECIMALS) if tpots else None
    summary["output_tokens_per_s"] = round(sum(f.num_output for f in flights) / span_s, DECIMALS) if span_s > 0 else None
    return summary
