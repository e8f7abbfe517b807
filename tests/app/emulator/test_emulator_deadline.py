"""How the emulator waits for a deadline: the mechanism, not its precision (``make bench`` measures that)."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from app.emulator import deadline
from app.emulator.deadline import TIMER_SLACK_S, sleep_until, yielding_sleep_until

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfds are Linux's")


class FakeClock:
    """A clock that moves only when slept on: a timer wakes ``late_s`` after it was due, a yield takes ``yield_s``."""

    def __init__(self, late_s: float, yield_s: float = 1e-5) -> None:
        self.now, self.late_s, self.yield_s = 100.0, late_s, yield_s
        self.timers: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.timers.append(seconds)
            self.now += seconds + self.late_s
        else:
            self.now += self.yield_s


@pytest.mark.parametrize("late_ms", [0.0, 0.4, 1.0])
def test_without_a_timerfd_a_late_timer_is_made_up_for_not_added(late_ms: float) -> None:
    # Due 10 ms from now. The loop's timer is asked for 10 - 1.5 (the slack) = 8.5 ms and wakes late_ms after
    # that (epoll rounds up to whole ms, so at most 1 ms late); the rest is read from the clock and waited by
    # 10 us yields, so the wait ends within one yield of the deadline whatever the lateness below the slack.
    clock = FakeClock(late_ms / 1000)
    due = clock.now + 0.010
    asyncio.run(yielding_sleep_until(due, clock, clock.sleep))
    assert clock.timers == [pytest.approx(0.010 - TIMER_SLACK_S)]
    assert due <= clock.now < due + clock.yield_s + 1e-12


def test_without_a_timerfd_a_deadline_closer_than_the_slack_is_waited_by_yielding_alone() -> None:
    clock = FakeClock(late_s=0.001)
    due = clock.now + TIMER_SLACK_S / 2
    asyncio.run(yielding_sleep_until(due, clock, clock.sleep))
    assert clock.timers == []  # no loop timer: it could wake a millisecond late
    assert due <= clock.now < due + clock.yield_s + 1e-12


@linux_only
@pytest.mark.parametrize("spin_ms", [0.0, 5.0])
def test_deadlines_wait_on_the_loops_timerfd_and_end_in_deadline_order_never_early(spin_ms: float) -> None:
    # Five waits started in a shuffled order, one of them cancelled: each of the others returns once the clock
    # has passed its own deadline, in deadline order, and the cancelled one takes nothing with it. With a spin
    # (the timerfd armed 5 ms early, the rest waited by yielding) none returns early either.
    async def run() -> tuple[list[tuple[float, float]], bool]:
        assert deadline._timer() is not None  # a timerfd, not the yielding fallback
        start = time.perf_counter()
        # Tens of ms apart, not single ms: in the whole suite a collection can hold the loop ~10 ms before the cancel.
        dues = [start + ms / 1000 for ms in (300, 100, 500, 200, 400)]
        ended: list[tuple[float, float]] = []

        async def one(due: float) -> None:
            await sleep_until(due, spin_ms / 1000)
            ended.append((due, time.perf_counter()))

        tasks = [asyncio.create_task(one(d)) for d in dues]
        cancelled = tasks[1]  # due at 100 ms, the first to be armed
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return ended, cancelled.cancelled()

    ended, was_cancelled = asyncio.run(run())
    assert was_cancelled and len(ended) == 4
    assert [d for d, _ in ended] == sorted(d for d, _ in ended)
    assert all(at >= due for due, at in ended)


@linux_only
def test_waiting_on_the_timerfd_does_not_spin() -> None:
    # 100 waits of 1 ms, each closer than the slack, which is where a yielding wait spins from start to end: it
    # would use about as much CPU as it waits (less when it shares a core). On the timerfd the loop sleeps in
    # epoll; each wait costs only its wake-up.
    async def run() -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(100):
            await sleep_until(time.perf_counter() + 0.001)
        return time.process_time() - cpu, time.perf_counter() - wall

    cpu_s, waited_s = asyncio.run(run())
    assert cpu_s < 0.3 * waited_s, (cpu_s, waited_s)


def test_a_deadline_already_past_returns_at_once() -> None:
    async def run() -> None:
        await asyncio.wait_for(sleep_until(time.perf_counter() - 1.0), timeout=5)

    asyncio.run(run())
