"""The fleet's result: one entry per router whose requests are ``simulate --json``'s records plus their route."""

from __future__ import annotations

import pytest

from sim.fleet.settings import FleetSettings
from sim.fleet.simulate import simulate_fleet
from sim.sched.serving import Serving
from sim.sched.simulate import simulate_stepped
from sim.workloads.scenario import Scenario

SMALL = Scenario(docs=4, doc_tokens=600, question_tokens=13, gpu_tokens=2_000, cpu_tokens=2_048)
ROUTE = {"replica", "held_tokens", "best_replica", "best_held_tokens", "lost_tokens"}


EXPLAINED = {"gpu_miss", "computed", "evicted_misses", "infinite_hit_tokens"}  # each miss's causes (sim.explain)


def test_one_replica_gives_the_stepped_simulation_records_under_each_router() -> None:
    serving = Serving(concurrency=2)
    alone = simulate_stepped(SMALL, serving)[0]["runs"][-1]  # gpu+cpu: the fleet runs the fullest stack
    result, _ = simulate_fleet(SMALL, serving, FleetSettings(replicas=1, routers=("round-robin", "llm-d", "dynamo")))
    assert result["fleet"]["run"] == "gpu+cpu" and result["fleet"]["tiers"] == alone["tiers"]
    for entry in result["routers"]:
        rows = entry["requests"]
        # The fleet does not explain misses (a single server under load does): its records are the rest.
        assert [{k: v for k, v in r.items() if k not in ROUTE} for r in rows] == [
            {k: v for k, v in r.items() if k not in EXPLAINED} for r in alone["requests"]
        ]
        assert {r["replica"] for r in rows} == {0} and sum(r["lost_tokens"] for r in rows) == 0
        assert entry["summary"]["ttft_p99_ms"] == alone["serving"]["ttft_p99_ms"]


def test_settings_refuse_unknown_and_repeated_routers_and_a_reserved_shared_name() -> None:
    with pytest.raises(ValueError, match="unknown router 'nginx'; known: round-robin"):
        FleetSettings(routers=("nginx",))
    with pytest.raises(ValueError, match="each router once: affinity given twice"):
        FleetSettings(routers=("affinity", "affinity"))
    with pytest.raises(ValueError, match="less than or equal to 256"):
        FleetSettings(replicas=257)
    with pytest.raises(ValueError, match="none of gpu, cpu, disk: cpu"):
        FleetSettings(shared_tier="cpu:1000t")
    with pytest.raises(ValueError, match="needs a CPU tier on each replica"):
        simulate_fleet(SMALL.replace(cpu_tokens=None, cpu_gb=None), Serving(), FleetSettings(shared_tier="remote:4096t"))
