"""An upstream's KV events, received in a thread of their own and turned into the simulator's events.

The subscriber (sim.kvevents) blocks on its socket, so it runs in a daemon
thread; readers take ``lock`` to look at the state. Each batch becomes, per
medium, one ``store`` and one ``evict`` event (tokens = blocks x their size),
and at most every ``OCCUPANCY_EVERY_S`` an ``occupancy`` event per medium with
its largest resident prefixes, appended to the watch's bounded event log. The
prefixes of an occupancy event come in the twin's LRU order where the twin
knows it (``rank``: least recently used first, those the twin does not hold
after them, largest first); the page sorts by size itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from sim.engine.events import Event, Evict, Occupancy, RunWarning, Store
from sim.kvevents import wire
from sim.kvevents.feed import Feed
from sim.kvevents.subscriber import Subscriber

OCCUPANCY_EVERY_S = 0.25
# Prefixes named in an occupancy event, largest first; the rest are summed under "other".
OCCUPANCY_PREFIXES = 40


class KvThread:
    """Subscribes to ``endpoint`` until ``stop``; ``emit`` receives the events, ``capacity`` sizes the bars."""

    def __init__(
        self, run: str, endpoint: str, replay: str | None, emit: Callable[[Event], None],
        capacity: Callable[[str], int | None], topic: str = "kv-events",
        rank: Callable[[str], Mapping[str, int]] = lambda medium: {},
        start: bool = True, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``start=False`` subscribes to nothing: batches given to ``feed.receive`` are turned into events all the
        same, on ``clock``'s time (a kept recording plays again so, on its own timestamps: app.runs.watch_replay)."""
        self.run = run
        self.lock = threading.Lock()
        self.feed = Feed(topic=topic)
        self.feed.listeners.append(self._on_batch)
        self._emit = emit
        self._capacity = capacity
        self._rank = rank
        self._endpoint, self._replay, self._topic = endpoint, replay, topic
        self._stop = threading.Event()
        self._last_occupancy = 0.0
        self._dirty = False
        self._problems_seen = 0
        self.last_message_at: float | None = None  # time.monotonic() of the last message applied
        self._clock = clock
        self._thread = threading.Thread(target=self._run, name=f"kv-events-{run}", daemon=True)
        if start:
            self._thread.start()

    def _run(self) -> None:
        sub = Subscriber(self._endpoint, self._replay, feed=self.feed)
        try:
            while not self._stop.is_set():
                if sub.wait(100):
                    with self.lock:
                        sub.poll(0)
                        self.last_message_at = time.monotonic()
                if self.feed.problem_count > self._problems_seen:
                    with self.lock:
                        self._problems_seen = self.feed.problem_count
                        self._emit(RunWarning(self.run, f"KV events: {self.feed.problems[-1]}"))
                if self._dirty and self._clock() - self._last_occupancy >= OCCUPANCY_EVERY_S:
                    with self.lock:
                        self._occupancy()
        finally:
            sub.close()

    def summary(self) -> dict[str, object]:
        """The feed's summary (``kvscope watch --json``'s fields), taken under the lock."""
        with self.lock:
            return self.feed.summary()

    def touch(self) -> None:
        """The twin's order changed: send the occupancy again (a GPU hit moves prefixes without any KV event)."""
        self._dirty = True

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def _on_batch(self, seq: int, batch: wire.Decoded) -> None:
        stored: dict[str, int] = {}
        removed: dict[str, int] = {}
        for event in batch.events:
            if isinstance(event, wire.BlockStored):
                m = wire.medium_of(event)
                stored[m] = stored.get(m, 0) + len(event.block_hashes) * event.block_size
            elif isinstance(event, wire.BlockRemoved):
                m = wire.medium_of(event)
                removed[m] = removed.get(m, 0) + len(event.block_hashes)
        for m, blocks in removed.items():
            # A removed block's size is gone with it; the medium's blocks are of one size (vLLM's block_size).
            state = self.feed.state.medium(m)
            size = state.tokens // len(state.blocks) if state.blocks else _block_size(batch)
            tokens = blocks * size
            self._emit(Evict(self.run, seq, m.lower(), -1, tokens, 0, tokens, "whole"))
        for m, tokens in stored.items():
            self._emit(Store(self.run, seq, m.lower(), -1, tokens))
        self._dirty = True
        if self._clock() - self._last_occupancy >= OCCUPANCY_EVERY_S:
            self._occupancy()

    def flush_occupancy(self) -> None:
        """The occupancy now, if anything changed since the last one was sent."""
        if self._dirty:
            self._occupancy()

    def _occupancy(self) -> None:
        self._dirty = False
        self._last_occupancy = self._clock()
        seq = self.feed.last_seq or 0
        for state in self.feed.state.ordered():
            prefixes = state.prefixes()
            ranks = self._rank(state.name)
            named = sorted(prefixes[:OCCUPANCY_PREFIXES], key=lambda p: ranks.get(p["root"], len(ranks)))  # stable
            docs = {p["root"]: p["tokens"] for p in named}
            rest = sum(p["tokens"] for p in prefixes[OCCUPANCY_PREFIXES:])
            if rest:
                docs["other"] = rest
            capacity = self._capacity(state.name) or state.tokens
            self._emit(Occupancy(self.run, seq, state.name.lower(), state.tokens, max(capacity, state.tokens), docs))


def _block_size(batch: wire.Decoded) -> int:
    return next((e.block_size for e in batch.events if isinstance(e, wire.BlockStored) and e.block_size), 16)
