"""``kvscope advise --replicas``: the cheapest fleet meeting a TTFT target at a rate, worked out by hand."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.costs.model import default_costs
from sim.sched.arrivals import OpenLoop

# Twelve documents of 4,000 tokens read once (4,013-token prompts with the question), one output token each: no
# request reuses another's prefix, so no router and no cache changes the work. At 50 requests/s they all arrive
# within a quarter of a second (checked below); the target is p90 3,500 ms.
WORKLOAD = ("--docs", "12", "--doc-tokens", "4000", "--passes", "forward", "--no-cpu", "--output-tokens", "1")
FLEET = ("--replicas", "1,2,4", "--router", "round-robin", "--rate", "50", "--p90-ms", "3500", "--points", "2")


def advise(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["advise", "--no-save", *args])
    return result.exit_code, result.stdout, result.output


def test_one_replica_cannot_serve_the_rate_within_the_target_where_two_can() -> None:
    costs = default_costs()
    prompt = 4013
    alone_ms = costs.overhead_ms + costs.prefill_ms_per_token * prompt  # 23.2 + 445.7 = 468.9 ms: one step
    work_ms = costs.prefill_ms_per_token * prompt  # what each prompt costs a replica however steps batch it
    last_arrival_ms = max(OpenLoop(50).times_ms(12))
    assert last_arrival_ms < 300
    # One replica: the k-th request served (FCFS) has its first token only once k prompts' token work is done,
    # k x 445.7 ms from 0, so requests 10 to 12 wait at least 10 x 445.7 - 300 = 4,157 ms: three of twelve TTFTs
    # at or above that, so p90 (between the 10th and 11th of them) is too, over the 3,500 ms target.
    one_replica_floor = 10 * work_ms - 300
    assert one_replica_floor > 3500
    # Two replicas behind round-robin: six requests each. A replica never idles while a request waits, and each
    # request costs it at most its cost alone (468.9 ms, one step), so all six are done by the last arrival plus
    # 6 x 468.9 = 2,813 ms: every TTFT at most ~3,100 ms, within the target. Four replicas meet it too, but each
    # replica needs the same least GPU (one request of 4,013 + 1 tokens in 16-token blocks: 4,032), so four cost
    # twice what two cost: two replicas of the least GPU are the cheapest fleet.
    two_replica_ceiling = last_arrival_ms + 6 * alone_ms
    assert two_replica_ceiling < 3500
    code, out, everything = advise(*WORKLOAD, *FLEET, "--workers", "2", "--json")
    assert code == 0, everything
    advice = json.loads(out)
    best = advice["meets"][0]
    assert (best["config"]["replicas"], best["config"]["gpu_tokens"], best["router"]) == (2, 4032, "round-robin")
    assert best["p90_ms"] <= two_replica_ceiling
    assert advice["candidates"] == 6  # three replica counts x two GPU sizes
    # The one-replica fleet it passed over misses by the margin worked out above.
    assert "p90" in best["why_cheaper_failed"] and best["cheaper_failed"] >= 1
    failed_p90 = float(best["why_cheaper_failed"].split("p90 ")[1].split(" ms")[0].replace(",", ""))
    assert failed_p90 >= one_replica_floor


def test_the_table_leads_with_replicas_and_router_and_prices_the_whole_fleet() -> None:
    code, out, everything = advise(*WORKLOAD, *FLEET, "--workers", "1")
    assert code == 0, everything
    # Under load (a rate): the line saying so, then the table, whose last column is each row's highest rate.
    assert out.splitlines()[1].startswith("under load: requests at 50 requests/s")
    head, _, first = out.splitlines()[2:5]
    assert head.split()[:3] == ["replicas", "router", "#"] and head.split()[-2:] == ["max", "req/s"]
    cells = first.split()
    assert cells[:4] == ["2", "round-robin", "1", "4,032"]
    assert float(cells[-2]) == pytest.approx(2 * float(cells[4]), abs=0.002)  # GiB: two replicas' GPUs
    assert "on each of 2 replicas, behind the round-robin router:" in out


@pytest.mark.parametrize(("args", "named"), [
    (("--router", "affinity"), "--router"),
    (("--replicas", "1,x"), "--replicas"),
    (("--replicas", "0"), "--replicas"),
    (("--replicas", "2", "--router", "nope"), "--router"),
    (("--replicas", "2", "--rate", "-1"), "--rate"),
    (("--replicas", "2", "--trace", "mooncake-synthetic"), "--replicas"),
])
def test_bad_fleet_input_names_the_flag(args: tuple[str, ...], named: str) -> None:
    code, _, everything = advise(*WORKLOAD, "--p90-ms", "3500", "--points", "2", *args)
    assert code == 2 and named in everything, everything


def test_a_fleet_search_crosses_vllm_native_whose_stores_cost_no_step_time() -> None:
    # Two 500-token documents read twice; each replica's GPU (the preset's 21,520 tokens) keeps both, so nothing is
    # ever loaded from CPU. --buy cpu at 2 points with lru alone: no CPU tier, or 2 CPU sizes under each of the two
    # backends: 5 candidates per replica count, 10 for 1 and 2 replicas.
    args = ("--docs", "2", "--doc-tokens", "500", "--passes", "forward,forward", "--output-tokens", "1", "--buy", "cpu",
            "--points", "2", "--policies", "lru", "--backends", "lmcache,vllm-native", "--replicas", "1,2",
            "--router", "round-robin", "--rate", "50", "--p90-ms", "3500", "--top", "10", "--workers", "1", "--json")
    code, out, everything = advise(*args)
    assert code == 0, everything
    advice = json.loads(out)
    assert advice["candidates"] == 10
    one = {m["config"]["cpu_backend"]: m["p90_ms"] for m in advice["meets"] if m["config"]["replicas"] == 1}
    # vLLM's native connector copies a step's stores out on the worker's own stream after its forward pass
    # (sim.engine.loop's TTFT, sim.sched.stepped's step), so with nothing loaded a native replica's steps, and its
    # TTFTs, are those without a CPU tier; LMCache saves in the step, and its stores add their cost.
    assert one["vllm-native"] == one[None] < one["lmcache"]
