"""KV events: vLLM's wire format decoded in both layouts, the resident-block state, and the subscriber's sequence
handling (gaps filled by replay, publisher restarts, malformed frames) over real ZMQ sockets on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import msgspec
import pytest
import zmq

from live_servers import free_port
from sim.kvevents import wire
from sim.kvevents.feed import Feed
from sim.kvevents.publisher import Publisher
from sim.kvevents.state import KvState
from sim.kvevents.subscriber import Subscriber


def stored(hashes: list, parent=None, medium: str | None = "GPU", block_size: int = 16) -> wire.BlockStored:
    return wire.BlockStored(hashes, parent, [7] * (block_size * len(hashes)), block_size, None, medium, None)


def removed(hashes: list, medium: str | None = "GPU") -> wire.BlockRemoved:
    return wire.BlockRemoved(hashes, medium)


# -- the wire format -------------------------------------------------------------------------------------------


def test_current_layout_is_an_array_batch_of_tagged_maps() -> None:
    # vLLM 0.33: KVEventBatch is array_like, its events are maps tagged "type" (kv_events.py:31-149); defaulted
    # fields equal to None are omitted (omit_defaults), the three required ones (lora_id, medium, lora_name) are not.
    payload = wire.encode([wire.BlockStored([1, 2], None, list(range(32)), 16, None, "GPU", None, [None, None], 0)], 5.0)
    raw = msgspec.msgpack.decode(payload)
    assert raw == [5.0, [{
        "type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None, "token_ids": list(range(32)),
        "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None, "extra_keys": [None, None],
        "group_idx": 0,
    }], 0]


def test_older_array_layout_with_trailing_fields_absent_decodes() -> None:
    # Older vLLM (and its example subscriber) encoded events array_like, tag first; the oldest had no medium.
    payload = msgspec.msgpack.encode([1.5, [["BlockStored", [10, 11], 9, [1] * 32, 16, None], ["BlockRemoved", [10]]]])
    batch = wire.decode(payload)
    assert batch.ts == 1.5 and batch.data_parallel_rank is None and batch.problems == []
    first, second = batch.events
    assert isinstance(first, wire.BlockStored) and first.block_hashes == [10, 11] and first.parent_block_hash == 9
    assert first.medium is None and wire.medium_of(first) == "GPU"  # None is the GPU
    assert isinstance(second, wire.BlockRemoved) and second.block_hashes == [10]


def test_hashes_may_be_bytes_or_ints() -> None:
    # ExternalBlockHash = bytes | int (kv_cache_utils.py:57): sha256 bytes unless VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES.
    digest = bytes(range(32))
    batch = wire.decode(wire.encode([stored([digest, 2**64 - 1])], 0.0))
    assert batch.events[0].block_hashes == [digest, 2**64 - 1]
    assert wire.hash_label(digest) == "0001020304050607" and wire.hash_label(2**64 - 1) == "f" * 16


def test_unknown_tags_and_bad_events_are_skipped_one_by_one() -> None:
    payload = msgspec.msgpack.encode([2.0, [
        {"type": "BlockTeleported", "block_hashes": [1]},
        {"type": "BlockRemoved", "block_hashes": [5], "medium": "CPU"},
        {"type": "BlockStored", "block_hashes": "not a list"},
    ]])
    batch = wire.decode(payload)
    assert [type(e).__name__ for e in batch.events] == ["BlockRemoved"]
    assert len(batch.problems) == 2
    assert "unknown event tag 'BlockTeleported'" in batch.problems[0]
    assert batch.problems[1].startswith("event 2: BlockStored")


def test_a_payload_that_is_no_batch_is_malformed() -> None:
    for payload in (b"\xc1", msgspec.msgpack.encode({"ts": 1}), msgspec.msgpack.encode("hello")):
        with pytest.raises(wire.MalformedBatch):
            wire.decode(payload)


# -- the state ------------------------------------------------------------------------------------------------


def test_a_hash_announced_twice_needs_two_removals() -> None:
    # vLLM announces a hash once per block holding it (a recomputed last block is a second copy).
    state = KvState()
    state.apply([stored([1, 2, 3]), stored([3], parent=2)])
    gpu = state.media["GPU"]
    assert gpu.refs() == {1: 1, 2: 1, 3: 2}
    assert gpu.summary() == {"blocks": 3, "tokens": 48, "stored": 4, "removed": 0}
    state.apply([removed([3])])
    assert 3 in gpu.blocks  # one copy left
    state.apply([removed([3]), removed([99])])
    # 3 gone: 2 blocks of 16 tokens; the unknown 99 changes nothing and is counted apart.
    assert gpu.summary() == {"blocks": 2, "tokens": 32, "stored": 4, "removed": 2}
    assert gpu.unknown_removes == 1


def test_media_are_kept_apart_and_a_clear_empties_only_the_gpu() -> None:
    state = KvState()
    state.apply([stored([1, 2]), stored([1, 2], medium="CPU"), stored([5], medium=None)])
    assert set(state.media) == {"GPU", "CPU"}
    assert sorted(state.media["GPU"].blocks) == [1, 2, 5]  # medium None is the GPU
    state.apply([wire.AllBlocksCleared()])
    assert state.media["GPU"].blocks == {} and sorted(state.media["CPU"].blocks) == [1, 2]


def test_blocks_group_into_prefixes_by_their_parent_chain() -> None:
    state = KvState()
    # Document A: 1-2-3, then 4 stored later on top of 3; document B: 10-11; C's head was evicted, so 21 (parent 20)
    # hangs from nothing resident and starts its own prefix.
    state.apply([stored([1, 2, 3]), stored([4], parent=3), stored([10, 11]), stored([20, 21]), removed([20])])
    got = [(p["root"], p["blocks"], p["tokens"]) for p in state.prefixes()]
    label = wire.hash_label
    assert got == [(label(1), 4, 64), (label(10), 2, 32), (label(21), 1, 16)]
    assert state.media["GPU"].chain(4) == [1, 2, 3, 4]


# -- the feed (no sockets) -------------------------------------------------------------------------------------


def frames(seq: int, events: list, topic: bytes = b"kv") -> list[bytes]:
    return [topic, seq.to_bytes(8, "big"), wire.encode(events, float(seq))]


def test_wrong_topic_and_bad_frames_are_reported_and_skipped() -> None:
    feed = Feed(topic="kv")
    assert feed.receive(frames(0, [stored([1])])) is None
    feed.receive(frames(1, [stored([2])], topic=b"kv-other"))  # ZMQ's prefix match lets it through; Feed does not
    feed.receive([b"kv", b"\x00\x01", b"x"])  # a 2-byte seq
    feed.receive([b"kv", (1).to_bytes(8, "big")])  # two frames
    feed.receive([b"kv", (1).to_bytes(8, "big"), b"\xc1"])  # not msgpack
    feed.receive(frames(2, [stored([3])]))
    assert sorted(feed.state.media["GPU"].blocks) == [1, 3]
    assert feed.malformed == 3 and feed.problem_count == 4 and feed.gaps == 0
    assert "topic b'kv-other'" in feed.problems[0]


# -- over real sockets -----------------------------------------------------------------------------------------


def endpoints() -> tuple[str, str]:
    return f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"


@pytest.fixture()
def pubsub() -> Iterator[tuple[Publisher, Subscriber]]:
    live, replay = endpoints()
    pub = Publisher(live, replay, topic="kv-events")
    sub = Subscriber(live, replay, topic="kv-events")
    connect(pub, sub)
    yield pub, sub
    sub.close()
    pub.close()


def connect(pub: Publisher, sub: Subscriber) -> None:
    """PUB drops messages until the SUB has joined: send a probe until one arrives, then forget it."""
    deadline = time.monotonic() + 10
    while sub.received == 0:
        assert time.monotonic() < deadline, "the subscriber never joined"
        pub.publish([])
        sub.poll(50)
    pub.flush()
    drain(pub, sub, pub.next_seq - 1)  # every probe sent so far, so that the tests' seq numbers start at next_seq
    sub.feed.state = KvState()


def drain(pub: Publisher, sub: Subscriber, until_seq: int) -> None:
    deadline = time.monotonic() + 10
    while sub.feed.last_seq is None or sub.feed.last_seq < until_seq:
        assert time.monotonic() < deadline, f"stuck at seq {sub.feed.last_seq}"
        sub.poll(50)


def test_dropped_batches_are_filled_from_the_replay_endpoint(pubsub: tuple[Publisher, Subscriber]) -> None:
    pub, sub = pubsub
    start = pub.next_seq  # the probes took seq 0 .. start - 1
    pub.drop = {start + 1, start + 2}  # lost on the live stream, still in the replay buffer
    for i in range(5):
        pub.publish([stored([100 + i])])
    drain(pub, sub, start + 4)
    # All five blocks arrived: 3 live, 2 by replay, applied in order before batch start + 3.
    assert sorted(sub.feed.state.media["GPU"].blocks) == [100, 101, 102, 103, 104]
    assert (sub.feed.gaps, sub.feed.filled, sub.feed.lost) == (1, 2, 0)


def test_a_gap_the_publisher_no_longer_holds_is_counted_lost() -> None:
    live, replay = endpoints()
    pub = Publisher(live, replay, topic="kv-events", buffer_steps=2)
    sub = Subscriber(live, replay, topic="kv-events")
    try:
        connect(pub, sub)
        start = pub.next_seq
        pub.drop = {start, start + 1, start + 2}
        for i in range(4):
            pub.publish([stored([200 + i])])
        drain(pub, sub, start + 3)
        # The buffer keeps the last 2 batches: start+2 and start+3. Of the 3 missing only start+2 comes back.
        assert sorted(sub.feed.state.media["GPU"].blocks) == [202, 203]
        assert (sub.feed.filled, sub.feed.lost) == (1, 2)
        assert "2 of 3 batches" in sub.feed.problems[-1] and "no longer held" in sub.feed.problems[-1]
    finally:
        sub.close()
        pub.close()


def test_a_replay_endpoint_that_never_answers_is_named() -> None:
    live, silent = endpoints()
    pub = Publisher(live, None, topic="kv-events")  # nobody binds the replay endpoint
    sub = Subscriber(live, silent, topic="kv-events", replay_timeout_s=0.3)
    try:
        connect(pub, sub)
        start = pub.next_seq
        pub.drop = {start}
        pub.publish([stored([1])])
        pub.publish([stored([2])])
        drain(pub, sub, start + 1)
        assert sorted(sub.feed.state.media["GPU"].blocks) == [2] and sub.feed.lost == 1
        assert f"the replay endpoint {silent} did not answer in 0.3 s" in sub.feed.problems[-1]
    finally:
        sub.close()
        pub.close()


def test_a_publisher_restart_forgets_what_the_old_process_held() -> None:
    live, replay = endpoints()
    # A server that has been running a while (its counter at 1,000): a restart counts from 0, below what was seen.
    # (A restarted publisher that has sent more than the old one by the time the subscriber reconnects looks like
    # a gap instead: the sequence number is all vLLM's protocol offers.)
    pub = Publisher(live, replay, topic="kv-events", first_seq=1000)
    sub = Subscriber(live, replay, topic="kv-events")
    try:
        connect(pub, sub)
        start = pub.next_seq
        for i in range(3):
            pub.publish([stored([300 + i])])
        drain(pub, sub, start + 2)
        assert len(sub.feed.state.media["GPU"].blocks) == 3
    finally:
        pub.close()
    # A new server process on the same endpoints counts from 0 again and holds nothing yet. ZMQ releases a closed
    # socket's port in its I/O thread, a moment after close() returns: bind again until the port is free.
    deadline = time.monotonic() + 10
    while True:
        try:
            pub = Publisher(live, replay, topic="kv-events")
            break
        except zmq.ZMQError:
            assert time.monotonic() < deadline, "the old publisher's port was never released"
            time.sleep(0.05)
    try:
        deadline = time.monotonic() + 10
        while sub.feed.restarts == 0:
            assert time.monotonic() < deadline
            pub.publish([stored([400])])
            sub.poll(50)
        assert sub.feed.restarts == 1 and sub.feed.gaps == 0
        assert set(sub.feed.state.media["GPU"].blocks) == {400}
    finally:
        sub.close()
        pub.close()


def test_malformed_payloads_on_the_wire_are_skipped_and_the_rest_applied(pubsub: tuple[Publisher, Subscriber]) -> None:
    pub, sub = pubsub
    start = pub.next_seq
    pub.publish([stored([1])])
    pub.publish_payload(b"\x93\xa3abc")  # msgpack, but an array of one string: no batch
    pub.publish_payload(msgspec.msgpack.encode([1.0, [{"type": "Nope"}, {"type": "BlockStored"}]]))
    pub.publish([stored([2])])
    drain(pub, sub, start + 3)
    assert sorted(sub.feed.state.media["GPU"].blocks) == [1, 2]
    assert sub.feed.malformed == 1 and sub.feed.skipped_events == 2 and sub.feed.gaps == 0
