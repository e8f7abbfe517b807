"""The shadow of a live run with requests in flight: vLLM's scheduler (the stepped engine) at the measured send times.

At concurrency 1 each request's prediction is the sequential engine's, made as
it leaves. With several in flight a request's TTFT depends on what the others
were doing when it arrived (the steps it shared, the prefills it queued
behind), so the prediction waits until the target's requests have all been
sent: the stepped engine then serves the scenario's requests arriving when
they were sent (ms after the first; the shadow's costs are already at the
target's speed), each generating the tokens live asked for. Its scheduler is
the emulator's own (``/kvscope/emulator`` says it) or, for a real vLLM, what
``vllm serve`` picks on an 80 GiB GPU (``sim.sched.config``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from app.live.client import TargetInfo
from app.live.shadow import shadow_costs
from app.live.targets import Target
from sim.blocks.request import Request
from sim.engine.events import GPU, Event, Lookup, RequestStarted, Ttft
from sim.engine.loop import Engine, RequestRecord
from sim.sched.arrivals import Timed
from sim.sched.config import SchedulerConfig
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.scenario import Scenario


def shadow_scheduler(info: TargetInfo) -> SchedulerConfig:
    """The target's scheduler settings: the emulator's, else ``vllm serve``'s defaults on an 80 GiB GPU."""
    given = (info.emulator or {}).get("scheduler")
    if not isinstance(given, dict):
        return SchedulerConfig()
    try:
        return SchedulerConfig(
            max_num_batched_tokens=int(given["max_num_batched_tokens"]), max_num_seqs=int(given["max_num_seqs"]),
            max_model_len=None if given.get("max_model_len") is None else int(given["max_model_len"]),
        )
    except (KeyError, TypeError, ValueError):
        return SchedulerConfig()


def predict_overlap(
    base: Scenario, scenario: Scenario, target: Target, info: TargetInfo, requests: Sequence[Request],
    sent_s: dict[int, float], output_tokens: int,
) -> list[RequestRecord]:
    """Each request's record (by seq) as the stepped engine serves them arriving at ``sent_s`` (perf_counter
    seconds by seq), on ``scenario``'s tiers (the shadow's) and the target's costs and scheduler."""
    run = "gpu+cpu" if scenario.cpu_capacity_tokens is not None else "gpu"
    engine = Engine(target.name, tier_spec(scenario, run), shadow_costs(base, info))
    block = scenario.block_size
    sent = sorted(requests, key=lambda r: (sent_s[r.seq], r.seq))
    first = sent_s[sent[0].seq]
    arrivals = tuple((sent_s[r.seq] - first) * 1000 for r in sent)
    generating = [
        dataclasses.replace(r, output_tokens=output_tokens, alloc_blocks=-(-(r.prompt_tokens + output_tokens - 1) // block))
        for r in sent
    ]
    return SteppedEngine(engine, shadow_scheduler(info)).run(generating, Timed(arrivals)).records


def overlap_events(run: str, records: Sequence[RequestRecord]) -> Iterator[Event]:
    """Each predicted request as the event stream tells one: its arrival, its GPU lookup, its TTFT."""
    for r in records:
        yield RequestStarted(run, r.seq, r.pass_, r.order, r.doc, r.prompt_tokens)
        yield Lookup(run, r.seq, GPU, r.prompt_tokens, r.gpu_hit_tokens)
        yield Ttft(
            run, r.seq, r.pass_, r.doc, r.ttft_ms, r.source, r.gpu_hit_tokens, r.cpu_hit_tokens, r.disk_hit_tokens,
            r.computed_tokens, r.stored_tokens, dict(r.tier_hits),
        )
