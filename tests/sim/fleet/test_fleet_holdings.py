"""What each replica holds at each arrival (``sim.fleet.holdings``): frames of changes, derived here by hand."""

from __future__ import annotations

from sim.fleet.settings import FleetSettings
from sim.fleet.simulate import scenario_fleet_cost, simulate_fleet
from sim.sched.serving import Serving
from sim.workloads.scenario import Scenario, parse_passes

# Three documents of 600 tokens and a 13-token question: a 613-token prompt, 38 full 16-token blocks (608 tokens)
# cached on the GPU (the partial tail block has no hash), 2 full 256-token chunks (512 tokens) stored in the CPU tier
# (only full chunks). The GPU holds 2,000 tokens: 125 blocks, one of them the null block, 1,984 tokens usable: three
# documents' 1,824 fit, so nothing is evicted; the CPU's 2,048 tokens hold three documents' 1,536 too.
SMALL = Scenario(docs=3, doc_tokens=600, question_tokens=13, gpu_tokens=2_000, cpu_tokens=2_048,
                 passes=parse_passes("forward,forward"))


def _holdings(serving: Serving, replicas: int = 2, scenario: Scenario = SMALL) -> list[dict]:
    result, _ = simulate_fleet(scenario, serving, FleetSettings(replicas=replicas, routers=("round-robin",)), holdings=True)
    return result["routers"][0]["holdings"]


def test_one_at_a_time_each_arrival_sees_what_the_requests_before_it_left() -> None:
    # A closed loop of one: request k arrives when request k - 1 has finished, so at its arrival every earlier request
    # has left its blocks cached. Round-robin sends request k to replica k mod 2: replica 0 serves requests 0, 2, 4
    # (documents 0, 2, 1: the passes are forward twice), replica 1 requests 1, 3, 5 (documents 1, 0, 2). A frame says
    # what changed on the one replica that served the request before: its document, new to that replica each time.
    gpu, cpu = 608, 512
    expected = [
        # At request 0's arrival nothing has run: no frame. At request 1's, replica 0 has served document 0.
        {"seq": 1, "replica": 0, "tier": "gpu", "used_tokens": gpu, "docs": {"0": gpu}, "pinned": {}},
        {"seq": 1, "replica": 0, "tier": "cpu", "used_tokens": cpu, "docs": {"0": cpu}},
        {"seq": 2, "replica": 1, "tier": "gpu", "used_tokens": gpu, "docs": {"1": gpu}, "pinned": {}},
        {"seq": 2, "replica": 1, "tier": "cpu", "used_tokens": cpu, "docs": {"1": cpu}},
        {"seq": 3, "replica": 0, "tier": "gpu", "used_tokens": 2 * gpu, "docs": {"2": gpu}, "pinned": {}},
        {"seq": 3, "replica": 0, "tier": "cpu", "used_tokens": 2 * cpu, "docs": {"2": cpu}},
        {"seq": 4, "replica": 1, "tier": "gpu", "used_tokens": 2 * gpu, "docs": {"0": gpu}, "pinned": {}},
        {"seq": 4, "replica": 1, "tier": "cpu", "used_tokens": 2 * cpu, "docs": {"0": cpu}},
        {"seq": 5, "replica": 0, "tier": "gpu", "used_tokens": 3 * gpu, "docs": {"1": gpu}, "pinned": {}},
        {"seq": 5, "replica": 0, "tier": "cpu", "used_tokens": 3 * cpu, "docs": {"1": cpu}},
        # After the last request finished (seq None): replica 1 has served document 2 too.
        {"seq": None, "replica": 1, "tier": "gpu", "used_tokens": 3 * gpu, "docs": {"2": gpu}, "pinned": {}},
        {"seq": None, "replica": 1, "tier": "cpu", "used_tokens": 3 * cpu, "docs": {"2": cpu}},
    ]
    assert _holdings(Serving(concurrency=1)) == expected


def test_a_request_running_at_an_arrival_pins_its_blocks_and_leaves_them_cached_after() -> None:
    # One replica, requests arriving on their own at 1,000 a second (gaps of about 1 ms) and each generating 50 tokens
    # (50 steps of several ms): request 1 arrives while request 0 runs. Its first step (started at request 0's
    # arrival) has prefilled the 613 prompt tokens and sampled one token: 614 tokens in 39 blocks, all held by the
    # running request, so all pinned: 39 x 16 = 624 tokens of document 0 (its partial block counted whole, as vLLM
    # holds it). Nothing of it is in the CPU tier yet beyond the chunks it stored: 2 full chunks, 512 tokens.
    frames = _holdings(Serving(rate=1000), replicas=1, scenario=SMALL.replace(output_tokens=50))
    first = [f for f in frames if f["seq"] == 1]
    assert first[0] == {"seq": 1, "replica": 0, "tier": "gpu", "used_tokens": 624, "docs": {"0": 624}, "pinned": {"0": 624}}
    # At the end every request has finished: nothing is pinned. A frame lists changes only, so what a tier holds is
    # every frame of it applied in order; its documents then add up to the tokens in use its last frame says.
    held: dict[str, int] = {}
    pinned: dict[str, int] = {}
    for f in frames:
        if f["tier"] == "gpu":
            held.update(f["docs"])
            pinned.update(f["pinned"])
            assert sum(held.values()) == f["used_tokens"], f
    assert [f["seq"] for f in frames if f["tier"] == "gpu"][-1] is None
    assert {d: t for d, t in pinned.items() if t} == {}


def test_a_shared_tier_is_one_store_framed_once_for_every_replica() -> None:
    # One store of 4,096 tokens behind both replicas: request 0 (replica 0) stores document 0's two full chunks in it,
    # request 1 (replica 1) document 1's, request 2 document 2's: 1,536 tokens, no eviction. The second pass finds all
    # three there and stores nothing new, so the store's frames stop at request 3's arrival. It is framed once (replica
    # None), never as a replica's own tier.
    result, _ = simulate_fleet(SMALL, Serving(concurrency=1), FleetSettings(
        replicas=2, routers=("round-robin",), shared_tier="remote:4096t"), holdings=True)
    frames = result["routers"][0]["holdings"]
    shared = [f for f in frames if f["tier"] == "remote"]
    assert shared == [
        {"seq": 1, "replica": None, "tier": "remote", "used_tokens": 512, "docs": {"0": 512}},
        {"seq": 2, "replica": None, "tier": "remote", "used_tokens": 1024, "docs": {"1": 512}},
        {"seq": 3, "replica": None, "tier": "remote", "used_tokens": 1536, "docs": {"2": 512}},
    ]


def test_the_frames_are_counted_in_the_fleets_cost() -> None:
    settings, serving = FleetSettings(replicas=2, routers=("round-robin",)), Serving(concurrency=1)
    without, with_ = scenario_fleet_cost(SMALL, serving, settings), scenario_fleet_cost(SMALL, serving, settings, holdings=True)
    assert with_.response_bytes > without.response_bytes and with_.work_steps > without.work_steps
