"""The emulator publishes its engine's GPU and CPU tiers as vLLM's KV events: a subscriber rebuilds them block for
block (the seed lab, a random workload), and vLLM's own structs, read from a vllm wheel, decode the stream."""

from __future__ import annotations

import ast
import asyncio
import os
import random
import sys
import time
import types
import zipfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from live_servers import free_port

from app.emulator.backend import Backend
from app.emulator.config import EmulatorConfig
from app.emulator.kv_events import attach
from sim.kvevents import wire
from sim.kvevents.subscriber import Subscriber
from sim.workloads.presets import preset_fields
from sim.workloads.requests import pass_orders
from sim.workloads.scenario import Scenario

TOPIC = "kv-events"


class Rig:
    """An emulator backend publishing on loopback, and a subscriber to it that has joined."""

    def __init__(self, config: EmulatorConfig) -> None:
        live, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
        self.backend = Backend(config)
        self.bridge = attach(self.backend, live, replay, TOPIC)
        self.sub = Subscriber(live, replay, topic=TOPIC)
        deadline = time.monotonic() + 10
        while self.sub.received == 0:  # PUB drops until the SUB has joined: probe with empty batches
            assert time.monotonic() < deadline
            self.bridge.publisher.publish([])
            self.sub.poll(50)

    def serve(self, prompts: list[list[int]], together: bool = False) -> None:
        """Each prompt for one token: one after the other, or all arriving at once (batched into shared steps)."""
        async def one(tokens: list[int]) -> None:
            inbox: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
            ticket = self.backend.submit(tokens, 1, time.perf_counter(), inbox, 0)
            assert await inbox.get() == (0, 0)
            self.backend.finish(ticket, 1)

        async def run() -> None:
            if together:
                await asyncio.gather(*(one(tokens) for tokens in prompts))
            else:
                for tokens in prompts:
                    await one(tokens)
        asyncio.run(run())
        self.bridge.publisher.flush()
        deadline = time.monotonic() + 20
        while self.sub.feed.last_seq is None or self.sub.feed.last_seq < self.bridge.publisher.next_seq - 1:
            assert time.monotonic() < deadline
            self.sub.poll(50)

    def assert_agree(self) -> None:
        """The subscriber's per-medium state is the engine's, block for block."""
        engine = self.backend.engine
        gpu = engine.gpu
        # The engine's GPU: every cached hash with the number of blocks holding it (copies recomputed by vLLM's
        # last-block rule are extra blocks with the same hash).
        engine_gpu = {key: 1 + len(gpu._copies.get(key, ())) for key in gpu.cached}
        media = self.sub.feed.state.media
        assert media["GPU"].refs() == engine_gpu
        assert media["GPU"].tokens == len(engine_gpu) * gpu.block_size
        if engine.cpu is not None:
            # The engine's CPU tier holds chunks; the events name each chunk's blocks, so the subscriber holds
            # chunks x blocks per chunk distinct block hashes, and the chunks' tokens.
            per = engine.units.chunk // engine.units.block
            assert len(media["CPU"].blocks) == len(engine.cpu.chunks) * per
            assert media["CPU"].tokens == engine.cpu.used_tokens
            # A chunk's key is the key of its last block (sim.blocks.prompt_keys): each must be resident.
            assert set(engine.cpu.chunks) <= set(media["CPU"].blocks)
        assert self.sub.feed.problem_count == 0 and self.sub.feed.lost == 0

    def close(self) -> None:
        self.sub.close()
        self.bridge.close()


def seed_lab_prompts() -> tuple[EmulatorConfig, list[list[int]]]:
    scenario = Scenario(**preset_fields("seed-lab"))
    rng = random.Random(7)
    docs = [[rng.randrange(151_936) for _ in range(scenario.doc_tokens)] for _ in range(scenario.docs)]
    prompts = []
    for p, order in enumerate(pass_orders(scenario)):
        for d in order:
            question = [rng.randrange(151_936) for _ in range(scenario.question_tokens)]
            prompts.append(docs[d] + question)
    config = EmulatorConfig(gpu_tokens=scenario.gpu_tokens, cpu_gb=scenario.cpu_gb, model=scenario.model, speed=1000)
    return config, prompts


def test_seed_lab_events_rebuild_the_engine_block_for_block() -> None:
    config, prompts = seed_lab_prompts()
    rig = Rig(config)
    try:
        rig.serve(prompts[:10])
        rig.assert_agree()
        # After pass 1 the GPU holds what fits of the last documents: 1,344 usable blocks, all hashed or free.
        assert len(rig.sub.feed.state.media["GPU"].blocks) <= 1344
        removed_after_pass_1 = rig.sub.feed.state.media["GPU"].removed
        assert removed_after_pass_1 > 0  # ten 5,024-token prompts (3,140 blocks) overflow 1,344: evictions
        rig.serve(prompts[10:])
        rig.assert_agree()
        # Every prompt's blocks were announced: 3 passes x 10 prompts x (5,024 // 16 = 314 full blocks), minus the
        # GPU hits, which vLLM does not announce again.
        gpu_hit_blocks = sum(r.gpu_hit_tokens for r in rig.backend.records) // 16
        assert rig.sub.feed.state.media["GPU"].stored == 30 * 314 - gpu_hit_blocks
    finally:
        rig.close()


