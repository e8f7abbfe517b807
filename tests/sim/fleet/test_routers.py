"""Each router's rule on a small case worked by hand from its project's source (cited in the router's module).

Block keys are prefix-chained, so two prompts share their first k blocks exactly when their first k keys are
equal; prompts here are 16-token blocks unless said otherwise.
"""

from __future__ import annotations

import pytest

from sim.fleet.routers import ROUTER_NAMES, ReplicaState, RoutedRequest, router
from sim.fleet.routers.affinity import PrefixAffinity
from sim.fleet.routers.llmd import normalised_prefix, queue_scores
from sim.fleet.routers.sglang_cache_aware import ApproximateTree

IDLE = ReplicaState()


def req(seq: int, keys: list[int], tokens: int | None = None, block: int = 16) -> RoutedRequest:
    return RoutedRequest(seq=seq, prompt_tokens=tokens if tokens is not None else len(keys) * block + 1,
                         block_keys=keys, block_tokens=block)


def test_every_router_is_built_by_its_name_and_an_unknown_name_is_refused() -> None:
    for name in ROUTER_NAMES:
        assert router(name).name == name
    with pytest.raises(ValueError, match="unknown router 'nginx'; known: round-robin, random"):
        router("nginx")


def test_round_robin_cycles_in_arrival_order() -> None:
    rr = router("round-robin")
    assert [rr.route(req(i, [i]), [IDLE] * 3, 0) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_random_is_seeded_and_in_range() -> None:
    a, b, c = router("random", seed=7), router("random", seed=7), router("random", seed=8)
    picks = [a.route(req(i, [i]), [IDLE] * 4, 0) for i in range(200)]
    assert picks == [b.route(req(i, [i]), [IDLE] * 4, 0) for i in range(200)]
    assert picks != [c.route(req(i, [i]), [IDLE] * 4, 0) for i in range(200)]
    assert set(picks) == {0, 1, 2, 3}


def test_vllm_dp_scores_the_snapshot_with_its_kv_penalty_and_takes_turns_on_ties() -> None:
    dp = router("vllm-dp")
    # Snapshot [waiting, running, kv]: engine 0 (0, 2, 0.3): score max(0, 2) = 2, nothing waits so no penalty;
    # engine 1 (1, 0, 0.9): max(0, 1) = 1, plus 1 x 6 x (0.9 - 0.5) = 2.4 -> 3.4; engine 2 idle: 0. Engine 2 wins.
    replicas = [ReplicaState(0, 2, 0.3), ReplicaState(1, 0, 0.9), ReplicaState(0, 0, 0.2)]
    assert dp.route(req(0, [1]), replicas, now_ms=0) == 2
    # 10 ms later the snapshot (refreshed every 100 ms) is the same but for the client's own bump: engine 2 now
    # has waiting 1 (+1 at once, line 1800) and one in flight: max(1, 1) = 1, and its KV 0.2 is under half, so
    # no penalty. 1 < 2 < 3.4: engine 2 again. The scan now starts at engine 1 (the start moves on each call).
    assert dp.route(req(1, [2]), replicas, now_ms=10) == 2
    # Third: engine 2 has waiting 2, two in flight: score 2, equal to engine 0's 2. The scan starts at engine 2
    # (third call), meets engine 2 first, and a tie keeps the first met (score < min_score): engine 2.
    assert dp.route(req(2, [3]), replicas, now_ms=20) == 2
    # Fourth: engine 2 would score 3; the scan starts at engine 0 (2 + 1 mod 3), which scores 2: engine 0.
    assert dp.route(req(3, [4]), replicas, now_ms=30) == 0
    # At 100 ms a new snapshot arrives: all idle, but engine 2's three requests are still in flight (none
    # finished), so its floor is 3 and engine 0's 1; engine 1 scores 0 and the scan (from engine 1) takes it.
    idle = [IDLE, IDLE, IDLE]
    assert dp.route(req(4, [5]), idle, now_ms=100) == 1
    # Once they finish, the floors fall: with all idle and nothing in flight, the rotation alone decides.
    for seq, engine in ((0, 2), (1, 2), (2, 2), (3, 0), (4, 1)):
        dp.finished(seq, engine)
    assert [dp.route(req(5 + i, [9 + i]), idle, now_ms=300 + 100 * i) for i in range(3)] == [2, 0, 1]


def test_affinity_sends_a_shared_head_to_one_replica_whatever_follows() -> None:
    aff = PrefixAffinity(prefix_tokens=64)  # the first 4 blocks of 16 tokens
    head = [10, 11, 12, 13]
    first = aff.route(req(0, head + [20, 21]), [IDLE] * 4, 0)
    # Same first four keys, another tail, and a busy replica: still the same one (affinity ignores load).
    busy = [ReplicaState(waiting=50)] * 4
    assert aff.route(req(1, head + [30, 31, 32]), busy, 0) == first
    # Heads that differ spread over the ring: 64 random heads reach every one of 4 replicas.
    assert {aff.route(req(i, [1000 + i, 1, 2, 3]), [IDLE] * 4, 0) for i in range(64)} == {0, 1, 2, 3}
    # Consistent hashing: a fifth replica takes only the keys nearest its points; most heads stay put.
    before = [aff.route(req(i, [2000 + i]), [IDLE] * 4, 0) for i in range(400)]
    after = [aff.route(req(i, [2000 + i]), [IDLE] * 5, 0) for i in range(400)]
    moved = sum(b != a for b, a in zip(before, after))
    assert all(a == 4 for b, a in zip(before, after) if b != a)  # whatever moved, moved to the new replica
    assert 0 < moved < 400 * 0.35  # about a fifth


def test_sglang_routes_by_match_rate_then_smallest_tree_and_shortest_queue_when_unbalanced() -> None:
    sg = router("sglang", balance_abs_threshold=2, balance_rel_threshold=1.5)
    two = [IDLE, IDLE]
    # Empty trees: match rate 0 <= 0.3, so the smallest tree; both 0 tokens, the first: worker 0. Its tree now
    # holds document A's 10 blocks (160 tokens).
    a = list(range(10))
    assert sg.route(req(0, a), two, 0) == 0
    # Document B matches nothing: smallest tree is worker 1 (0 tokens against 160).
    b = list(range(100, 110))
    assert sg.route(req(1, b), two, 1) == 1
    # A again with 2 more blocks: 10 of 12 blocks matched on worker 0, 160 of 193 tokens = 0.83 > 0.3: worker 0.
    assert sg.route(req(2, a + [50, 51]), two, 2) == 0
    # A prompt sharing only 2 of its 12 blocks with A: 32 / 193 = 0.17 <= 0.3, so the smallest tree: worker 1
    # (160 tokens against worker 0's 192).
    assert sg.route(req(3, a[:2] + list(range(200, 210))), two, 3) == 1
    # Loads now 2 and 2 (none answered). Finish worker 1's two: loads 2 and 0. Unbalanced needs max - min > 2:
    # 2 is not, so A's match still wins: worker 0, load 3.
    sg.finished(1, 1)
    sg.finished(3, 1)
    assert sg.route(req(4, a), two, 4) == 0
    # Loads 3 and 0: 3 - 0 > 2 and 3 > 0 x 1.5: unbalanced, so the least loaded, worker 1, though A lives on 0.
    assert sg.route(req(5, a), two, 5) == 1


def test_sglang_tree_evicts_least_recently_sent_leaves_first() -> None:
    tree = ApproximateTree(1)
    tree.insert(0, [1, 2, 3], 16, now_ms=0)
    tree.insert(0, [7, 8], 16, now_ms=5)
    tree.evict_to(48, 16)  # 80 tokens held; keep 48: drop the oldest chain's tail first (3, then 2)
    assert sorted(tree.nodes) == [1, 7, 8] and tree.size_tokens == [48]
    assert tree.prefix_match([1, 2, 3]) == (1, 0)


def test_llmd_scores_are_the_guides_weights_of_normalised_prefix_free_kv_and_short_queue() -> None:
    # Held leading blocks 0, 4, 8: the replicas holding any are min-max normalised (4 -> 0, 8 -> 1); 0 holds none.
    assert normalised_prefix([0, 4, 8]) == [0.0, 0.0, 1.0]
    assert normalised_prefix([0, 5, 5]) == [0.0, 1.0, 1.0]
    replicas = [
        ReplicaState(waiting=0, kv_usage=0.1, held_prefix_blocks=0),
        ReplicaState(waiting=2, kv_usage=0.5, held_prefix_blocks=4),
        ReplicaState(waiting=4, kv_usage=0.9, held_prefix_blocks=8),
    ]
    assert queue_scores(replicas) == [1.0, 0.5, 0.0]
    ll = router("llm-d")
    # 3 x prefix + 2 x (1 - kv) + 2 x queue: r0 0 + 1.8 + 2 = 3.8; r1 0 + 1.0 + 1 = 2.0; r2 3 + 0.2 + 0 = 3.2.
    assert ll.scores(req(0, list(range(8))), replicas) == pytest.approx([3.8, 2.0, 3.2])
    assert ll.route(req(0, list(range(8))), replicas, 0) == 0
    # With the cache nearly as free and no queue, holding the prefix wins: r2 3 + 1.6 + 2 = 6.6 against 3.8.
    replicas[2] = ReplicaState(waiting=0, kv_usage=0.2, held_prefix_blocks=8)
    assert ll.route(req(1, list(range(8))), replicas, 0) == 2


def test_llmd_approximate_index_learns_from_its_own_routing_and_forgets_past_its_capacity() -> None:
    ap = router("llm-d-approx", lru_capacity_per_server=10)
    two = [IDLE, IDLE]
    doc = list(range(8))
    # Nothing known: every score ties (prefix 0, kv 2, queue 2 = 4); the seeded tie-break picks one.
    first = ap.route(req(0, doc), two, 0)
    # Now the index says `first` holds all 8 blocks: 3 more points there.
    assert ap.held(req(1, doc), two)[first] == 8
    assert ap.route(req(1, doc), two, 0) == first
    # Ten other blocks sent to the same replica push doc's oldest 8 out of its 10-block LRU index.
    ap.sent(req(2, list(range(100, 110))), first)
    assert ap.held(req(3, doc), two) == [0, 0]


def test_dynamo_prefers_fewest_prefill_plus_decode_blocks() -> None:
    dy = router("dynamo")
    # isl 161 tokens (10 full blocks + 1), block 16. Worker 0 holds 10 leading blocks, 30 active blocks;
    # worker 1 holds none, 5 active. logit0 = (161 - 160) / 16 + 30 = 30.06; logit1 = 161 / 16 + 5 = 15.06.
    replicas = [ReplicaState(active_blocks=30, held_prefix_blocks=10), ReplicaState(active_blocks=5)]
    request = req(0, list(range(10)))
    assert dy.logits(request, replicas) == pytest.approx([30.0625, 15.0625])
    assert dy.route(request, replicas, 0) == 1
    # That request's 161 new tokens are now queued on worker 1 until it is prefilled: a second one like it sees
    # worker 1 at (161 + 161) / 16 + 5 = 25.125, still under 30.06: worker 1 again.
    assert dy.logits(req(1, list(range(10))), replicas)[1] == pytest.approx(25.125)
    assert dy.route(req(1, list(range(10))), replicas, 0) == 1
    # A third: worker 1 at (3 x 161) / 16 + 5 = 35.19 > 30.06: worker 0, whose cache saves the prefill.
    assert dy.route(req(2, list(range(10))), replicas, 0) == 0
    # Prefills done: worker 1's queue empties and it is the cheaper again.
    for seq, worker in ((0, 1), (1, 1), (2, 0)):
        dy.prefilled(seq, worker)
    assert dy.route(req(3, list(range(10))), replicas, 0) == 1


def test_dynamo_with_a_temperature_samples_and_still_favours_the_cheaper() -> None:
    dy = router("dynamo", temperature=0.5, seed=1)
    replicas = [ReplicaState(active_blocks=100), ReplicaState(active_blocks=0)]
    picks = []
    for i in range(400):
        picks.append(dy.route(req(i, [i]), replicas, 0))
        dy.prefilled(i, picks[-1])
    # Normalised logits 1 and 0 (by max - min): weights exp(-2) and 1, so worker 0 about 12% of the time.
    share = picks.count(0) / len(picks)
    assert 0.06 < share < 0.2
