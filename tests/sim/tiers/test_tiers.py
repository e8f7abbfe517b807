"""Offload tiers as a list: any number behind the CPU, each with its own size, policy and load cost."""

from __future__ import annotations

import pytest

from app.cli.table import render_table
from sim.costs.model import default_costs
from sim.simulation.run import simulate, stream
from sim.workloads.scenario import Scenario, StorageTier

# 4 documents of 512 tokens + 8-token questions: 520-token prompts, 2 full chunks of document each.
# The GPU holds one prompt (33 blocks + the null block), so no document of these passes hits it.
BASE = Scenario(
    docs=4, doc_tokens=512, question_tokens=8, gpu_tokens=16 * 34, cpu_gb=None, cpu_tokens=512, passes="forward,forward"
)
THREE = BASE.replace(disk_tokens=512, storage_tiers=[StorageTier(name="remote", tokens=4 * 512, load_ms_per_token=0.5)])


def _run(result: dict, name: str) -> dict:
    return next(r for r in result["runs"] if r["name"] == name)


@pytest.mark.parametrize("backend", ["lmcache", "brief"])
def test_a_tier_behind_the_disk_serves_what_cpu_and_disk_lost(backend: str) -> None:
    # CPU and disk hold 2 chunks (one document) each, the remote tier all four. Pass 1 stores
    # every document in every tier: CPU and disk end with doc 3, remote with all. In pass 2
    # docs 0, 1, 2 miss CPU (it holds the document read before) and disk (doc 3 still: a
    # load from remote is promoted to the CPU only, and nothing new is computed into a full
    # chunk) and load their 512 tokens from remote; doc 3 finds itself on the disk.
    # 8 tokens are computed every time.
    result = simulate(THREE.replace(cpu_backend=backend))
    run = _run(result, "gpu+cpu+disk+remote")
    assert [t["name"] for t in run["tiers"]] == ["gpu", "cpu", "disk", "remote"]
    pass2 = [r for r in run["requests"] if r["pass"] == 2]
    assert [(r["doc"], r["tier_hits"], r["source"]) for r in pass2] == [
        (0, {"remote": 512}, "remote"), (1, {"remote": 512}, "remote"), (2, {"remote": 512}, "remote"),
        (3, {"disk": 512}, "disk"),
    ]
    for r in pass2:
        # Flattened at the JSON edge: every tier behind the CPU counts as disk.
        assert (r["cpu_hit_tokens"], r["disk_hit_tokens"], r["computed_tokens"], r["stored_tokens"]) == (0, 512, 8, 0)
    # Remote's own load cost, 0.5 ms per token; the disk's is the cost model's.
    costs = default_costs()
    assert pass2[0]["ttft_ms"] == pytest.approx(costs.ttft_ms(8) + 0.5 * 512, abs=1e-3)
    assert pass2[3]["ttft_ms"] == pytest.approx(costs.ttft_ms(8, disk_tokens=512), abs=1e-3)
    assert run["passes"][1]["tier_hits"] == {"remote": 3 * 512, "disk": 512}


def test_each_tier_is_asked_about_what_the_tiers_before_it_did_not_serve() -> None:
    events = [e for e in stream(THREE) if e.run == "gpu+cpu+disk+remote" and e.kind == "lookup" and e.seq == 4]
    # Request 5 (pass 2, doc 0): the GPU is asked about all 520 tokens and hits none; CPU and
    # disk about the same 520 and hit none; remote about 520 and serves 512.
    assert [(e.tier, e.query_tokens, e.hit_tokens) for e in events] == [
        ("gpu", 520, 0), ("cpu", 520, 0), ("disk", 520, 0), ("remote", 520, 512),
    ]
    run_event = next(e for e in stream(THREE) if e.kind == "run" and e.run == "gpu+cpu+disk+remote")
    assert [(t["name"], t["kind"], t["capacity_tokens"]) for t in run_event.tiers[1:]] == [
        ("cpu", "cpu", 512), ("disk", "disk", 512), ("remote", "disk", 2048),
    ]


def test_disk_gb_is_shorthand_for_one_storage_tier() -> None:
    # The same size and policy, named differently: the same hits and TTFTs request by request.
    scenario = Scenario(docs=12, cpu_gb=0.3, passes="forward,reverse,random@3")
    short = _run(simulate(scenario.replace(disk_gb=1.0)), "gpu+cpu+disk")["requests"]
    named = _run(simulate(scenario.replace(storage_tiers="nvme:1")), "gpu+cpu+nvme")["requests"]
    assert sum(r["disk_hit_tokens"] for r in short) > 0
    assert [(r["disk_hit_tokens"], r["cpu_hit_tokens"], r["ttft_ms"]) for r in short] == [
        (r["disk_hit_tokens"], r["cpu_hit_tokens"], r["ttft_ms"]) for r in named
    ]


def test_the_table_has_a_column_per_offload_tier() -> None:
    lines = render_table(simulate(THREE)).splitlines()
    assert " ".join(lines[0].split()).count("GPU hit tok CPU hit tok Disk hit tok remote hit tok computed tok") == 1
    row = next(line for line in lines if line.startswith("gpu+cpu+disk+remote") and " 2 forward" in line)
    # Pass 2: 3 x 512 tokens from remote, 512 from disk, none from CPU; 4 x 8 computed.
    assert row.split()[5:10] == ["0", "0", "512", "1,536", "32"]


def test_storage_tier_text_round_trips_and_bad_ones_are_named() -> None:
    for text in ("remote:8:lru", "far:50000t:fifo:0.01"):
        assert StorageTier.parse(text).text == text
    with pytest.raises(ValueError, match="NAME:SIZE"):
        StorageTier.parse("remote")
    with pytest.raises(ValueError, match="none of gpu, cpu, disk: disk"):
        Scenario(storage_tiers="disk:1")
