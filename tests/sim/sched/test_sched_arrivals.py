"""Arrivals, the waiting queue and the lifecycle: each rule of its own, and each bad value named."""

from __future__ import annotations

import pytest

from sim.sched.arrivals import ClosedLoop, OpenLoop, Timed
from sim.sched.queue import FcfsQueue
from sim.sched.status import RequestStatus


def test_an_open_loop_is_poisson_at_its_rate_and_seeded() -> None:
    # Exponential gaps of mean 1 / rate: 20,000 of them at 50/s average 20 ms; their mean's standard error is
    # 20 / sqrt(20,000) = 0.14 ms, so 2% (0.4 ms) is about 3 of them. The first request comes at 0; a seed repeats
    # its times and another gives others.
    times = OpenLoop(50.0, seed=3).times_ms(20_001)
    assert times[0] == 0.0 and times == sorted(times)
    assert times[-1] / 20_000 == pytest.approx(20.0, rel=0.02)
    assert OpenLoop(50.0, seed=3).times_ms(5) == times[:5] != OpenLoop(50.0, seed=4).times_ms(5)


def test_bad_arrivals_are_named() -> None:
    with pytest.raises(ValueError, match="concurrency must be at least 1, got 0"):
        ClosedLoop(0)
    with pytest.raises(ValueError, match="rate must be at least 0.001 requests/s, got 0"):
        OpenLoop(0)
    with pytest.raises(ValueError, match="rate must be at least 0.001 requests/s, got 5e-324"):
        OpenLoop(5e-324)  # its second request would arrive at infinity
    with pytest.raises(ValueError, match="arrival times must not decrease: request 2 at 5.0 ms after 10.0 ms"):
        Timed((0.0, 10.0, 5.0))
    with pytest.raises(ValueError, match="2 arrival times for 3 requests"):
        Timed((0.0, 1.0)).times_ms(3)


def test_the_fcfs_queue_puts_a_preempted_request_back_in_front() -> None:
    queue: FcfsQueue[str] = FcfsQueue()
    for name in ("a", "b", "c"):
        queue.add(name)
    assert queue.pop() == "a" and queue.peek() == "b"
    queue.prepend("a")  # preempted: back at the head (scheduler.py 1842)
    assert list(queue) == ["a", "b", "c"] and len(queue) == 3
    with pytest.raises(IndexError, match="empty waiting queue"):
        FcfsQueue().peek()


def test_anything_after_preempted_is_finished() -> None:
    # vLLM's rule (request.py 392-393): status > PREEMPTED.
    # WAITING, WAITING_FOR_REMOTE_KVS (loading a CPU hit), RUNNING, PREEMPTED, then the two finished states (length
    # capped, aborted).
    assert [s.is_finished for s in RequestStatus] == [False, False, False, False, True, True]
    assert [s.is_waiting for s in RequestStatus] == [True, True, False, True, False, False]
