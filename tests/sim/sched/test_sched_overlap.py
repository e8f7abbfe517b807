"""Explain under load: each request's TTFT parts and what the overlap cost it, derived by hand on a small scenario."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from app.cli.explain import command as explain
from sim.costs.model import CostModel
from sim.sched.overlap import explain_served
from sim.sched.serving import Serving
from sim.sched.shares import PARTS
from sim.workloads.presets import preset_fields
from sim.workloads.scenario import Scenario

# 10 ms per step and 1 ms per prefill token; loads, stores and decodes free: a step of n prefill tokens costs 10 + n.
COSTS = CostModel(overhead_ms=10, prefill_ms_per_token=1, load_cpu_ms_per_token=0, load_disk_ms_per_token=0,
                  store_ms_per_token=0)
# Three documents of 2 blocks, each prompt with a fresh 1-block question (48 tokens, 3 full blocks; hits stop at 2
# blocks, 32 tokens), read forward twice (seqs 0-2 then 3-5), 2 output tokens (the first sample makes 49 tokens: the
# decode step allocates a 4th block, unhashed). 10 GPU blocks, 9 usable after the null block.
SMALL = dict(docs=3, doc_tokens=32, question_tokens=16, gpu_tokens=160, cpu_gb=None, passes="forward,forward",
             output_tokens=2, costs=COSTS)


def small_run(concurrency: int) -> dict:
    result, _ = explain_served(Scenario(**SMALL), Serving(concurrency=concurrency))
    return result["runs"][0]


def test_two_in_flight_evict_a_block_that_one_at_a_time_keeps() -> None:
    # Alone, each request holds blocks by itself: prefill (3 blocks), then a decode block, then all 4 go back (the
    # unhashed one to the free queue's front, the hashed ones to its back tail first). The free queue starts 1..9:
    #   r0 d0: 1,2,3 (+4);  queue [4,5..9,3,2,1]      r1 d1: 4,5,6 (+7);  queue [7,8,9,3,2,1,6,5,4]
    #   r2 d2: 7,8,9 (+3, r0's question);  queue [3,2,1,6,5,4,9,8,7]
    #   r3 d0 hits 1,2 (32 tokens), r4 d1 hits 4,5, r5 d2 hits 9,8 (their blocks stay behind the others'):
    #   pass 2 alone: every request hits 32 tokens, computes 16: TTFT 10 + 16 = 26 ms.
    # Two in flight (a closed loop of 2):
    #   step 1 (t=0): r0 and r1, 48 tokens each: blocks 1,2,3 and 4,5,6; 10 + 96 = 106 ms; both sample: TTFT 106.
    #   step 2 (t=106): both decode (7 and 8), 10 ms; both finish: queue [8,7,9,3,2,1,6,5,4]; r2 and r3 arrive at 116.
    #   step 3 (t=116): r2 misses (8,7,9), r3 hits 1,2 and takes 3: 48 + 16 tokens, 74 ms; TTFT 74 each.
    #   step 4 (t=190): both decode while their 6 blocks are held: the queue holds only [6,5,4]; r2 takes 6, r3 takes 5,
    #   d1's second block: r3's allocation evicts it. Both finish at 200; r4 and r5 arrive.
    #   step 5 (t=200): r4 hits d1's first block only (16 tokens) and computes 32; r5 hits 9,7 (d2), computes 16:
    #   10 + 48 = 58 ms.
    run = small_run(2)
    rows = {r["seq"]: r for r in run["requests"]}
    expected = {  # seq: (TTFT, its prefill = 10 + its tokens, others = the other's tokens in its steps, GPU hit)
        0: (106, 58, 48, 0), 1: (106, 58, 48, 0), 2: (74, 58, 16, 0), 3: (74, 26, 48, 32), 4: (58, 42, 16, 16),
        5: (58, 26, 32, 32),
    }
    for seq, (ttft, prefill, others, hit) in expected.items():
        r = rows[seq]
        assert (r["ttft_ms"], r["prefill_ms"], r["others_ms"], r["gpu_hit_tokens"]) == (ttft, prefill, others, hit), seq
        assert r["waiting_ms"] == r["load_ms"] == r["store_ms"] == 0
        assert r["others_tokens"] == others  # 1 ms a token
    # Blocks the other running request held at each admission: r1 beside r0 (3), r3 beside r2 (3), r5 beside r4
    # (its hit block and 2 new: 3); r0, r2 and r4 were admitted first in their steps.
    assert [rows[s]["pinned_blocks"] for s in range(6)] == [0, 3, 0, 3, 0, 3]
    # What the overlap cost r4: 16 hit tokens, evicted by r3; 32 ms = 16 more tokens of its own + r5's 16.
    o = rows[4]["overlap"]
    assert (o["hit_tokens"], o["gpu_hit_tokens"], o["evicted_tokens"], o["not_cached_tokens"], o["evicted_by"]) == (16, 16, 16, 0, [3])
    assert (o["ttft_ms"], o["prefill_ms"], o["others_ms"], o["waiting_ms"]) == (58 - 26, 16, 16, 0)
    assert rows[4]["alone"] == {"ttft_ms": 26, **dict.fromkeys(PARTS, 0), "prefill_ms": 26, "gpu_hit_tokens": 32,
                                "offload_hit_tokens": 0}
    for seq in (0, 1, 2, 3, 5):
        assert rows[seq]["overlap"]["hit_tokens"] == 0
    assert (run["totals"]["lost_hit_tokens"], run["totals"]["evicted_tokens"]) == (16, 16)
    assert (run["passes"][1]["lost_hit_tokens"], run["passes"][0]["lost_hit_tokens"]) == (16, 0)


def test_one_in_flight_costs_nothing() -> None:
    # At concurrency 1 the run is its own alone run: no part differs and no hit is lost.
    for r in small_run(1)["requests"]:
        assert all(v == 0 for k, v in r["overlap"].items() if k != "evicted_by"), r
        assert r["others_ms"] == r["waiting_ms"] == 0


@pytest.mark.parametrize("serving", [Serving(concurrency=4), Serving(rate=8.0), Serving(concurrency=3, max_num_batched_tokens=2048)])
def test_the_parts_sum_to_the_ttft(serving: Serving) -> None:
    # The seed lab with its CPU tier (loads and stores), under a closed loop, an open loop and a small budget: the
    # parts of every request, and of its alone run, add up to its TTFT (each rounded to 3 decimals).
    result, _ = explain_served(Scenario(**preset_fields("seed-lab")), serving)
    for run in result["runs"]:
        for r in run["requests"]:
            assert sum(r[k] for k in PARTS) == pytest.approx(r["ttft_ms"], abs=0.01)
            assert sum(r["alone"][k] for k in PARTS) == pytest.approx(r["alone"]["ttft_ms"], abs=0.01)
            assert sum(r["overlap"][k] for k in PARTS) == pytest.approx(r["overlap"]["ttft_ms"], abs=0.02)
    assert any(r["load_ms"] > 0 for r in result["runs"][1]["requests"])
    assert any(r["store_ms"] > 0 for r in result["runs"][1]["requests"])


def _small_flags() -> list[str]:
    return ["--docs", "3", "--doc-tokens", "32", "--question-tokens", "16", "--gpu-tokens", "160", "--no-cpu",
            "--passes", "forward,forward", "--output-tokens", "2"]


def test_the_cli_explains_one_request_under_load(tmp_path) -> None:
    costs = tmp_path / "costs.json"
    costs.write_text(COSTS.model_dump_json())
    args = [*_small_flags(), "--costs", str(costs), "--concurrency", "2"]
    out = CliRunner().invoke(explain, [*args, "--request", "4"])
    assert out.exit_code == 0, out.output
    assert "TTFT 58.0 ms = waiting 0.0 + its prefill 42.0 + others' tokens 16.0 (16 tokens in its steps)" in out.output
    assert "the overlap cost 32.0 ms and 16 hit tokens; 16 GPU tokens were evicted first, by request 3" in out.output
    data = json.loads(CliRunner().invoke(explain, [*args, "--json"]).output)
    assert data["scenario"]["serving"]["concurrency"] == 2
    table = CliRunner().invoke(explain, args).output
    assert "the overlap cost 16 hit tokens (16 evicted, 0 not yet cached)" in table


def test_a_trace_at_its_timestamps_is_explained_against_itself_alone(tmp_path) -> None:
    # Two Mooncake requests at t=0, 4 distinct hash ids each (2,048 tokens in 512-token blocks), one output token, on
    # 10 GPU blocks: both fit and share the first step (4,096 tokens in the 8,192 budget), so request 1's TTFT is
    # oh + 4,096p: its own prefill oh + 2,048p and request 0's 2,048 tokens (2,048p). Alone it is oh + 2,048p.
    from sim.costs.model import default_costs

    c = default_costs()
    path = tmp_path / "pair.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 0, "input_length": 2048, "output_length": 1, "hash_ids": ids}) + "\n"
                            for ids in ([0, 1, 2, 3], [4, 5, 6, 7])))
    out = CliRunner().invoke(explain, ["--trace", str(path), "--gpu-blocks", "10", "--timed", "--json"])
    assert out.exit_code == 0, out.output
    r = json.loads(out.output)["runs"][0]["requests"][1]
    assert r["ttft_ms"] == pytest.approx(c.overhead_ms + 4096 * c.prefill_ms_per_token, abs=1e-3)
    assert r["prefill_ms"] == pytest.approx(c.overhead_ms + 2048 * c.prefill_ms_per_token, abs=1e-3)
    assert (r["others_tokens"], r["waiting_ms"]) == (2048, 0)
    assert r["overlap"]["ttft_ms"] == pytest.approx(2048 * c.prefill_ms_per_token, abs=1e-3)
    words = CliRunner().invoke(explain, ["--trace", str(path), "--gpu-blocks", "10", "--timed", "--request", "1"]).output
    assert words.startswith("request 1, run gpu: TTFT ") and "doc" not in words  # a trace's requests have no document
    assert "--timed: needs --trace" in CliRunner().invoke(explain, ["--timed"]).output
