"""Golden fleets worked by hand: where the router decides whether the prefix cache works, where affinity's one
replica queues what a load-aware router spreads, and a shared tier serving a replica what another computed."""

from __future__ import annotations

import pytest

from sim.costs.model import default_costs
from sim.fleet.clock import Fleet, FleetRun
from sim.fleet.replicas import replica_engines, stepped_replicas
from sim.fleet.routers import router
from sim.fleet.settings import FleetSettings
from sim.sched.arrivals import ClosedLoop
from sim.sched.config import SchedulerConfig
from sim.sched.step_costs import StepCosts
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario

# Seven documents of 128 tokens (8 blocks of 16, no question), read in order twice, one at a time; each replica's
# GPU has 21 blocks, 20 usable, no CPU tier. A re-read can hit at most (128 - 1) // 16 = 7 blocks.
CYCLIC = Scenario(docs=7, doc_tokens=128, question_tokens=0, gpu_tokens=21 * 16, cpu_gb=None, passes=[PassSpec(), PassSpec()])


def fleet(scenario: Scenario, name: str, replicas: int, run: str = "gpu", **kw: object) -> FleetRun:
    engines = replica_engines(run, tier_spec(scenario, run), replicas, default_costs(), kw.pop("shared", None))  # type: ignore[arg-type]
    config = kw.pop("config", None)
    costs = kw.pop("costs", StepCosts.clock())
    arrivals = kw.pop("arrivals", ClosedLoop(1))
    return Fleet(stepped_replicas(engines, config, costs), router(name)).run(build_requests(scenario), arrivals)  # type: ignore[arg-type]


def second_pass_hits(run: FleetRun) -> list[int]:
    return [r.gpu_hit_tokens for r in run.records[7:]]


@pytest.mark.parametrize("replicas", [2, 3, 4, 5, 6])
def test_round_robin_never_hits_a_re_read(replicas: int) -> None:
    # Doc i is read first by request i, on replica i % N, and again by request 7 + i, on replica (7 + i) % N. 7 is
    # prime, so for N from 2 to 6 the re-read lands on a replica that never computed that document: no GPU hit.
    assert second_pass_hits(fleet(CYCLIC, "round-robin", replicas)) == [0] * 7


def test_affinity_starts_to_hit_at_two_replicas_because_vllm_frees_the_tail_first() -> None:
    # The ring sends each document's head (its whole prompt: 8 blocks < affinity's 256 tokens) to one replica;
    # for docs 0..6 it gives (the router's own consistent hash, checked here as the given of the case):
    assigned = {1: [0] * 7, 2: [0, 0, 0, 1, 0, 1, 1], 3: [0, 2, 2, 1, 0, 1, 2]}
    # A replica with d documents read cyclically needs 8d blocks and has 20. Over by e = 8d - 20 blocks:
    # - e <= 0: nothing is evicted; each re-read hits its 7 hittable blocks (112 tokens).
    # - 0 < e < 8: pass 1 evicts e blocks from the front of the free queue, the first document's; vLLM frees a
    #   request's blocks tail first (vLLM 0.33.0 single_type_kv_cache_manager.py 598-599 passes them reversed
    #   to block_pool.free_blocks, 816, which queues them in that order: "the tail blocks are evicted first",
    #   kv_cache_manager.py 629-633), so the tail goes and the head's 8 - e blocks stay, a prefix that hits. Each re-read then hits its 8 - e blocks and
    #   evicts the next document's e tail blocks: every re-read hits 8 - e blocks.
    # - e >= 8: the first document is gone whole and the next has lost its tail; each re-read misses and evicts
    #   the next's head: nothing hits.
    # Freed head first, the d = 3 case (e = 4) would lose each document's first block and hit nothing: only a
    # replica with d <= 2 would hit, so affinity would start at 3 replicas, not 2.
    def expected(d: int) -> int:
        e = 8 * d - 20
        return 7 * 16 if e <= 0 else (8 - e) * 16 if e < 8 else 0

    for replicas, docs_on in assigned.items():
        run = fleet(CYCLIC, "affinity", replicas)
        assert [r.replica for r in run.routes[:7]] == docs_on
        counts = [docs_on.count(r) for r in range(replicas)]
        assert second_pass_hits(run) == [expected(counts[docs_on[doc]]) for doc in range(7)]
    # Spelled out: 1 replica holds all 7 (e = 36): no hit. 2 replicas: replica 0 holds 4 (e = 12), no hit; replica 1
    # holds docs 3, 5, 6 (e = 4), each re-read hits 4 blocks: affinity starts to hit at 2 replicas.
    assert second_pass_hits(fleet(CYCLIC, "affinity", 1)) == [0] * 7
    assert second_pass_hits(fleet(CYCLIC, "affinity", 2)) == [0, 0, 0, 64, 0, 64, 64]
    # 3 replicas: 2, 2 and 3 documents: 112 tokens on replicas 0 and 1, 64 on replica 2 (docs 1, 2, 6).
    assert second_pass_hits(fleet(CYCLIC, "affinity", 3)) == [112, 64, 64, 112, 112, 112, 64]


