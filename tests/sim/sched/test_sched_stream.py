"""The stepped engine's step stream (sim.sched.stream): what each step says, derived from the scheduler's rules."""

from __future__ import annotations

from sim.costs.model import default_costs
from sim.sched.serving import Serving
from sim.sched.simulate import simulate_stepped
from sim.sched.stream import stepped_stream
from sim.workloads.presets import PRESETS
from sim.workloads.scenario import PassSpec, Scenario


def seed_lab(**more: object) -> Scenario:
    return Scenario(**{**PRESETS["seed-lab"], **more})


def events(scenario: Scenario, serving: Serving, run: str = "gpu") -> list[dict]:
    return [e.to_dict() for e in stepped_stream(scenario, serving) if e.run == run]


def test_the_first_step_pins_the_blocks_of_the_request_still_prefilling() -> None:
    # The seed lab's prompts are 5,011 + 13 = 5,024 tokens; 4 arrive at once (concurrency 4) and a step's budget is
    # 8,192 tokens (vllm serve's on an 80 GiB GPU). Step 1 schedules request 0 whole (5,024) and the first
    # 8,192 - 5,024 = 3,168 tokens of request 1 (chunked prefill); requests 2 and 3 wait for budget. Request 0
    # samples its one output token and finishes: its 5,024 / 16 = 314 blocks go to the free queue, cached. Request 1
    # holds its 3,168 / 16 = 198 blocks: pinned, no eviction can take them. Request 0's end lets request 4 in.
    mine = events(seed_lab(), Serving(concurrency=4))
    first = next(i for i, e in enumerate(mine) if e["type"] == "step")
    gpu = next(e for e in mine[:first] if e["type"] == "occupancy" and e["tier"] == "gpu")
    assert gpu["docs"] == {"0": 5024, "1": 3168}
    assert gpu["pinned"] == {"1": 3168}
    assert gpu["used_tokens"] == 5024 + 3168
    step = mine[first]
    assert step["step"] == 1 and step["scheduled"] == {"0": 5024, "1": 3168}
    assert step["finished"] == [0] and step["running_seqs"] == [1] and step["waiting_seqs"] == [2, 3, 4]
    # The ledger's counts, as --steps writes them: request 4 arrived as the step ended, after they were counted.
    assert (step["running"], step["waiting"]) == (1, 2)
    # Only request 0 has its first token: its events come in this step, with its (zero) queueing.
    ttfts = [e for e in mine[:first] if e["type"] == "ttft"]
    assert [(t["seq"], t["queue_ms"], t["arrival_ms"], t["step"]) for t in ttfts] == [(0, 0.0, 0.0, 1)]


def test_each_steps_events_end_with_its_step_and_runs_go_side_by_side() -> None:
    stream = [e.to_dict() for e in stepped_stream(seed_lab(), Serving(concurrency=4))]
    assert [e["type"] for e in stream[:2]] == ["run", "run"]
    steps = [(e["run"], e["step"]) for e in stream if e["type"] == "step"]
    # Step k of gpu, then step k of gpu+cpu, while both still run.
    assert steps[:4] == [("gpu", 1), ("gpu+cpu", 1), ("gpu", 2), ("gpu+cpu", 2)]
    for run in ("gpu", "gpu+cpu"):
        mine = [e for e in stream if e["run"] == run]
        assert mine[-1]["type"] == "step" and mine[-2]["type"] == "done"  # done comes within the last step


def test_the_streams_ttfts_are_the_stepped_results() -> None:
    # The stream and simulate --json run the same engine: every request's TTFT (queueing included) and hits agree.
    scenario, serving = seed_lab(), Serving(concurrency=3, max_num_batched_tokens=4096)
    result, _ = simulate_stepped(scenario, serving)
    for run in result["runs"]:
        streamed = {e["seq"]: e for e in events(scenario, serving, run["name"]) if e["type"] == "ttft"}
        assert len(streamed) == len(run["requests"])
        for r in run["requests"]:
            t = streamed[r["seq"]]
            assert (t["ttft_ms"], t["queue_ms"], t["gpu_hit_tokens"], t["computed_tokens"]) == (
                r["ttft_ms"], r["queue_ms"], r["gpu_hit_tokens"], r["computed_tokens"]
            )


def test_a_pass_says_its_time_per_output_token_and_throughput() -> None:
    # One request at a time (concurrency 1) generating 3 tokens: its prefill step samples the first, then two
    # decode steps each cost a step's fixed cost alone (the seed fit has no decode constant), the overhead. So the
    # time per output token is the overhead exactly; and the pass's 2 requests x 3 tokens leave over its span.
    scenario = Scenario(docs=2, doc_tokens=256, question_tokens=16, output_tokens=3, gpu_tokens=4096, passes=[PassSpec()])
    serving = Serving(concurrency=1, max_num_seqs=8)
    mine = events(scenario, serving)
    summary = next(e["summary"] for e in mine if e["type"] == "pass")
    overhead = default_costs().overhead_ms
    assert abs(summary["tpot_ms"] - overhead) < 1e-3
    steps = [e for e in mine if e["type"] == "step"]
    assert len(steps) == 6  # 2 requests x (1 prefill + 2 decodes), one at a time
    span_s = (steps[-1]["t_ms"] + steps[-1]["dt_ms"]) / 1000
    assert abs(summary["output_tokens_per_s"] - 6 / span_s) < 1e-2


def test_the_pinned_blocks_are_every_block_not_free_at_every_step() -> None:
    # A GPU block is either in the free queue or held by a running request (sim.blocks.pool): after every step the
    # pinned tokens the lanes show are (usable blocks - free blocks) x 16, however many steps (chunks of a 1,024-token
    # budget, 40 decodes each) passed since the split was last counted. 3 in flight share nothing but the pool.
    scenario = seed_lab(output_tokens=40)
    usable = scenario.gpu_tokens // 16 - 1  # one null block
    pinned = None
    steps = 0
    for e in events(scenario, Serving(concurrency=3, max_num_batched_tokens=1024)):
        if e["type"] == "occupancy" and e["tier"] == "gpu":
            pinned = sum(e["pinned"].values())
        elif e["type"] == "step":
            steps += 1
            assert pinned == (usable - e["free_blocks"]) * 16, e["step"]
    assert steps > 400  # 30 requests x 40 tokens, 3 at a time, and their prefill chunks
