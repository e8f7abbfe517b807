"""``kvscope simulate`` under load: --concurrency, --rate, vLLM's scheduler flags and --steps; without them, as before."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from app.cli import main


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["simulate", "--no-save", *args])
    return result.exit_code, result.output


def test_without_serving_flags_the_result_is_the_sequential_one() -> None:
    code, out = run("--json")
    assert code == 0
    result = json.loads(out)
    assert "serving" not in result["scenario"] and all("serving" not in r for r in result["runs"])
    # --concurrency 1 runs the stepped engine: the same records (5,024-token prompts, one step each under the default
    # 8,192 budget), each with its times added.
    code, out = run("--json", "--concurrency", "1")
    stepped = json.loads(out)
    for before, after in zip(result["runs"], stepped["runs"]):
        mine = [{k: r[k] for k in before["requests"][0] if k not in ("gpu_miss", "computed", "evicted_misses",
                 "infinite_hit_tokens")} for r in after["requests"]]
        theirs = [{k: v for k, v in r.items() if k not in ("gpu_miss", "computed", "evicted_misses", "infinite_hit_tokens")}
                  for r in before["requests"]]
        assert mine == theirs
        assert after["requests"][0]["queue_ms"] == 0.0 and after["serving"]["requests"] == 30


def test_four_in_flight_under_a_2048_budget_and_the_step_ledger(tmp_path: Path) -> None:
    # The seed lab (5,024-token prompts), 4 requests at t=0, 2,048 tokens a step. Step 1: request 0 takes the whole
    # budget (a 2,048 chunk), so nobody else is admitted; step 2 the same; step 3 request 0's last 928 tokens, then
    # request 1 is admitted for the 1,120 left. Two runs (gpu, gpu+cpu), each ledger from step 1, lines led by the run.
    steps = tmp_path / "steps.jsonl"
    code, out = run("--concurrency", "4", "--max-num-batched-tokens", "2048", "--max-num-seqs", "256", "--steps", str(steps))
    assert code == 0, out
    lines = [json.loads(line) for line in steps.read_text().splitlines()]
    gpu = [line for line in lines if line["run"] == "gpu"]
    assert [line["scheduled"] for line in gpu[:3]] == [{"0": 2048}, {"0": 2048}, {"0": 928, "1": 1120}]
    assert gpu[2]["admitted"] == [{"seq": 1, "hit_tokens": 0}] and gpu[2]["finished"] == [0]
    assert {line["run"] for line in lines} == {"gpu", "gpu+cpu"}
    assert all(line["prefill_tokens"] + line["decode_tokens"] == sum(line["scheduled"].values()) for line in lines)
    # The table, then a line per run with its TTFT percentiles and throughput.
    assert "gpu: TTFT p50" in out and "gpu+cpu: TTFT p50" in out and "requests/s" in out
    # --steps never overwrites.
    code, out = run("--concurrency", "2", "--steps", str(steps))
    assert code == 2 and "--steps" in out and "exists" in out


def test_bad_serving_flags_exit_2_naming_the_flag() -> None:
    code, out = run("--concurrency", "2", "--rate", "1")
    assert code == 2 and "give --concurrency or --rate, not both" in out
    code, out = run("--max-num-batched-tokens", "100", "--max-num-seqs", "101")
    assert code == 2 and "--max-num-batched-tokens (100) must be at least --max-num-seqs (101)" in out
    code, out = run("--concurrency", "0")
    assert code == 2 and "--concurrency: Input should be greater than or equal to 1" in out
    # Asynchronous scheduling is modelled (tests/sim/sched/test_sched_async.py): accepted, and the serving settings say so.
    code, out = run("--async-scheduling", "--concurrency", "2", "--json")
    assert code == 0 and json.loads(out)["scenario"]["serving"]["async_scheduling"] is True


def test_an_open_loop_is_seeded() -> None:
    # Poisson arrivals at 2 requests/s: the same seed gives the same arrivals, another seed others.
    def arrivals(*more: str) -> list[float]:
        code, out = run("--json", "--rate", "2", "--no-cpu", *more)
        assert code == 0, out
        return [r["arrival_ms"] for r in json.loads(out)["runs"][0]["requests"]]

    first = arrivals()
    assert first[0] == 0.0 and first == sorted(first) and len(set(first)) == 30
    assert arrivals() == first and arrivals("--arrival-seed", "1") != first


def test_vllm_native_under_load_is_served() -> None:
    # Its asynchronous loads are modelled (sim.sched.offloading): both runs are served under load.
    code, out = run("--concurrency", "2", "--cpu-backend", "vllm-native")
    assert code == 0 and "gpu: TTFT p50" in out and "gpu+cpu: TTFT p50" in out
    # Without an offload tier the backend changes nothing: the GPU alone is served under load.
    code, out = run("--concurrency", "2", "--cpu-backend", "vllm-native", "--no-cpu")
    assert code == 0 and "gpu: TTFT p50" in out


def test_a_budget_below_the_prompt_without_chunked_prefill_exits_2_naming_it() -> None:
    # The seed lab's prompts are 5,024 tokens: under 2,048 without chunking none is ever scheduled (vLLM refuses such
    # a budget below max_model_len at start-up); at 8,192 each fits in one step.
    code, out = run("--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048")
    assert code == 2 and "--max-num-batched-tokens" in out and "5,024" in out, out
    code, out = run("--no-enable-chunked-prefill", "--max-num-batched-tokens", "8192", "--docs", "2")
    assert code == 0, out
    code, out = run("--concurrency", "2", "--granularity", "doc")
    assert code == 2 and "--granularity" in out, out


def test_a_trace_prompt_over_the_budget_without_chunked_prefill_exits_2() -> None:
    # The bundled Mooncake sample's first request is 40,160 tokens, over vllm serve's 8,192-token budget: the stepped
    # engine refuses it before the first step instead of finding a step that scheduled nothing.
    result = CliRunner().invoke(main, ["replay", "mooncake-synthetic", "--gpu-blocks", "2000", "--no-enable-chunked-prefill",
                                       "--no-save"])
    assert result.exit_code == 2 and "40,160" in result.output and "max_num_batched_tokens" in result.output, result.output


def test_rates_and_speedups_that_would_reach_infinity_exit_2() -> None:
    code, out = run("--rate", "5e-324")
    assert code == 2 and "--rate" in out and "0.001" in out, out
    result = CliRunner().invoke(main, ["replay", "mooncake-synthetic", "--gpu-blocks", "2000", "--timed", "--speedup",
                                       "5e-324", "--no-save"])
    # Before: "TTFT p50 nan ms ... over inf s".
    assert result.exit_code == 2 and "--speedup" in result.output, result.output
