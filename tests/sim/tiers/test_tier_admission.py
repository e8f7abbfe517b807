"""A tier's admission rule: a tier behind the CPU stores a chunk on its Nth offer (vLLM's store_threshold, as a what-if)."""

from __future__ import annotations

from sim.engine.loop import Engine
from sim.simulation.run import tier_spec
from sim.tiers.admission import OfferCounts
from sim.tiers.offload import OffloadTier
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario, StorageTier

CHUNKS = 19 * 256  # a seed prompt's full 256-token chunks: 4,864 tokens


def _remote_stores(scenario: Scenario) -> list[int]:
    engine = Engine("gpu+cpu+remote", tier_spec(scenario, "gpu+cpu+remote"))
    out = []
    for req in build_requests(scenario):
        _, events = engine.process(req)
        out.append(sum(e.tokens for e in events if e.kind == "store" and e.tier == "remote"))
    return out


def test_a_tier_behind_the_cpu_stores_a_chunk_on_its_second_offer() -> None:
    # Two seed documents, a 5,000-token CPU (19 chunks: one document) and a large remote tier. Under LMCache's
    # rules each store allocates the prompt's 19 chunks in the CPU and hands them on to the tier behind
    # (storage_manager.py 411-431). Pass 1: each document's 19 chunks are offered to remote once: with
    # admission 2 nothing is stored. Pass 2: the CPU holds the other document only, so LMCache's own hit is 0
    # and all 19 chunks are stored again (rule 1, tests/sim/tiers/test_lmcache_rules.py): the second offer, stored.
    base = Scenario(docs=2, cpu_gb=None, cpu_tokens=5000, passes="forward,forward", storage_tiers="remote:100000t")
    assert _remote_stores(base) == [CHUNKS, CHUNKS, 0, 0]
    gated = base.replace(storage_tiers="remote:100000t:lru:admission=2")
    assert _remote_stores(gated) == [0, 0, CHUNKS, CHUNKS]


def test_admission_and_unit_are_fields_of_the_tier_and_its_text() -> None:
    tier = StorageTier.parse("remote:8:fifo:0.01:admission=3")
    assert (tier.admission, tier.unit_tokens, tier.text) == (3, None, "remote:8:fifo:0.01:admission=3")
    assert StorageTier.parse(tier.text) == tier
    spec = tier_spec(Scenario(storage_tiers=[tier], disk_gb=None), "gpu+cpu+remote").offload_tiers()
    assert [(t.name, t.admission, t.unit_tokens) for t in spec] == [("cpu", 1, None), ("remote", 3, None)]
    assert isinstance(spec[1], OffloadTier)


def test_offer_counts_forget_the_least_recent_key_not_in_the_offer() -> None:
    # manager.py 129-148 with a table of 3: keys 1 2 3 offered once; then (3, 4): 3 counts 2 and moves to the
    # recent end; 4 is new, the table is full, so the least recent key the offer did not name (1) goes.
    counts = OfferCounts(size=3)
    counts.offer([1, 2, 3])
    counts.offer([3, 4])
    assert [counts.get(k) for k in (1, 2, 3, 4)] == [0, 1, 2, 1]
