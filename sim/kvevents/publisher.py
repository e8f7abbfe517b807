"""A ZMQ publisher of KV event batches that behaves as vLLM's ``ZmqEventPublisher`` does on the wire.

- a PUB socket sends ``[topic, seq, payload]``, ``seq`` 8 bytes big-endian from 0
  (vllm/distributed/kv_events.py:507-511);
- the last ``buffer_steps`` batches are kept; a ROUTER socket answers a
  request ``[identity, b"", start_seq]`` with ``[identity, b"", topic, seq,
  payload]`` for every kept batch from ``start_seq``, then the end marker
  ``[identity, b"", b"", seq -1, b""]`` (kv_events.py:521-539);
- one thread owns both sockets (ZMQ sockets are not thread-safe); ``publish``
  only queues.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

import zmq

from sim.kvevents import wire

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class Publisher:
    """``publish(events)`` from any thread; ``close()`` when done. Endpoints are bound (``tcp://127.0.0.1:5557``)."""

    def __init__(
        self, endpoint: str, replay_endpoint: str | None = None, topic: str = "", buffer_steps: int = 10_000,
        first_seq: int = 0,
    ) -> None:
        self._ctx = zmq.Context.instance()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(endpoint)
        self._replay: zmq.Socket | None = None
        if replay_endpoint:
            self._replay = self._ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))
            try:
                self._replay.bind(replay_endpoint)
            except zmq.ZMQError:
                self._replay.close(linger=0)
                self._pub.close(linger=0)
                raise
        self._topic = topic.encode("utf-8")
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        self._seq = first_seq
        self.sent = 0
        # Tests drop chosen sequence numbers from the live stream (they stay in the replay buffer).
        self.drop: set[int] = set()
        self._thread = threading.Thread(target=self._run, name="kv-events-publisher", daemon=True)
        self._thread.start()

    @property
    def next_seq(self) -> int:
        """The sequence number the next batch sent will carry."""
        return self._seq

    def publish(self, events: list[wire.KvEvent], ts: float | None = None) -> None:
        self._queue.put(wire.encode(events, time.time() if ts is None else ts))

    def publish_payload(self, payload: bytes) -> None:
        """Send raw bytes as a batch's payload (tests send malformed ones)."""
        self._queue.put(payload)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Wait until everything queued so far was sent."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.002)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=2)
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)

    def _run(self) -> None:
        while True:
            if self._replay is not None and self._replay.poll(0):
                self._serve_replay()
            try:
                payload = self._queue.get(timeout=0.02)
            except queue.Empty:
                continue
            if payload is None:
                self._queue.task_done()
                return
            seq = self._seq
            self._seq += 1
            if seq not in self.drop:
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            self._buffer.append((seq, payload))
            self.sent += 1
            self._queue.task_done()

    def _serve_replay(self) -> None:
        assert self._replay is not None
        frames = self._replay.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start = frames
        start_seq = int.from_bytes(start, "big")
        for seq, payload in self._buffer:
            if seq >= start_seq:
                self._replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))
