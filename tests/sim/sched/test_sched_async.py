"""Asynchronous scheduling (``--async-scheduling``): each step scheduled while the one before it runs.

vLLM 0.33.0 ``vllm serve`` turns it on (``config/vllm.py`` 1685-1719) and then runs ``EngineCore.step_with_batch_queue``
with two batches in flight (``core.py`` 708-800, ``max_concurrent_batches`` 2, ``config/vllm.py`` 588-598): a step is
scheduled before the output of the step before it is processed, so a running request's next decode is scheduled a
step ahead (``AsyncScheduler``, ``num_output_placeholders``) and what that step frees or finishes is seen one
schedule later. The facts below are upstream's own (``tests/v1/core/test_async_scheduler.py``) and cases derived
from the same rules. Block size 16, every step 1 ms.
"""

from __future__ import annotations

import pytest

from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.sched.arrivals import ClosedLoop, Timed
from sim.sched.config import SchedulerConfig
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario
from tests.sim.sched.test_sched_golden import lone_engine, lone_requests

ASYNC = SchedulerConfig(async_scheduling=True)
SYNC = SchedulerConfig()


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5])
def test_stop_by_max_tokens_schedules_no_token_more(max_tokens: int) -> None:
    # Upstream's test_stop_by_max_tokens: two requests, the second added after the first schedule. Scheduled a step
    # ahead, a request's decodes stop exactly at its last token (scheduler.py 800-813): each is scheduled its
    # prompt plus max_tokens - 1 tokens (the last sampled token's KV is never computed) and generates max_tokens.
    requests = lone_requests([40, 40], max_tokens)
    engine = lone_engine(64, ASYNC)
    run = engine.run(requests, Timed((0.0, 0.5)))
    assert sum(o.scheduled_tokens for o in run.steps) == 2 * (40 + max_tokens - 1)
    assert [f.num_output for f in run.flights] == [max_tokens, max_tokens]


def test_prefill_dedup_in_one_step_and_after() -> None:
    # Upstream's test_prefix_caching_for_prefill_dedup: requests with one 100-token prompt. The first two in one
    # step: the second hits the first's 6 blocks (capped at (100 - 1) // 16), cached at allocation, and computes
    # 100 % 16 = 4 tokens. Every later one (3 decodes each, 2 in flight) computes the same 4.
    s = Scenario(docs=1, doc_tokens=100, question_tokens=0, output_tokens=3, gpu_tokens=64 * 16, passes=[PassSpec()] * 5)
    engine = SteppedEngine(Engine("gpu", tier_spec(s, "gpu"), default_costs()), ASYNC, StepCosts.clock())
    run = engine.run(build_requests(s), ClosedLoop(2))
    assert run.steps[0].scheduled == {0: 100, 1: 4}
    assert [a.hit_tokens for o in run.steps for a in o.admitted] == [0, 96, 96, 96, 96]


def test_a_finished_requests_blocks_are_seen_a_schedule_later() -> None:
    # C: a 16-token prompt generating 10 tokens (2 blocks at most); A and B: 64-token prompts generating 1 (4 blocks
    # each). 6 usable blocks: C with A, or C with B, never all three. All arrive at 0 ms, in that order.
    c, a, b = lone_requests([16, 64, 64], 1)
    c = lone_requests([16], 10)[0]
    a.block_keys = [k + 100 for k in a.block_keys]
    b.block_keys = [k + 200 for k in b.block_keys]
    a.seq, b.seq = 1, 2
    requests = [c, a, b]
    # Synchronous: step 1 prefills C (1 block) and A (4 blocks); B's 4 do not fit in the 1 left. A finishes with its
    # token and frees 4: step 2 decodes C (its 17th token needs a 2nd block) and admits B (4 of the 4 left).
    sync = lone_engine(7, SYNC).run(requests, Timed((0.0, 0.0, 0.0)))
    assert [o.scheduled for o in sync.steps[:2]] == [{0: 16, 1: 64}, {0: 1, 2: 64}]
    # Asynchronous: step 2 is scheduled before step 1's output: C's first decode ahead (its 2nd block takes the
    # last free one), A skipped (its one token is in flight), A's blocks not yet freed, so B waits. Step 1's output
    # then finishes A; step 3, scheduled before step 2's output, decodes C again and admits B.
    ahead = lone_engine(7, ASYNC).run(requests, Timed((0.0, 0.0, 0.0)))
    assert [o.scheduled for o in ahead.steps[:3]] == [{0: 16, 1: 64}, {0: 1}, {0: 1, 2: 64}]
    # B's first token: the end of step 2 (2 ms) against the end of step 3 (3 ms); C is scheduled 16 + 10 - 1 tokens
    # either way and finishes in step 10.
    assert (sync.records[2].ttft_ms, ahead.records[2].ttft_ms) == (2.0, 3.0)
    assert sum(o.scheduled.get(0, 0) for o in ahead.steps) == 16 + 10 - 1 == sum(o.scheduled.get(0, 0) for o in sync.steps)
    assert [f.first_token_step for f in ahead.flights] == [1, 1, 3]


def test_one_request_at_a_time_nothing_changes() -> None:
    # One in flight, a request's decodes run one a step either way (each scheduled a step ahead, its last skipped),
    # and the next request arrives when the last token is known, before the next step is scheduled: the same steps.
    s = Scenario(docs=3, doc_tokens=100, question_tokens=12, output_tokens=4, gpu_tokens=64 * 16, passes=[PassSpec()] * 2)
    runs = [
        SteppedEngine(Engine("gpu", tier_spec(s, "gpu"), default_costs()), config, StepCosts.clock()).run(
            build_requests(s), ClosedLoop(1)
        )
        for config in (SYNC, ASYNC)
    ]
    decisions = ("step", "t_ms", "dt_ms", "scheduled", "admitted", "preempted", "finished", "prefill_tokens", "decode_tokens")
    sync, ahead = ([{k: o.to_dict()[k] for k in decisions} for o in run.steps] for run in runs)
    assert sync == ahead
    assert [r.to_dict() for r in runs[0].records] == [r.to_dict() for r in runs[1].records]
    # The ledger counts blocks when the step's output is processed: under asynchronous scheduling that is after the
    # next step was scheduled, its decode's new block taken (step 1 of a 112-token prompt: 7 blocks, then 8).
    assert (runs[0].steps[0].free_blocks, runs[1].steps[0].free_blocks) == (63 - 7, 63 - 8)
