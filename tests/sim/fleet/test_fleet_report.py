"""A fleet run's figures on a workload small enough to follow by hand: routes, lost tokens, bounds, usage."""

from __future__ import annotations

from sim.costs.model import default_costs
from sim.fleet.clock import Fleet, FleetRun
from sim.fleet.replicas import replica_engines, stepped_replicas
from sim.fleet.report import bounds, imbalance, pooled_spec, replica_rows, route_fields
from sim.fleet.routers import router
from sim.sched.step_costs import StepCosts
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario

# Three 64-token documents (4 blocks of 16, no question), each read twice in order; a GPU of 50 blocks (49 usable)
# holds them all, and no CPU tier. A re-read can hit (64 - 1) // 16 = 3 blocks, 48 tokens (vLLM recomputes the
# last token).
SCENARIO = Scenario(docs=3, doc_tokens=64, question_tokens=0, gpu_tokens=50 * 16, cpu_gb=None,
                    passes=[PassSpec(), PassSpec()])


def run(name: str, replicas: int = 2) -> FleetRun:
    spec = tier_spec(SCENARIO, "gpu")
    engines = replica_engines("gpu", spec, replicas, default_costs())
    return Fleet(stepped_replicas(engines, costs=StepCosts.clock()), router(name)).run(build_requests(SCENARIO))


def test_round_robin_loses_every_re_read_to_the_replica_that_read_it_first() -> None:
    fleet = run("round-robin")
    # Round-robin over 2: seqs 0..5 (docs 0, 1, 2, 0, 1, 2) go to replicas 0, 1, 0, 1, 0, 1. Each document's second
    # read lands on the other replica: doc 0 read on 0 then 1, doc 1 on 1 then 0, doc 2 on 0 then 1.
    fields = [route_fields(r, 3, 16) for r in fleet.routes]
    assert [f["replica"] for f in fields] == [0, 1, 0, 1, 0, 1]
    # The first reads: nobody held anything, so the chosen replica is the best (a tie keeps the choice), 0 lost.
    assert [(f["best_replica"], f["lost_tokens"]) for f in fields[:3]] == [(0, 0), (1, 0), (0, 0)]
    # The re-reads: the other replica held all 4 blocks, 3 of them hittable: 48 tokens lost each.
    assert [(f["best_replica"], f["held_tokens"], f["best_held_tokens"], f["lost_tokens"]) for f in fields[3:]] == [
        (0, 0, 48, 48), (1, 0, 48, 48), (0, 0, 48, 48)
    ]
    assert sum(r.gpu_hit_tokens for r in fleet.records) == 0


def test_affinity_hits_every_re_read_and_the_replica_rows_add_up() -> None:
    fleet = run("affinity")
    fields = [route_fields(r, 3, 16) for r in fleet.routes]
    # A document's head hashes to one replica: the re-read meets its blocks there, 48 tokens each, nothing lost.
    assert [f["replica"] for f in fields[3:]] == [f["replica"] for f in fields[:3]]
    assert [r.gpu_hit_tokens for r in fleet.records] == [0, 0, 0, 48, 48, 48]
    assert sum(f["lost_tokens"] for f in fields) == 0
    rows = replica_rows(fleet, 49)
    assert sum(r["requests"] for r in rows) == 6 and sum(r["hit_tokens"] for r in rows) == 144
    for row in rows:
        mine = sum(1 for f in fields if f["replica"] == row["replica"])
        # On the 1 ms clock each request is one step (one output token) of 1 ms, alone (a closed loop of 1).
        assert (row["requests"], row["steps"], row["busy_ms"], row["prompt_tokens"]) == (mine, mine, mine, 64 * mine)
        # Each step's batch holds the request's 4 blocks (a re-read: its 3 hit blocks and 1 new) of 49 usable.
        if mine:
            assert row["kv_usage_mean"] == row["kv_usage_peak"] == round(4 / 49, 6)


def test_the_bounds_pool_the_tiers_and_never_evict() -> None:
    spec = tier_spec(SCENARIO, "gpu")
    # Two replicas of 49 usable blocks pool to 98 and one null block: 99 blocks of 16 tokens.
    assert pooled_spec(spec, 2, None).gpu_tokens == 99 * 16
    # Both bounds hit each re-read's 48 tokens: 144 of 6 x 64 = 384 prompt tokens, 0.375.
    assert bounds(build_requests(SCENARIO), spec, 2, None, default_costs()) == {"pooled": 0.375, "unbounded": 0.375}
    # A GPU of 5 blocks (4 usable) holds one document: the pooled bound of 1 replica then hits nothing (each
    # document is evicted by the next, in order), while an unbounded cache still hits 0.375.
    small = tier_spec(SCENARIO.replace(gpu_tokens=5 * 16), "gpu")
    assert bounds(build_requests(SCENARIO), small, 1, None, default_costs()) == {"pooled": 0.0, "unbounded": 0.375}


def test_imbalance_is_the_busiest_over_the_mean() -> None:
    assert imbalance([3, 3]) == 1.0
    assert imbalance([6, 0]) == 2.0  # one replica of two has it all
    assert imbalance([0, 0]) == 1.0


def test_the_unbounded_bound_counts_what_an_offload_tier_may_load_beyond_the_gpu_blocks() -> None:
    # One 512-token document read twice. A GPU that never evicts hits (512 - 1) // 16 = 31 blocks, 496 tokens, of
    # the re-read; an offload tier holding both 256-token chunks loads all but the last token, 511 (vLLM recomputes
    # only that token). Of the 1,024 prompt tokens: 496 / 1024 = 0.484375 without a CPU tier, 511 / 1024 with one.
    s = Scenario(docs=1, doc_tokens=512, question_tokens=0, gpu_tokens=100 * 16, cpu_tokens=1024,
                 passes=[PassSpec(), PassSpec()])
    requests = build_requests(s)
    assert bounds(requests, tier_spec(s, "gpu"), 2, None, default_costs())["unbounded"] == 0.484375
    assert bounds(requests, tier_spec(s, "gpu+cpu"), 2, None, default_costs())["unbounded"] == round(511 / 1024, 6)
