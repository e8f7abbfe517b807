"""Explaining misses (sim.explain): the seed's facts, the precedence of causes, exact sums, and a naive reference.

Seed-lab layout used below (as in test_seed.py): a prompt is a 5,011-token
document + a 13-token question = 5,024 tokens = 314 full 16-token blocks, of
which at most 313 (5,008 tokens) can hit (vLLM recomputes the last token; the
314th block is the "last-token" block, 16 tokens). The GPU holds 1,344 usable
blocks; a prompt has 19 full 256-token chunks (4,864 tokens) + a 160-token
partial chunk.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings

from sim.blocks.request import Request, Units
from sim.calibration.calibrate import seed_scenario
from sim.engine.loop import Engine, RequestRecord, TierSpec
from sim.explain import attach
from sim.explain.capacity import fill_needs, resized
from sim.explain.causes import PRECEDENCE
from sim.explain.observer import key_slots
from sim.explain.summary import needs, totals
from sim.simulation.replay import ReplayTiers, replay, replay_engine, trace_requests
from sim.simulation.run import engines, simulate
from sim.traces.reader import open_trace
from sim.workloads.presets import PRESETS, preset_fields
from sim.workloads.requests import WorkloadBuilder, build_requests
from sim.workloads.scenario import Scenario
from tests.sim.engine.test_properties import scenarios

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _requests(result: dict, run: str, pass_: int | None = None) -> list[dict]:
    rows = next(r for r in result["runs"] if r["name"] == run)["requests"]
    return [r for r in rows if pass_ is None or r["pass"] == pass_]


# -- the seed's facts ------------------------------------------------------------


def test_gpu_run_pass_1_has_no_evicted_tokens() -> None:
    # Pass 1 reads ten different documents: every full block is new (first-seen,
    # 313 blocks = 5,008 tokens) and the 314th block holds the last token.
    pass1 = _requests(simulate(seed_scenario()), "gpu", 1)
    assert all(r["gpu_miss"] == {"last-token": 16, "first-seen": 5008} for r in pass1)
    assert all("evicted" not in r["computed"] for r in pass1)


def test_gpu_run_pass_2_every_request_has_exactly_5008_evicted_gpu_tokens() -> None:
    # Every document's 313 hittable blocks were cached in pass 1 and are gone when
    # pass 2 asks (cyclic scan under LRU), so all 5,008 tokens are "evicted".
    pass2 = _requests(simulate(seed_scenario()), "gpu", 2)
    assert all(r["gpu_miss"] == {"last-token": 16, "evicted": 5008} for r in pass2)
    assert all(r["computed"] == r["gpu_miss"] for r in pass2)  # a GPU-only run: the GPU's verdict


def test_doc_0_was_evicted_in_pass_1_by_the_requests_for_docs_4_and_5() -> None:
    # Pass 1: docs 0-3 take 4 x 314 = 1,256 of 1,344 blocks, leaving 88 free. Doc 4 needs
    # 314: 88 free ones, then 226 of doc 0's, tail first: its question block (a key pass 2
    # never asks for) and then blocks 312..88 (225 blocks = 3,600 tokens). Doc 5 then takes
    # doc 0's remaining 88 blocks 87..0 (1,408 tokens) before any of doc 1's.
    doc0 = _requests(simulate(seed_scenario()), "gpu", 2)[0]
    (entry,) = doc0["evicted_misses"]
    assert (entry["tier"], entry["tokens"], entry["start"], entry["end"]) == ("gpu", 5008, 0, 5008)
    assert entry["by"] == [{"seq": 4, "tokens": 3600}, {"seq": 5, "tokens": 1408}]


def _pass2_gpu_hits(gpu_tokens: int) -> list[int]:
    scenario = seed_scenario().replace(gpu_tokens=gpu_tokens, cpu_gb=None, cpu_tokens=None)
    (engine,) = [e for e in engines(scenario) if e.run == "gpu"]
    return [r.gpu_hit_tokens for r in engine.run_all(build_requests(scenario)) if r.pass_ == 2]


def test_pass_2_first_hit_at_45248_and_whole_document_at_50240_by_resimulation() -> None:
    scenario = seed_scenario()
    requests = build_requests(scenario)
    (engine,) = [e for e in engines(scenario, explain=True) if e.run == "gpu"]
    records = engine.run_all(requests)
    fill_needs(engine.spec, requests, records, engine.costs)
    pass2 = [r.evicted_misses[0] for r in records if r.pass_ == 2]
    assert {(e["first_hit_tokens"], e["needed_tokens"]) for e in pass2} == {(45_248, 50_240)}
    # Independently, with the engine at those sizes and one block below them. At 45,248
    # tokens (2,827 usable blocks) pass 1's 3,140 blocks overflow by 313: each document
    # loses all but its first block, which every pass-2 request then hits; one block less
    # and doc 0 loses that block too, and each miss evicts the next document's first block.
    assert _pass2_gpu_hits(45_248) == [16] * 10
    assert _pass2_gpu_hits(45_248 - 16) == [0] * 10
    # At 50,240 (3,139 usable) only doc 0's question block is evicted; each request then
    # hits all 313 blocks and evicts only the previous question block.
    assert _pass2_gpu_hits(50_240) == [5008] * 10
    assert all(h < 5008 for h in _pass2_gpu_hits(50_240 - 16))


def test_pass_2_hits_grow_one_block_per_16_tokens_between_the_thresholds() -> None:
    # The binary search assumes hits grow with capacity; check it where it matters.
    for blocks in (0, 1, 2, 150, 311, 312):
        assert _pass2_gpu_hits(45_248 + 16 * blocks) == [16 * (blocks + 1)] * 10


def test_gpu_cpu_pass_2_computes_only_the_partial_chunk() -> None:
    # The CPU tier (1.5 GB = 56,173 tokens = 219 chunks) holds all 190 full chunks of the
    # ten documents, so pass 2 loads 4,864 tokens and computes the last 160: the partial
    # chunk (3 document tokens past the 19th chunk... through the new question), never stored.
    result = simulate(seed_scenario())
    for r in _requests(result, "gpu+cpu", 2):
        assert r["computed"] == {"partial-chunk": 160}
        assert r["gpu_miss"] == {"last-token": 16, "evicted": 5008}  # the GPU alone fares as in the gpu run


def test_pass_summaries_carry_totals_by_cause_and_the_infinite_cache_bound() -> None:
    run = next(r for r in simulate(seed_scenario())["runs"] if r["name"] == "gpu")
    pass2 = run["passes"][1]
    assert pass2["gpu_miss"] == {"last-token": 160, "evicted": 50_080}
    # An unbounded GPU would have served all 313 blocks of each of the ten documents.
    assert (pass2["served_tokens"], pass2["infinite_hit_tokens"]) == (0, 50_080)
    assert run["totals"]["computed"] == {"last-token": 480, "first-seen": 50_080, "evicted": 78_784}


def test_needs_summarise_the_capacities_per_tier() -> None:
    scenario = seed_scenario().replace(passes="forward,forward")
    requests = build_requests(scenario)
    (engine,) = [e for e in engines(scenario, explain=True) if e.run == "gpu"]
    records = engine.run_all(requests)
    fill_needs(engine.spec, requests, records, engine.costs)
    gpu = needs([r for r in records if r.pass_ == 2])["gpu"]
    assert gpu["needed_tokens"] == [{"tokens": 50_240, "requests": 10}]
    assert gpu["all_hit_tokens"] == 50_240


# -- precedence, on hand-made requests (4-token blocks) ---------------------------------


def _engine(usable_blocks: int) -> Engine:
    engine = Engine("gpu", TierSpec(Units(4, 4), gpu_tokens=4 * (usable_blocks + 1)))
    attach(engine)
    return engine


def _req(seq: int, keys: list[int], n: int) -> Request:
    return Request(seq, 1, "list", 0, n, keys, -(-n // 4), (n - 1) // 4, keys, 4)


def test_a_partial_block_is_never_cacheable() -> None:
    engine = _engine(8)
    engine.process(_req(0, [1, 2], 10))
    rec, _ = engine.process(_req(1, [1, 2], 10), emit=False)
    # 10 tokens: 2 full blocks (both hit: (10 - 1) // 4 = 2) and a 2-token partial block.
    assert (rec.gpu_hit_tokens, rec.gpu_miss) == (8, {"partial-block": 2})


def test_the_last_token_costs_a_whole_block_on_the_gpu() -> None:
    engine = _engine(8)
    first, _ = engine.process(_req(0, [1, 2], 8), emit=False)
    again, _ = engine.process(_req(1, [1, 2], 8), emit=False)
    # 8 tokens = 2 full blocks, but only (8 - 1) // 4 = 1 may hit: the second is "last-token",
    # whatever its history (structural causes come first).
    assert first.gpu_miss == {"last-token": 4, "first-seen": 4}
    assert (again.gpu_hit_tokens, again.gpu_miss) == (4, {"last-token": 4})


def test_held_blocks_after_a_miss_are_chain_broken() -> None:
    engine = _engine(8)
    engine.process(_req(0, [1, 2, 3], 13))
    rec, _ = engine.process(_req(1, [9, 2, 3], 13), emit=False)
    # Block 0 (key 9) is new, so the lookup stops; keys 2 and 3 are cached but unreachable.
    assert rec.gpu_miss == {"partial-block": 1, "first-seen": 4, "chain-broken": 8}
    assert list(rec.gpu_miss) == [c for c in PRECEDENCE if c in rec.gpu_miss]


def test_evicted_blocks_name_the_request_that_evicted_them() -> None:
    engine = _engine(4)
    engine.process(_req(0, [1, 2, 3], 12))
    # Free queue after r0 (tail first): [empty b4, key 3, key 2, key 1]. r1 needs 3 blocks:
    # b4, then keys 3 and 2 are evicted.
    engine.process(_req(1, [4, 5, 6], 12))
    rec, _ = engine.process(_req(2, [1, 2, 3], 12), emit=False)
    # Key 1 hits; key 2 was evicted by r1; key 3 is the last-token block.
    assert rec.gpu_miss == {"last-token": 4, "evicted": 4}
    assert rec.evicted_misses[0]["by"] == [{"seq": 1, "tokens": 4}]


def test_a_bounded_history_forgets_the_oldest_evictions_and_keeps_exact_sums() -> None:
    engine = Engine("gpu", TierSpec(Units(4, 4), gpu_tokens=4 * 4))
    attributor = attach(engine, remember=4)
    # 3 usable blocks; each request (9 tokens: two full blocks and a partial one) takes all three, so it evicts
    # the two keys of the request before it.
    for seq in range(6):
        engine.process(_req(seq, [10 * seq + 1, 10 * seq + 2], 9))
        assert len(attributor.gpu.gone) <= 4 + 2  # trimmed to at most 4 before each request adds its two
    # Before request 6 the history holds 6 keys evicted by requests 3, 4 and 5, so it keeps the later half (by
    # 4 and 5). Request 0's keys (evicted by request 1) are forgotten: first-seen again; request 4's keys
    # (evicted by request 5) are remembered.
    old, _ = engine.process(_req(6, [1, 2], 9), emit=False)
    assert old.gpu_miss == {"partial-block": 1, "first-seen": 8}
    engine2 = Engine("gpu", TierSpec(Units(4, 4), gpu_tokens=4 * 4))
    attach(engine2, remember=4)
    for seq in range(6):
        engine2.process(_req(seq, [10 * seq + 1, 10 * seq + 2], 9))
    recent, _ = engine2.process(_req(6, [41, 42], 9), emit=False)
    assert recent.gpu_miss == {"partial-block": 1, "evicted": 8}
    assert recent.evicted_misses[0]["by"] == [{"seq": 5, "tokens": 8}]


def test_attaching_after_the_first_request_is_refused() -> None:
    engine = Engine("gpu", TierSpec(Units(4, 4), gpu_tokens=40))
    engine.process(_req(0, [1], 4))
    with pytest.raises(ValueError, match="before the engine serves"):
        attach(engine)


# -- exact sums, and a naive reference --------------------------------------------------


def _check_sums(rec: dict, partial_chunk_anomaly: bool = False) -> None:
    assert sum(rec["gpu_miss"].values()) == rec["prompt_tokens"] - rec["gpu_hit_tokens"], rec
    assert sum(rec["computed"].values()) == rec["computed_tokens"], rec
    for name in ("gpu_miss", "computed"):
        assert set(rec[name]) <= set(PRECEDENCE) and all(v > 0 for v in rec[name].values())
    gpu = [e for e in rec["evicted_misses"] if e["tier"] == "gpu"]
    assert sum(e["tokens"] for e in gpu) == rec["gpu_miss"].get("evicted", 0)
    offload = [e for e in rec["evicted_misses"] if e["tier"] != "gpu"]
    if offload:
        assert sum(e["tokens"] for e in offload) == rec["computed"].get("evicted", 0)
    for e in rec["evicted_misses"]:
        assert sum(b["tokens"] for b in e["by"]) == e["tokens"]
        assert all(b["seq"] < rec["seq"] for b in e["by"])  # evicted before this request asked
    # An unbounded stack serves at least what this one did. Not always under LMCache's rules with unfull chunks
    # saved: LMCache saves nothing when its own hit covers every full chunk (vllm_v1_adapter.py 331-338), so
    # unbounded tiers never hold such a prompt's partial chunk, while a bounded tier that lost a full chunk
    # saves the partial one with it and can serve it later.
    if not partial_chunk_anomaly:
        assert rec["infinite_hit_tokens"] >= rec["prompt_tokens"] - rec["computed_tokens"]


@SETTINGS
@given(scenarios())
def test_maps_sum_exactly_for_random_scenarios(scenario: Scenario) -> None:
    anomaly = scenario.cpu_backend == "lmcache" and scenario.save_unfull_chunk
    for run in simulate(scenario)["runs"]:
        for rec in run["requests"]:
            _check_sums(rec, anomaly)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_maps_sum_exactly_for_every_preset(preset: str) -> None:
    for run in simulate(Scenario(**preset_fields(preset)))["runs"]:
        for rec in run["requests"]:
            _check_sums(rec)
        assert run["totals"]["computed"] == totals_of(run["requests"], "computed")


def totals_of(rows: list[dict], name: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for r in rows:
        for cause, tokens in r[name].items():
            out[cause] += tokens
    return {c: out[c] for c in PRECEDENCE if out.get(c)}


@pytest.mark.parametrize("cpu_blocks", [None, 8000])
def test_maps_sum_exactly_for_the_mooncake_sample_replay(cpu_blocks: int | None) -> None:
    result = replay(open_trace("mooncake-synthetic"), ReplayTiers(1000, cpu_blocks))
    for rec in result["requests"]:
        _check_sums(rec)
    assert result["totals"]["gpu_miss"] == totals_of(result["requests"], "gpu_miss")


class Reference:
    """The attribution the slow, obvious way: snapshots of each tier's keys before and after every request."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.ever: dict[str, set[int]] = defaultdict(set)
        self.evicted_by: dict[str, dict[int, int]] = defaultdict(dict)
        for store in (engine.cpu, engine.disk):
            if store is not None:
                store.put_many = self._recording(store)  # type: ignore[method-assign]

    def _recording(self, store: object) -> object:
        """A chunk can be stored and evicted by the same request's write-through: it did reach the tier."""
        original = store.put_many  # type: ignore[attr-defined]

        def put_many(items: list, evicted: list) -> dict:
            for key, chunk in items:
                if chunk[2] <= store.capacity_tokens:  # type: ignore[attr-defined]
                    self.ever[store.name].add(key)  # type: ignore[attr-defined]
            return original(items, evicted)

        return put_many

    def tiers(self) -> dict[str, set[int]]:
        out = {"gpu": set(self.engine.gpu.cached)}
        for store in (self.engine.cpu, self.engine.disk):
            if store is not None:
                out[store.name] = set(store.chunks)
        return out

    def serve(self, req: Request) -> tuple[dict[str, int], dict[str, int], dict[int, int]]:
        engine, block, chunk, n = self.engine, self.engine.units.block, self.engine.units.chunk, req.prompt_tokens
        before = self.tiers()
        ever = {name: set(keys) for name, keys in self.ever.items()}
        rec, _ = engine.process(req, emit=False)
        after = self.tiers()
        gpu = defaultdict(int)
        by: dict[int, int] = defaultdict(int)
        gpu["partial-block"] += n - len(req.block_keys) * block
        for i in range(rec.gpu_hit_tokens // block, len(req.block_keys)):
            key = req.block_keys[i]
            cause = ("last-token" if i >= req.max_hit_blocks else "chain-broken" if key in before["gpu"]
                     else "evicted" if key in ever.get("gpu", ()) else "first-seen")
            gpu[cause] += block
            if cause == "evicted":
                by[self.evicted_by["gpu"][key]] += block
        computed = gpu
        offload = [name for name in before if name != "gpu"]
        if offload:
            computed = defaultdict(int)
            keys = req.chunk_keys
            covered = (len(keys) - 1) * chunk + req.last_chunk_tokens if keys else 0
            for p in range(n - rec.computed_tokens, n):
                if p >= covered:
                    cause = "partial-chunk"
                elif p == n - 1:
                    cause = "last-token"
                else:
                    key = keys[p // chunk]
                    cause = ("chain-broken" if any(key in before[t] for t in offload)
                             else "evicted" if any(key in ever.get(t, ()) for t in offload) else "first-seen")
                computed[cause] += 1
        for name, keys_now in after.items():
            for key in before[name] - keys_now:
                self.evicted_by[name][key] = req.seq
            self.ever[name] |= keys_now
        return {c: t for c, t in gpu.items() if t}, {c: t for c, t in computed.items() if t}, dict(by)


@SETTINGS
@given(scenarios())
def test_attribution_equals_a_naive_reference(scenario: Scenario) -> None:
    requests = build_requests(scenario)
    for run in scenario.run_names:
        engine = engines(scenario)[scenario.run_names.index(run)]
        attach(engine)
        reference = Reference(engine)
        for req in requests:
            gpu, computed, by = reference.serve(req)
            rec = engine.records[-1]
            assert rec.gpu_miss == gpu, (run, req.seq)
            assert rec.computed == computed, (run, req.seq)
            entries = [e for e in rec.evicted_misses if e["tier"] == "gpu"]
            assert {b["seq"]: b["tokens"] for e in entries for b in e["by"]} == by, (run, req.seq)


def test_capacity_search_resizes_by_tier_name() -> None:
    spec = TierSpec(Units(16, 256), gpu_tokens=1600, cpu_tokens=2560)
    assert resized(spec, "gpu", 3200).gpu_tokens == 3200
    assert resized(spec, "cpu", 512).cpu_tokens == 512
    assert totals([]) == {}


def test_cpu_capacities_hit_and_one_token_less_does_not() -> None:
    # cpu-too-small: 0.9 GB = 33,703 tokens = 131 chunks for 190 chunks of documents, so pass 2 finds its
    # chunks evicted from CPU. Each answer is checked against the engine alone: at the capacity found the
    # request is served to the end of its evicted tokens, one token less and it is not.
    scenario = Scenario(**preset_fields("cpu-too-small"))
    requests = build_requests(scenario)
    (engine,) = [e for e in engines(scenario, explain=True) if e.run == "gpu+cpu"]
    records = engine.run_all(requests)
    fill_needs(engine.spec, requests, records, engine.costs)
    entries = [(r, e) for r in records for e in r.evicted_misses if e["tier"] == "cpu"]
    assert entries
    for rec, entry in entries[:4]:
        for key, end in (("first_hit_tokens", entry["first_end"]), ("needed_tokens", entry["end"])):
            capacity = entry[key]

            def served(tokens: int, rec: RequestRecord = rec) -> int:
                last = Engine("x", resized(engine.spec, "cpu", tokens)).run_all(requests[: rec.seq + 1])[-1]
                return last.prompt_tokens - last.computed_tokens

            assert served(capacity) >= end > served(capacity - 1), (rec.seq, key)


@SETTINGS
@given(scenarios())
def test_the_infinite_cache_bound_is_what_unbounded_tiers_serve(scenario: Scenario) -> None:
    # Tiers big enough never to evict anything (every block any request allocates; every chunk it stores) are
    # the unbounded tiers: the bound must be exactly what such a run serves, request by request.
    requests = build_requests(scenario)
    for engine in engines(scenario, explain=True):
        records = engine.run_all(requests)
        spec = engine.spec
        huge = resized(spec, "gpu", (sum(r.alloc_blocks for r in requests) + 1) * spec.units.block)
        for tier in ("cpu", "disk"):
            if getattr(spec, f"{tier}_tokens"):
                huge = resized(huge, tier, sum(len(r.chunk_keys) for r in requests) * spec.units.chunk)
        unbounded = Engine("unbounded", huge).run_all(requests)
        assert [r.infinite_hit_tokens for r in records] == [r.prompt_tokens - r.computed_tokens for r in unbounded]


def test_the_infinite_cache_bound_on_the_mooncake_sample() -> None:
    # As above, on the bundled trace with 2-block CPU chunks: tiers too big to evict serve exactly the bound.
    trace = open_trace("mooncake-synthetic")
    tiers = ReplayTiers(1000, 8000, 2)
    requests = trace_requests(trace, tiers.chunk_blocks)
    engine = replay_engine(trace, tiers)
    attach(engine)
    records = engine.run_all(requests)
    spec = engine.spec
    huge = resized(spec, "gpu", (sum(r.alloc_blocks for r in requests) + 1) * spec.units.block)
    huge = resized(huge, "cpu", sum(len(r.chunk_keys) for r in requests) * spec.units.chunk)
    unbounded = Engine("unbounded", huge).run_all(requests)
    assert [r.infinite_hit_tokens for r in records] == [r.prompt_tokens - r.computed_tokens for r in unbounded]


def test_a_history_indexed_by_key_gives_what_the_dict_gives() -> None:
    # The Mooncake sample through a GPU of 400 blocks and a CPU of 4,000 (both evict), plus requests whose keys
    # are negative (as generated blocks' keys are), which index the list from its end.
    trace = open_trace("mooncake-synthetic")
    requests = trace_requests(trace, 1)[:600]
    top = max(max(r.block_keys) for r in requests if r.block_keys)
    for i in range(40):  # 3 full blocks of 512 tokens and 5 more; keys down to -119
        keys = [-1 - 3 * i, -2 - 3 * i, top]
        requests.append(Request(len(requests), 1, "trace", -1, 3 * 512 + 5, keys, 4, 3, keys, 512))
    slots = key_slots(requests)
    assert slots is not None and slots >= top + 1 + 119  # every non-negative key, and the negative ones below
    assert key_slots([_req(0, [2**62, 5], 8)]) is None  # hashes keep the dict

    def run(slots: int | None) -> list[dict]:
        engine = Engine("gpu+cpu", TierSpec(Units(512, 512), gpu_tokens=512 * 401, cpu_tokens=512 * 4000,
                                            cpu_backend="brief"))
        attach(engine, slots=slots)
        return [r.to_dict() for r in engine.run_all(requests)]

    by_list, by_dict = run(slots), run(None)
    assert by_list == by_dict
    assert any("evicted" in r["gpu_miss"] for r in by_dict) and any("evicted" in r["computed"] for r in by_dict)


def test_generated_blocks_are_not_prompt_misses() -> None:
    # 40 generated tokens fill 2 more blocks per request (5,024 + 39 tokens of KV: 316 full blocks); they are
    # not the prompt's. The first request's 5,024 prompt tokens are 314 full blocks: 313 never seen, the last
    # one the last-token block (5,024 = 314 x 16, so the last token ends it).
    result = simulate(seed_scenario().replace(output_tokens=40))
    first = result["runs"][0]["requests"][0]
    assert first["gpu_miss"] == {"last-token": 16, "first-seen": 5008}
    for run in result["runs"]:
        for rec in run["requests"]:
            _check_sums(rec)


class _HashedKeys(WorkloadBuilder):
    """A scenario's requests with its keys left as the 63-bit hashes they are made from (no dense ids)."""

    def _dense(self, keys: list[int]) -> list[int]:
        return keys


def _scenario_by_list_and_by_dict(scenario: Scenario) -> None:
    dense, hashed = build_requests(scenario), _HashedKeys(scenario).requests()
    # The ids stand for the hashes one for one (equal ids iff equal hashes), block and chunk keys alike, and
    # are 0, 1, 2, ... with no gaps.
    to_id: dict[int, int] = {}
    for d, h in zip(dense, hashed, strict=True):
        for ids, keys in ((d.block_keys, h.block_keys), (d.chunk_keys, h.chunk_keys)):
            assert len(ids) == len(keys)
            for i, k in zip(ids, keys):
                assert to_id.setdefault(k, i) == i
    assert sorted(set(to_id.values())) == list(range(len(to_id)))
    if not to_id:
        return  # a prompt shorter than a block has no keys: nothing to remember
    assert key_slots(dense) is not None and key_slots(hashed) is None  # the list for ids, the dict for hashes
    for by_list, by_dict in zip(engines(scenario, True, dense), engines(scenario, True, hashed), strict=True):
        assert isinstance(by_list.gpu.eviction_log, list) and isinstance(by_dict.gpu.eviction_log, dict)
        assert [r.to_dict() for r in by_list.run_all(dense)] == [r.to_dict() for r in by_dict.run_all(hashed)]
        # The histories themselves: the list's slot of each id holds what the dict held for its hash.
        for a, b in zip((by_list.gpu, *by_list.offload), (by_dict.gpu, *by_dict.offload), strict=True):
            assert {to_id[k]: s for k, s in b.eviction_log.items()} == {
                i: s for i, s in enumerate(a.eviction_log) if s is not None
            }


@SETTINGS
@given(scenarios())
def test_a_scenarios_history_indexed_by_id_gives_what_the_dict_of_hashes_gave(scenario: Scenario) -> None:
    _scenario_by_list_and_by_dict(scenario)


def test_the_seed_labs_history_indexed_by_id_gives_what_the_dict_gave() -> None:
    # The seed lab evicts in every run (pass 2 finds its documents gone from the GPU); with decode's blocks and
    # the partial chunk saved, generated and partial-chunk keys get ids too.
    seed = seed_scenario()
    _scenario_by_list_and_by_dict(seed)
    _scenario_by_list_and_by_dict(seed.replace(output_tokens=40, save_unfull_chunk=True, docs=14))
