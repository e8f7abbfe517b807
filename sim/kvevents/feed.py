"""A subscriber's bookkeeping, without sockets: topic and frame checks, sequence gaps, replay fill, publisher restarts.

vLLM's publisher sends ``[topic, seq, payload]`` with ``seq`` an 8-byte
big-endian counter from 0 (kv_events.py:507-511). A ``seq`` above the next
expected one means batches were lost: they are asked for from the replay
endpoint and applied in order before the batch that revealed the gap; those
the publisher no longer holds (it keeps ``buffer_steps`` batches) are counted
as ``lost``. A subscriber that joins a running publisher asks the same way
for the batches before its first one, so it learns what was already cached
(as far as the publisher still holds it). A ``seq`` at or below the last one on the live stream means the
publisher started again (a new server process, with nothing cached), so the
state is reset. Bad messages are reported and skipped; nothing applied
before them is undone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sim.kvevents import wire
from sim.kvevents.state import KvState

# Prefixes listed in a summary, largest first (their total count is given too).
MAX_LISTED_PREFIXES = 1000
# Problems kept for display; older ones are dropped (their count is in ``problem_count``).
KEPT_PROBLEMS = 100


@dataclass(frozen=True, slots=True)
class Gap:
    """Batches ``first .. until - 1`` were not received; ``payload`` is batch ``until``, held back until they are."""

    first: int
    until: int
    payload: bytes
    joining: bool = False  # the subscriber's first message: what came before it is history, not a loss

    @property
    def missing(self) -> int:
        return self.until - self.first


class Feed:
    """Applies a publisher's messages to a ``KvState`` in sequence order and counts what went wrong."""

    def __init__(self, state: KvState | None = None, topic: str = "") -> None:
        self.state = state or KvState()
        self.topic = topic.encode("utf-8")
        self.last_seq: int | None = None
        self.batches = 0
        self.gaps = 0
        self.filled = 0
        self.lost = 0
        self.restarts = 0
        self.joined_at = 0
        self.history_missed = 0
        self.malformed = 0
        self.skipped_events = 0
        self.problems: deque[str] = deque(maxlen=KEPT_PROBLEMS)
        self.problem_count = 0
        self.listeners: list[Callable[[int, wire.Decoded], None]] = []

    def report(self, problem: str) -> None:
        self.problems.append(problem)
        self.problem_count += 1

    def receive(self, frames: list[bytes]) -> Gap | None:
        """One message from the live stream. Returns the gap it reveals (the caller fills it with ``fill``), or None."""
        if len(frames) != 3:
            self.malformed += 1
            self.report(f"a message of {len(frames)} frames (expected 3: topic, seq, payload): skipped")
            return None
        topic, seq_bytes, payload = frames
        if self.topic and topic != self.topic:
            self.report(f"a message on topic {topic[:64]!r}, not {self.topic.decode()!r}: skipped")
            return None
        if len(seq_bytes) != 8:
            self.malformed += 1
            self.report(f"a sequence number of {len(seq_bytes)} bytes (expected 8): skipped")
            return None
        seq = int.from_bytes(seq_bytes, "big")
        last = self.last_seq
        if last is None and seq > 0:
            self.joined_at = seq
            return Gap(0, seq, payload, joining=True)
        if last is not None and seq <= last:
            self.restarts += 1
            self.report(f"the publisher started again (seq {seq} after {last}): what it held before is forgotten")
            self.state.reset()
        elif last is not None and seq > last + 1:
            self.gaps += 1
            return Gap(last + 1, seq, payload)
        self._apply(seq, payload)
        return None

    def fill(self, gap: Gap, replayed: Iterable[tuple[int, bytes]], why_not: str | None = None) -> None:
        """Apply what the replay endpoint sent for ``gap`` (in order, duplicates ignored), then the held batch."""
        got = 0
        for seq, payload in sorted(replayed):
            if gap.first <= seq < gap.until and seq > (self.last_seq if self.last_seq is not None else -1):
                self._apply(seq, payload)
                got += 1
        if not gap.joining:
            self.filled += got
        lost = gap.missing - got
        if lost and gap.joining:
            self.history_missed = lost
            reason = f" ({why_not})" if why_not else ""
            self.report(f"joined at seq {gap.until}: {lost} earlier batches not replayed{reason}, so blocks cached "
                        "before them are unknown until they are stored again")
        elif lost:
            self.lost += lost
            reason = f": {why_not}" if why_not else ""
            self.report(f"{lost} of {gap.missing} batches from seq {gap.first} were lost{reason}")
        self._apply(gap.until, gap.payload)

    def _apply(self, seq: int, payload: bytes) -> None:
        self.last_seq = seq
        try:
            batch = wire.decode(payload)
        except wire.MalformedBatch as exc:
            self.malformed += 1
            self.report(f"seq {seq}: {exc}: skipped")
            return
        for problem in batch.problems:
            self.skipped_events += 1
            self.report(f"seq {seq}: {problem}: skipped")
        self.batches += 1
        self.state.apply(batch.events)
        for listener in self.listeners:
            listener(seq, batch)

    def summary(self) -> dict[str, object]:
        """The ``kvscope watch --json`` shape: counts, then per medium what is resident, then the prefixes."""
        prefixes = self.state.prefixes()
        return {
            "batches": self.batches,
            "events": self.state.events,
            "gaps": self.gaps,
            "filled": self.filled,
            "lost": self.lost,
            "restarts": self.restarts,
            "joined_at": self.joined_at,
            "history_missed": self.history_missed,
            "malformed": self.malformed,
            "skipped_events": self.skipped_events,
            "problems": list(self.problems),
            "media": {m.name: m.summary() for m in self.state.ordered()},
            "prefix_count": len(prefixes),
            "prefixes": prefixes[:MAX_LISTED_PREFIXES],
        }
