"""``kvscope replay --timed``: a trace's requests arrive at their timestamps and queue; each figure derived below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from live_servers import ROOT

from app.cli import main
from sim.costs.model import default_costs


def trace_file(tmp_path: Path) -> Path:
    # Mooncake lines, 512-token blocks: A (8,192 tokens, ids 0-15) and B (512 tokens, id 100) at 0 ms, C (4,096
    # tokens: A's first 4 ids, then 4 of its own) at 10 s. One output token each.
    lines = [
        {"timestamp": 0, "input_length": 8192, "output_length": 1, "hash_ids": list(range(16))},
        {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [100]},
        {"timestamp": 10_000, "input_length": 4096, "output_length": 1, "hash_ids": [0, 1, 2, 3, 200, 201, 202, 203]},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def replay(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["replay", "--no-save", "--gpu-blocks", "40", *args])
    return result.exit_code, result.output


def test_timed_replay_queues_behind_a_full_budget(tmp_path: Path) -> None:
    # Step 1: A's 8,192 tokens take the whole default budget (8,192), so B, which arrived with it, waits. Step 2: B.
    # C arrives at 10 s to an idle server: step 3, its GPU hit A's first 4 blocks (2,048 tokens; at most
    # (4,096 - 1) // 512 = 7 could hit), 2,048 computed. No CPU tier: a step costs overhead + prefill x tokens.
    c = default_costs()
    step1 = c.overhead_ms + 8192 * c.prefill_ms_per_token
    step2 = c.overhead_ms + 512 * c.prefill_ms_per_token
    step3 = c.overhead_ms + 2048 * c.prefill_ms_per_token
    steps = tmp_path / "steps.jsonl"
    code, out = replay(str(trace_file(tmp_path)), "--timed", "--json", "--steps", str(steps))
    assert code == 0, out
    a, b, c_ = json.loads(out)["requests"]
    assert (a["arrival_ms"], a["queue_ms"], a["ttft_ms"]) == (0.0, 0.0, pytest.approx(step1, abs=0.001))
    assert (b["queue_ms"], b["ttft_ms"]) == (pytest.approx(step1, abs=0.001), pytest.approx(step1 + step2, abs=0.001))
    assert (c_["arrival_ms"], c_["queue_ms"], c_["gpu_hit_tokens"], c_["computed_tokens"]) == (10_000.0, 0.0, 2048, 2048)
    assert c_["ttft_ms"] == pytest.approx(step3, abs=0.001)
    ledger = [json.loads(line) for line in steps.read_text().splitlines()]
    assert [(s["scheduled"], round(s["t_ms"], 3)) for s in ledger] == [
        ({"0": 8192}, 0.0), ({"1": 512}, round(step1, 3)), ({"2": 2048}, 10_000.0),
    ]
    # --speedup 2 halves the gaps: C arrives at 5 s, still to an idle server.
    code, out = replay(str(trace_file(tmp_path)), "--timed", "--speedup", "2", "--json")
    assert json.loads(out)["requests"][2]["arrival_ms"] == 5_000.0


def test_timed_replay_flags_that_do_not_combine(tmp_path: Path) -> None:
    path = str(trace_file(tmp_path))
    code, out = replay(path, "--speedup", "2")
    assert code == 2 and "--speedup: needs --timed" in out
    code, out = replay(path, "--timed", "--concurrency", "2")
    assert code == 2 and "--timed" in out and "--concurrency" in out
    # vLLM's native offloading is served with timestamps too (its loads asynchronous, sim.sched.offloading).
    code, out = replay(path, "--timed", "--cpu-blocks", "64", "--cpu-backend", "vllm-native")
    assert code == 0
    # The text output: the trace, then the run's figures under load.
    code, out = replay(path, "--timed")
    assert code == 0 and "3 requests of 512-token blocks; run gpu" in out and "gpu: TTFT p50" in out


def test_an_overloaded_replay_says_the_queue_grew(tmp_path: Path) -> None:
    # As sent, 3 requests in 10 s (2 gaps: 0.2/s) are served in about 10 s: no note. At --speedup 1,000 C comes at
    # 10 ms: 2 arrivals in 0.01 s (200/s) against 3 requests served in about 1.1 s (steps of ~933, ~80 and ~250 ms):
    # the note names both rates.
    path = str(trace_file(tmp_path))
    code, out = replay(path, "--timed")
    assert code == 0 and "the queue grew" not in out
    code, out = replay(path, "--timed", "--speedup", "1000")
    assert code == 0 and "gpu: requests arrived at 200.00/s, faster than the" in out and "the queue grew" in out


@pytest.mark.slow
def test_the_docs_show_real_output() -> None:
    # docs/load.md's timed replay of the bundled trace is this command's output, line for line (about 10 s).
    readme = (ROOT / "docs" / "load.md").read_text()
    command = "kvscope replay mooncake-synthetic --gpu-blocks 2000 --cpu-blocks 20000 --timed --speedup 0.25"
    block = readme.split(f"$ {command}\n", 1)[1].split("```", 1)[0]
    result = CliRunner().invoke(main, [*command.split()[1:], "--no-save"])
    assert result.exit_code == 0 and result.output == block


def test_a_timed_replay_is_held_to_the_cli_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The trace's replay one at a time costs 25 references + 3 requests x 16 = 73 block steps (sim.bounds.budget.trace_cost);
    # served step by step each request also takes part in 2 steps (its prefill, which fits the 8,192 budget, and its
    # one output token counted as a step), 26 block steps each: 73 + 6 x 26 = 229. A budget of 200 lets the first
    # estimate through and stops the second.
    monkeypatch.setenv("KVSCOPE_CLI_BUDGET", "work=200")
    code, out = replay(str(trace_file(tmp_path)), "--timed")
    assert code == 2 and "estimated work is 229 block steps; the limit here is 200 block steps" in out
