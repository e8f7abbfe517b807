"""Property tests over random workloads and capacities: the engine's invariants, and a naive reference model."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.engine.loop import Engine
from sim.simulation.run import engines, stream, tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    block = draw(st.sampled_from([4, 8, 16]))
    chunk = block * draw(st.integers(1, 4))
    docs = draw(st.integers(1, 6))
    doc_tokens = draw(st.integers(1, 120))
    question = draw(st.integers(0, 20))
    shared = draw(st.sampled_from([0, 0, block * 2, 7]))
    prompt = shared + doc_tokens + question
    least = (-(-prompt // block) + 1) * block
    gpu_tokens = draw(st.integers(least, least * (docs + 1)))
    orders = st.one_of(
        st.sampled_from(["forward", "reverse"]).map(lambda o: PassSpec(order=o)),
        st.integers(0, 99).map(lambda s: PassSpec(order="random", seed=s)),
        st.integers(0, 99).map(lambda s: PassSpec(order="zipf", seed=s)),
    )
    passes = draw(st.lists(orders, min_size=1, max_size=4))
    unfull = draw(st.booleans())
    least_tier = 1 if unfull else chunk  # what a tier must hold: the least it stores, a partial chunk or a whole one
    cpu_tokens = draw(st.integers(least_tier, max(least_tier, prompt * (docs + 1))))
    disk = draw(st.one_of(st.none(), st.integers(least_tier, max(least_tier, prompt * (docs + 2)))))
    return Scenario(
        docs=docs, doc_tokens=doc_tokens, question_tokens=question, shared_prefix_tokens=shared,
        gpu_tokens=gpu_tokens, cpu_gb=None, cpu_tokens=cpu_tokens, disk_tokens=disk, block_size=block,
        chunk_size=chunk, passes=passes, granularity=draw(st.sampled_from(["block", "block", "doc"])),
        free_order=draw(st.sampled_from(["vllm", "vllm-legacy"])),
        save_unfull_chunk=unfull,
    )


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenarios())
def test_tokens_add_up_and_no_tier_exceeds_capacity(scenario: Scenario) -> None:
    for event in stream(scenario):
        if event.kind == "occupancy":
            assert event.used_tokens <= event.capacity_tokens
            assert sum(event.docs.values()) == event.used_tokens
        if event.kind == "ttft":
            total = event.gpu_hit_tokens + event.cpu_hit_tokens + event.disk_hit_tokens + event.computed_tokens
            assert total == scenario.prompt_tokens
            # vLLM recomputes the last token, whatever is cached.
            assert event.computed_tokens >= 1


@SETTINGS
@given(scenarios())
def test_replaying_store_and_evict_events_reproduces_every_tier(scenario: Scenario) -> None:
    held: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for event in stream(scenario):
        if event.kind == "store":
            held[(event.run, event.tier)][event.doc] += event.tokens
        elif event.kind == "evict":
            held[(event.run, event.tier)][event.doc] -= event.tokens
        elif event.kind == "occupancy":
            replayed = {str(d): t for d, t in held[(event.run, event.tier)].items() if t}
            assert replayed == event.docs


class NaivePool:
    """vLLM's pool written the slow, obvious way: a list for the free queue, sets of copies per hash."""

    def __init__(self, usable: int, legacy: bool) -> None:
        self.free = list(range(usable))
        self.hash_of: dict[int, int] = {}
        self.holders: dict[int, set[int]] = defaultdict(set)
        self.legacy = legacy

    def serve(self, keys: list[int], max_hit: int, alloc: int) -> int:
        hit: list[int] = []
        for key in keys[:max_hit]:
            free_holders = [b for b in self.holders.get(key, ()) if b in self.free]
            if not free_holders:
                break
            hit.append(free_holders[0])
            self.free.remove(free_holders[0])
        new = [self.free.pop(0) for _ in range(alloc - len(hit))]
        for b in new:
            old = self.hash_of.pop(b, None)
            if old is not None:
                self.holders[old].discard(b)
                if not self.holders[old]:
                    del self.holders[old]
        blocks = hit + new
        for i in range(len(hit), len(keys)):
            self.hash_of[blocks[i]] = keys[i]
            self.holders[keys[i]].add(blocks[i])
        ordered = blocks[::-1]
        if self.legacy:
            self.free += ordered
        else:
            self.free = [b for b in ordered if b not in self.hash_of][::-1] + self.free
            self.free += [b for b in ordered if b in self.hash_of]
        return len(hit)


@SETTINGS
@given(scenarios())
def test_gpu_hits_equal_a_naive_reference_pool(scenario: Scenario) -> None:
    requests = build_requests(scenario)
    engine = Engine("gpu", tier_spec(scenario, "gpu"))
    spec = engine.spec
    usable = engine.gpu.capacity_blocks
    naive = NaivePool(usable, scenario.free_order == "vllm-legacy")
    for req in requests:
        record, _ = engine.process(req, emit=False)
        expected = naive.serve(req.block_keys, req.max_hit_blocks, req.alloc_blocks)
        assert record.gpu_hit_tokens == expected * spec.units.block, req.seq


@SETTINGS
@given(scenarios())
def test_hits_are_prefixes_and_cpu_hits_follow_the_gpu_hit(scenario: Scenario) -> None:
    for engine in engines(scenario):
        for record in engine.run_all(build_requests(scenario)):
            block = engine.units.block
            assert record.gpu_hit_tokens % block == 0
            if record.cpu_hit_tokens or record.disk_hit_tokens:
                # An offload hit starts where the GPU hit ends and ends on a chunk
                # boundary (or one token short of the prompt).
                end = record.gpu_hit_tokens + record.cpu_hit_tokens + record.disk_hit_tokens
                assert end % engine.units.chunk == 0 or end == record.prompt_tokens - 1 or (
                    scenario.save_unfull_chunk and end == record.prompt_tokens - 1
                )
