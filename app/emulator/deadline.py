"""Waiting until a ``time.perf_counter()`` deadline to a fraction of a millisecond, without holding a core.

asyncio's own timers wake up to a millisecond late: epoll takes its timeout in
whole milliseconds, rounded up (``selectors.EpollSelector.select``), and a
CPU-served prefill at ``--speed 20`` is due 2.5 ms after it arrives. On Linux
each event loop gets one timerfd, armed at its earliest deadline on the clock
``perf_counter`` reads (CLOCK_MONOTONIC, absolute), which the loop watches like
a socket: its epoll returns when the deadline passes, to the microsecond, and
nothing spins meanwhile (a spinning emulator takes the core that the client on
a two-core machine needs to read the token it is about to send), except for
the short final stretch a caller may ask for (``spin_s``). Where there is
no timerfd, the loop's timer is set a little early and the rest is waited by
yielding to other tasks.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import sys
import time
import weakref
from collections.abc import Awaitable, Callable

# How much earlier than due the loop's timer is set where there is no timerfd (epoll rounds up to whole ms).
TIMER_SLACK_S = 0.0015

_CLOCK_MONOTONIC = 1  # <linux/time.h>
_TFD_NONBLOCK = os.O_NONBLOCK  # <sys/timerfd.h>: TFD_NONBLOCK and TFD_CLOEXEC are the O_ flags
_TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    """The C library, when it has timerfds and ``perf_counter`` reads CLOCK_MONOTONIC (Linux)."""
    if not sys.platform.startswith("linux") or "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


class _LoopTimer:
    """One event loop's timerfd and the deadlines waiting on it (a heap; the fd is armed at the earliest)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL) -> None:
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd, self.loop, self.libc = fd, loop, libc
        self.waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self.armed_at: float | None = None
        self._order = itertools.count()
        loop.add_reader(fd, self._expired)
        weakref.finalize(self, os.close, fd)

    def wait(self, due: float) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.loop.create_future()
        heapq.heappush(self.waiting, (due, next(self._order), future))
        if self.armed_at is None or due < self.armed_at:
            self._arm(due)
        return future

    def _arm(self, due: float) -> None:
        seconds = int(due)
        # Rounded up to the next nanosecond: the fd never expires before the float deadline.
        nanoseconds = min(int((due - seconds) * 1e9) + 1, 999_999_999)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(seconds, nanoseconds))
        if self.libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self.armed_at = due

    def _expired(self) -> None:
        try:
            os.read(self.fd, 8)  # the expiry count; reading it re-arms the fd's readiness
        except BlockingIOError:
            pass
        self.armed_at = None
        now = time.perf_counter()
        while self.waiting and self.waiting[0][0] <= now:
            _, _, future = heapq.heappop(self.waiting)
            if not future.done():  # a cancelled waiter is simply dropped
                future.set_result(None)
        if self.waiting:
            self._arm(self.waiting[0][0])


_timers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopTimer] = weakref.WeakKeyDictionary()


def _timer() -> _LoopTimer | None:
    if _LIBC is None:
        return None
    loop = asyncio.get_running_loop()
    timer = _timers.get(loop)
    if timer is None:
        try:
            timer = _timers[loop] = _LoopTimer(loop, _LIBC)
        except (OSError, NotImplementedError):  # no fds left, or a loop that cannot watch one (Windows' proactor)
            return None
    return timer


async def sleep_until(due: float, spin_s: float = 0.0) -> None:
    """Return once ``time.perf_counter()`` has reached ``due``: by the loop's timerfd where there is one.

    With ``spin_s`` the timerfd is armed that much before ``due`` and the rest
    is waited by yielding: a process that slept wakes a tenth of a millisecond
    after its timer on a busy machine (the kernel has to give it a core back),
    and a first token due 2.5 ms after its request feels that. It is never
    sent early: the clock is read until it has reached ``due``.
    """
    if time.perf_counter() >= due:
        return
    timer = _timer()
    if timer is None:
        await yielding_sleep_until(due)
        return
    if due - spin_s > time.perf_counter():
        await timer.wait(due - spin_s)
    while time.perf_counter() < due:
        await asyncio.sleep(0)


async def yielding_sleep_until(
    due: float, clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> None:
    """Without a timerfd: the loop's timer until ``TIMER_SLACK_S`` before ``due``, then yield to other tasks until due.

    The time left is read from the clock after the timer, so a timer that woke
    late (by up to the slack) is made up for, not added.
    """
    coarse_s = due - clock() - TIMER_SLACK_S
    if coarse_s > 0:
        await sleep(coarse_s)
    while clock() < due:
        await sleep(0)
