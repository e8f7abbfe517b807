"""``kvscope fleet``: a table per router, --json with each request's replica, a trace at its timestamps, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from tests.sim.fleet.test_fleet_simulate import EXPLAINED

SMALL = ("--docs", "4", "--doc-tokens", "600", "--gpu-tokens", "2000", "--cpu-tokens", "2048")
ROUTE = {"replica", "held_tokens", "best_replica", "best_held_tokens", "lost_tokens"}


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["fleet", "--no-save", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("engine", [(), ("--cpu-backend", "vllm-native"), ("--async-scheduling",),
                                    ("--cpu-backend", "vllm-native", "--async-scheduling")])
def test_json_has_one_record_per_request_and_router_naming_its_replica_beside_simulate_fields(engine: tuple[str, ...]) -> None:
    code, out = run(*SMALL, *engine, "--replicas", "1", "--router", "round-robin", "--router", "sglang", "--concurrency", "2", "--json")
    assert code == 0, out
    result = json.loads(out)
    simulate = ["simulate", "--no-save", *SMALL, *engine, "--concurrency", "2", "--json"]
    simulated = json.loads(CliRunner().invoke(main, simulate).output)
    theirs = simulated["runs"][-1]["requests"]  # gpu+cpu, the stack each replica runs
    assert [e["router"] for e in result["routers"]] == ["round-robin", "sglang"]
    for entry in result["routers"]:
        # One replica: the same records as simulate's stepped run (less its misses' causes, which the fleet does not
        # explain), each with its route added.
        assert [{k: v for k, v in r.items() if k not in ROUTE} for r in entry["requests"]] == [
            {k: v for k, v in r.items() if k not in EXPLAINED} for r in theirs
        ]
        assert all(r["replica"] == 0 for r in entry["requests"])
    assert result["scenario"]["serving"]["concurrency"] == 2


def test_the_table_compares_routers_and_lists_each_replica() -> None:
    code, out = run(*SMALL, "--replicas", "2", "--router", "round-robin", "--router", "affinity")
    assert code == 0, out
    assert out.startswith("2 replicas of gpu+cpu; hit ratio bounds: one pooled cache ")
    assert "router       hit ratio  TTFT p50 ms" in out
    assert "\nround-robin:\nreplica  requests" in out and "\naffinity:\nreplica  requests" in out
    assert "affinity: TTFT p50 " in out


def _trace(tmp_path: Path) -> Path:
    # Three requests of two 512-token blocks: the second shares the first's blocks, the third is new; at 0, 1,000
    # and 1,500 ms (timestamps from 5,000).
    lines = [
        {"timestamp": 5000, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 6000, "input_length": 1024, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 6500, "input_length": 1024, "output_length": 2, "hash_ids": [3, 4]},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_trace_arrives_at_its_timestamps_and_each_replica_writes_its_ledger(tmp_path: Path) -> None:
    steps = tmp_path / "steps.jsonl"
    code, out = run("--trace", str(_trace(tmp_path)), "--gpu-tokens", str(11 * 512), "--replicas", "2",
                    "--router", "round-robin", "--router", "affinity", "--steps", str(steps), "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["serving"]["arrivals"] == "timestamps" and result["fleet"]["run"] == "gpu"
    rr, aff = result["routers"]
    assert [r["arrival_ms"] for r in rr["requests"]] == [0.0, 1000.0, 1500.0]
    # Round-robin: the re-read goes to replica 1, which never saw it: no hit, and replica 0 held 1 hittable block
    # ((1024 - 1) // 512), 512 tokens lost. Affinity sends both to one replica: the re-read hits that block.
    assert [r["replica"] for r in rr["requests"]] == [0, 1, 0]
    assert (rr["requests"][1]["gpu_hit_tokens"], rr["requests"][1]["lost_tokens"]) == (0, 512)
    assert aff["requests"][0]["replica"] == aff["requests"][1]["replica"]
    assert (aff["requests"][1]["gpu_hit_tokens"], aff["requests"][1]["lost_tokens"]) == (512, 0)
    # --speedup 2 halves the gaps: arrivals at 0, 500 and 750 ms.
    code, out = run("--trace", str(_trace(tmp_path)), "--gpu-tokens", str(11 * 512), "--router", "random",
                    "--speedup", "2", "--json")
    assert [r["arrival_ms"] for r in json.loads(out)["routers"][0]["requests"]] == [0.0, 500.0, 750.0]
    led = {json.loads(line)["run"] for line in steps.read_text().splitlines()}
    assert {"round-robin/0", "round-robin/1"} <= led and any(name.startswith("affinity/") for name in led)


def test_bad_input_names_the_flag_and_the_limit(tmp_path: Path) -> None:
    trace = str(_trace(tmp_path))
    cases = [
        (("--replicas", "0"), "--replicas: Input should be greater than or equal to 1"),
        (("--replicas", "300"), "--replicas: Input should be less than or equal to 256"),
        (("--router", "nginx"), "--router: unknown router 'nginx'; known: round-robin, random, vllm-dp"),
        (("--router", "affinity", "--router", "affinity"), "--router: each router once: affinity given twice"),
        (("--shared-tier", "remote"), "--shared-tier: a tier is NAME:SIZE"),
        ((*SMALL[:6], "--no-cpu", "--shared-tier", "remote:4096t"), "Invalid value for --shared-tier: tier remote: needs a CPU tier"),
        (("--cpu-backend", "vllm-native", "--shared-tier", "remote:4096t"),
         "Invalid value for --shared-tier: tier remote: vllm-native offloads to its CPU tier alone"),
        (("--trace", trace), "--gpu-tokens: required with --trace"),
        (("--speedup", "2"), "--speedup: needs --trace at its timestamps"),
        (("--trace", trace, "--gpu-tokens", "11264", "--speedup", "0"), "0.001<=x<=1000000"),
        (("--trace", trace, "--gpu-tokens", "11264", "--docs", "3"), "--docs: the trace is the workload"),
        (("--trace", trace, "--gpu-tokens", "1000"), "must hold vLLM's null block and one block of 512 tokens: at least 1024"),
        # 1,536 tokens are 3 blocks, one of them vLLM's null block; a request's 1,024 prompt tokens and its first
        # generated token's KV (1,025 tokens) need 3 blocks.
        (("--trace", trace, "--gpu-tokens", "1536"),
         "Invalid value for --gpu-tokens: must hold the trace's longest request, its prompt and generated tokens: at least 3 blocks of 512 tokens, got 2"),
    ]
    for args, message in cases:
        code, out = run(*args)
        assert code == 2, (args, out)
        assert message in out, (args, out)