# Eight documents of 32 tokens behind a 256-token system prompt, read twice: the first 256 tokens, all affinity
# hashes, are the same for every request. Each request generates 10 tokens; a replica runs one request at a time
# (max_num_seqs 1) and every step costs 1 ms; a closed loop keeps 4 requests in flight over 4 replicas.
SHARED_HEAD = Scenario(docs=8, doc_tokens=32, question_tokens=0, shared_prefix_tokens=256, output_tokens=10,
                       gpu_tokens=200 * 16, cpu_gb=None, passes=[PassSpec(), PassSpec()])
ONE_AT_A_TIME = SchedulerConfig(max_num_seqs=1)


def test_affinity_piles_a_shared_head_on_one_replica_and_vllm_dp_spreads_it() -> None:
    ttft = {
        name: [f.ttft_ms for f in fleet(SHARED_HEAD, name, 4, config=ONE_AT_A_TIME, arrivals=ClosedLoop(4)).flights]
        for name in ("affinity", "vllm-dp")
    }
    # Affinity: all 16 on one replica, one at a time, each 10 steps (a prefill step with the first token, 9
    # decodes). Request k runs steps 10k+1 .. 10k+10, its first token at 10k + 1 ms. Requests 0..3 arrive at 0;
    # request k >= 4 arrives when request k - 4 finishes, at 10(k - 3): TTFT 10k + 1 - 10(k - 3) = 31 ms.
    assert ttft["affinity"] == [1, 11, 21, 31] + [31] * 12
    # vLLM's balancer: the four at 0 ms each go to another engine (each pick bumps its stale waiting count, the scan
    # start moves on by one), so each runs alone: first token after 1 ms. All four finish at 10 ms; the four
    # released then see the same stale counts, all equal, and the rotating start spreads them again, and so on.
    assert ttft["vllm-dp"] == [1.0] * 16


def test_a_shared_tier_serves_a_replica_the_document_another_computed() -> None:
    # One 512-token document (two 256-token chunks, no question) read twice, round-robin over 2 replicas: the
    # second read goes to replica 1, which never saw it. Each replica has its own 1,024-token CPU tier (LMCache);
    # behind them one shared 4,096-token store read at 0.01 ms a token.
    s = Scenario(docs=1, doc_tokens=512, question_tokens=0, gpu_tokens=100 * 16, cpu_tokens=1024, passes=[PassSpec(), PassSpec()])
    shared = FleetSettings(shared_tier="remote:4096t:lru:0.01").shared(s.bytes_per_token)
    costs = default_costs()
    run = fleet(s, "round-robin", 2, run="gpu+cpu", shared=shared, costs=StepCosts.from_request_costs(costs))
    first, second = run.records
    assert [r.replica for r in run.routes] == [0, 1]
    # Replica 0 computes it all and stores both full chunks to its CPU and, behind it, to the shared store.
    assert (first.gpu_hit_tokens, first.tier_hits, first.computed_tokens) == (0, {}, 512)
    # Replica 1: its GPU and CPU miss; the shared store holds both chunks, 512 tokens, of which vLLM loads all but
    # the last token (recomputed): 511 loaded, 1 computed. Its own hit covers the prompt's full chunks, so LMCache
    # stores nothing (adapter 331-338).
    assert (second.gpu_hit_tokens, second.tier_hits, second.computed_tokens, second.stored_tokens) == (0, {"remote": 511}, 1, 0)
    # Its TTFT, one step alone: the cost model's for 1 computed token, plus 511 tokens at the tier's own 0.01 ms.
    assert second.ttft_ms == pytest.approx(costs.ttft_ms(1, 0, 0, 0) + 511 * 0.01, abs=1e-3)
    # Without the shared tier replica 1 computes all 512.
    alone = fleet(s, "round-robin", 2, run="gpu+cpu", costs=StepCosts.from_request_costs(costs))
    assert alone.records[1].computed_tokens == 512