def test_random_workload_with_shared_prefixes_and_copies_agrees() -> None:
    # Small tiers and prompts that share prefixes, some fully cached (their last block is recomputed into a copy).
    config = EmulatorConfig(gpu_tokens=64 * 16, cpu_gb=0.002, block_size=16, chunk_size=64, speed=1000)
    rng = random.Random(11)
    stems = [[rng.randrange(1000) for _ in range(rng.choice((32, 80, 160)))] for _ in range(6)]
    prompts = []
    for _ in range(120):
        stem = rng.choice(stems)
        tail = [] if rng.random() < 0.3 else [rng.randrange(1000) for _ in range(rng.randrange(1, 90))]
        prompts.append(stem + tail)
    rig = Rig(config)
    try:
        for i in range(0, len(prompts), 20):
            rig.serve(prompts[i : i + 20])
            rig.assert_agree()
        gpu = rig.sub.feed.state.media["GPU"]
        assert gpu.removed > 0 and rig.sub.feed.state.media["CPU"].removed > 0  # both tiers evicted on the way
        assert any(n > 1 for n in gpu.refs().values()) or gpu.removed > 0
    finally:
        rig.close()


def test_prompts_batched_into_shared_chunked_steps_still_agree() -> None:
    # The same kind of workload, twenty prompts at a time arriving together, under a 96-token step budget: the
    # engine admits several per step and splits prompts of up to 250 tokens into chunks of the budget left, so a
    # request caches its blocks over several steps and other requests' allocations evict between its chunks. One
    # batch per step: the subscriber must still rebuild both tiers block for block after every group.
    config = EmulatorConfig(
        gpu_tokens=64 * 16, cpu_gb=0.002, block_size=16, chunk_size=64, speed=1000, max_num_batched_tokens=96,
        max_num_seqs=4,
    )
    rng = random.Random(5)
    stems = [[rng.randrange(1000) for _ in range(rng.choice((32, 80, 160)))] for _ in range(5)]
    prompts = [rng.choice(stems) + [rng.randrange(1000) for _ in range(rng.randrange(1, 90))] for _ in range(80)]
    rig = Rig(config)
    try:
        for i in range(0, len(prompts), 20):
            rig.serve(prompts[i : i + 20], together=True)
            rig.assert_agree()
        steps = list(rig.backend.steps)
        assert any(len(out.scheduled) > 1 for *_, out in steps)  # requests shared steps
        assert any(0 < n < 96 for *_, out in steps for n in out.scheduled.values() if len(out.scheduled) > 1)
        assert rig.sub.feed.state.media["GPU"].removed > 0
    finally:
        rig.close()


def test_events_carry_real_parents_and_token_ids() -> None:
    config = EmulatorConfig(gpu_tokens=64 * 16, cpu_gb=None, speed=1000)
    rig = Rig(config)
    try:
        first = list(range(40))  # 2 full blocks + 8 tokens
        rig.serve([first, first + list(range(100, 124))])  # 64 tokens: the 2 blocks hit, 2 new ones
        seen: list[wire.BlockStored] = []
        rig.sub.feed.listeners.append(lambda seq, batch: seen.extend(batch.events))
        rig.serve([list(range(500, 532))])
        request_keys = rig.backend.engine.gpu.cached
        (event,) = seen
        assert event.parent_block_hash is None and event.token_ids == list(range(500, 532))
        assert all(h in request_keys for h in event.block_hashes) and event.medium == "GPU" and event.group_idx == 0
        second = [b for b in rig.sub.feed.state.media["GPU"].blocks.values() if b.parent is not None]
        # Prompt 2 stored its blocks 3 and 4 on top of block 2 of prompt 1; prompt 3's second block on its first.
        assert len(second) == 1 + 2 + 1
    finally:
        rig.close()


# -- vLLM's own structs ----------------------------------------------------------------------------------------

WHEEL_ENV = "KVSCOPE_VLLM_WHEEL"
STRUCTS = ("EventBatch", "KVCacheEvent", "BlockStored", "BlockRemoved", "AllBlocksCleared", "KVEventBatch")


