"""A ZMQ subscriber to a vLLM server's KV events: the live stream, gaps filled from the replay endpoint.

The replay client is a DEALER socket sending ``[b"", start_seq]``, which a
ROUTER sees as ``[identity, b"", start_seq]`` (what vLLM's
``_service_replay`` expects, kv_events.py:525-530). Replies are ``[b"",
topic, seq, payload]`` in vLLM 0.33 or ``[b"", seq, payload]`` in older
versions (and the example subscriber); an empty payload ends the replay. A
replay endpoint that does not answer in ``replay_timeout_s`` leaves the gap
counted as lost, with the reason, and the socket is opened afresh so a late
answer cannot be mistaken for the next one.
"""

from __future__ import annotations

import time

import zmq

from sim.kvevents.feed import Feed, Gap


class Subscriber:
    """Connects to ``endpoint`` (and ``replay_endpoint``); ``poll`` applies what has arrived to ``feed``."""

    def __init__(
        self, endpoint: str, replay_endpoint: str | None = None, topic: str = "", feed: Feed | None = None,
        replay_timeout_s: float = 1.0,
    ) -> None:
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.feed = feed or Feed(topic=topic)
        self.replay_timeout_s = replay_timeout_s
        self._ctx = zmq.Context.instance()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        # ZMQ filters by prefix; Feed checks the topic exactly.
        self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
        self._sub.connect(endpoint)
        self._replay: zmq.Socket | None = None
        self.received = 0
        self.last_message_at: float | None = None

    def wait(self, timeout_ms: int) -> bool:
        """Whether a message is waiting, after waiting up to ``timeout_ms`` for one (nothing is applied)."""
        return bool(self._sub.poll(timeout_ms))

    def poll(self, timeout_ms: int = 100, max_messages: int = 10_000) -> int:
        """Wait up to ``timeout_ms`` for a message, then apply every one that is waiting; returns how many."""
        n = 0
        if not self._sub.poll(timeout_ms):
            return 0
        while n < max_messages:
            try:
                frames = self._sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            n += 1
            self.received += 1
            self.last_message_at = time.monotonic()
            gap = self.feed.receive(frames)
            if gap is not None:
                self._fill(gap)
        return n

    def _fill(self, gap: Gap) -> None:
        if self.replay_endpoint is None:
            self.feed.fill(gap, [], "no replay endpoint given")
            return
        replayed: list[tuple[int, bytes]] = []
        why_not = None
        sock = self._replay_socket()
        sock.send_multipart((b"", gap.first.to_bytes(8, "big")))
        deadline = time.monotonic() + self.replay_timeout_s
        while True:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not sock.poll(left_ms):
                why_not = f"the replay endpoint {self.replay_endpoint} did not answer in {self.replay_timeout_s:g} s"
                self._drop_replay_socket()
                break
            frames = sock.recv_multipart()
            if frames and frames[0] == b"":
                frames = frames[1:]
            if not frames or not frames[-1]:
                break  # the end marker: an empty payload
            if len(frames) < 2 or len(frames[-2]) != 8:
                continue
            seq = int.from_bytes(frames[-2], "big")
            if seq < gap.until:
                replayed.append((seq, frames[-1]))
        if why_not is None and len(replayed) < gap.missing:
            why_not = "the publisher no longer held them"
        self.feed.fill(gap, replayed, why_not)

    def _replay_socket(self) -> zmq.Socket:
        if self._replay is None:
            self._replay = self._ctx.socket(zmq.DEALER)
            self._replay.setsockopt(zmq.LINGER, 0)
            assert self.replay_endpoint is not None
            self._replay.connect(self.replay_endpoint)
        return self._replay

    def _drop_replay_socket(self) -> None:
        if self._replay is not None:
            self._replay.close(linger=0)
            self._replay = None

    def close(self) -> None:
        self._sub.close(linger=0)
        self._drop_replay_socket()