def vllm_structs() -> dict[str, Any]:
    """The event classes of vllm/distributed/kv_events.py, read from the wheel at ``$KVSCOPE_VLLM_WHEEL`` (never
    downloaded): their class statements are executed alone, as importing vllm needs torch."""
    path = os.environ.get(WHEEL_ENV)
    if not path:
        pytest.skip(f"set {WHEEL_ENV} to a vllm wheel (pip download vllm --no-deps) to decode with vLLM's own structs")
    if not Path(path).is_file():
        pytest.skip(f"{WHEEL_ENV}={path} is not a file")
    with zipfile.ZipFile(path) as wheel:
        source = wheel.read("vllm/distributed/kv_events.py").decode()
    tree = ast.parse(source)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in STRUCTS]
    assert [c.name for c in classes] == list(STRUCTS), "vLLM's kv_events.py no longer defines these structs"
    # msgspec resolves annotations in the classes' module, so they get one of their own.
    module = types.ModuleType("vllm_kv_events_from_wheel")
    module.__dict__.update({"msgspec": msgspec, "Any": Any, "ExternalBlockHash": bytes | int})
    sys.modules[module.__name__] = module
    exec(compile(ast.Module(body=classes, type_ignores=[]), path, "exec"), module.__dict__)
    return module.__dict__


def test_vllms_own_structs_decode_the_emulators_stream() -> None:
    structs = vllm_structs()
    config = EmulatorConfig(gpu_tokens=32 * 16, cpu_gb=0.002, chunk_size=64, speed=1000)
    rig = Rig(config)
    payloads: list[bytes] = []
    original = rig.bridge.publisher.publish

    def keep(events: list[wire.KvEvent], ts: float | None = None) -> None:
        payloads.append(wire.encode(events, ts or 0.0))
        original(events, ts)

    rig.bridge.publisher.publish = keep  # type: ignore[method-assign]
    try:
        rng = random.Random(3)
        rig.serve([[rng.randrange(500) for _ in range(rng.randrange(20, 300))] for _ in range(40)])
    finally:
        rig.close()
    decoder = msgspec.msgpack.Decoder(structs["KVEventBatch"])
    kinds = set()
    for payload in payloads:
        batch = decoder.decode(payload)  # raises if any field disagrees with vLLM's definition
        ours = wire.decode(payload)
        assert len(batch.events) == len(ours.events)
        for theirs, mine in zip(batch.events, ours.events):
            kinds.add((type(theirs).__name__, getattr(theirs, "medium", None)))
            assert msgspec.to_builtins(theirs) == msgspec.to_builtins(mine)
    assert kinds == {("BlockStored", "GPU"), ("BlockRemoved", "GPU"), ("BlockStored", "CPU"), ("BlockRemoved", "CPU")}


def test_batches_lost_on_the_way_are_filled_by_replay_and_the_state_still_agrees() -> None:
    config = EmulatorConfig(gpu_tokens=48 * 16, cpu_gb=0.002, chunk_size=64, speed=1000)
    rig = Rig(config)
    try:
        first = rig.bridge.publisher.next_seq
        # The 2nd and 4th prefills' batches never reach the subscriber live; the replay endpoint still has them.
        rig.bridge.publisher.drop = {first + 1, first + 3}
        rng = random.Random(9)
        rig.serve([[rng.randrange(300) for _ in range(rng.randrange(40, 200))] for _ in range(12)])
        assert (rig.sub.feed.gaps, rig.sub.feed.filled) == (2, 2)
        rig.assert_agree()
    finally:
        rig.close()


def test_the_scheduler_gauges_are_each_steps_own() -> None:
    # vLLM makes the scheduler's stats after each step (update_from_output -> make_stats): running and waiting as
    # the step left them, and kv_cache_usage_perc = 1 - free / usable blocks. Four 200-token prompts for 2 tokens
    # on a 64-block pool (63 usable) under a 256-token budget with at most 2 running: each needs
    # ceil(201 / 16) = 13 blocks. /metrics rendered at each step's end must show that step's figures.
    from app.emulator import prometheus
    from app.live import prom

    config = EmulatorConfig(gpu_tokens=64 * 16, cpu_gb=None, speed=1000, max_num_batched_tokens=256, max_num_seqs=2)
    backend = Backend(config)
    shown: list[tuple[float, float, float]] = []
    deliver = backend._deliver

    def watch(out: Any, end: float) -> None:
        deliver(out, end)
        samples = prom.parse(prometheus.render(backend))
        shown.append(tuple(prom.total(samples, (name,)) for name in (
            "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        )))

    backend._deliver = watch  # type: ignore[method-assign]

    async def run() -> None:
        inbox: asyncio.Queue[tuple[int, int]] = asyncio.Queue()
        now = time.perf_counter()
        for k in range(4):
            backend.submit(list(range(k * 1000, k * 1000 + 200)), 2, now, inbox, k)
        for _ in range(8):
            await inbox.get()

    asyncio.run(run())
    steps = [out for *_, out in backend.steps]
    assert shown == [(s.running, s.waiting, pytest.approx(1 - s.free_blocks / 63)) for s in steps]
    # And the run as reasoned: step 1 admits requests 0 (200 tokens) and 1 (the 56 left of the budget); the
    # sequence limit keeps 2 and 3 waiting until 0 and 1 finish.
    assert steps[0].scheduled == {0: 200, 1: 56} and (steps[0].running, steps[0].waiting) == (2, 2)
    assert max(s.running for s in steps) == 2 and steps[-1].running == 0
