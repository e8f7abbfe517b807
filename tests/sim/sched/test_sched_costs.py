"""Step prices: the 1 ms clock, and each term of a step's cost on a run whose steps are worked out by hand."""

from __future__ import annotations

import io
import json

from sim.costs.model import CostModel, default_costs
from sim.engine.loop import Engine
from sim.sched.arrivals import ClosedLoop
from sim.sched.config import SchedulerConfig
from sim.sched.report import request_rows, run_summary, write_steps
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.presets import PRESETS
from sim.workloads.requests import build_requests
from sim.workloads.scenario import PassSpec, Scenario


def test_the_clock_makes_every_step_exactly_one_ms() -> None:
    # The seed lab with its CPU tier at 3 in flight, 5 tokens each, a 2,048 budget: steps with chunks, loads, stores
    # and decodes. With every per-token cost 0 and the fixed cost 1 ms, each step lasts 1 ms exactly and step k
    # starts at k - 1 ms (integers in floats add exactly).
    s = Scenario(**{**PRESETS["seed-lab"], "output_tokens": 5})
    engine = SteppedEngine(
        Engine("gpu+cpu", tier_spec(s, "gpu+cpu"), default_costs()),
        SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=256), StepCosts.clock(),
    )
    run = engine.run(build_requests(s), ClosedLoop(3))
    assert any(out.loaded for out in run.steps) and any(out.stored for out in run.steps)
    assert any(out.decode_tokens and out.prefill_tokens for out in run.steps)
    assert all(out.dt_ms == 1.0 and out.t_ms == out.step - 1 for out in run.steps)


def test_each_term_of_a_step() -> None:
    # One 32-token prompt, 3 output tokens, no offload tier. fixed 2 ms, prefill 0.5 ms a token, a decode 0.25 ms,
    # 0.01 ms per context token a decode reads.
    # Step 1: prefill 32 -> 2 + 16 = 18 ms; token 1 (TTFT 18).
    # Step 2: decode of token 33 reading 32 tokens of KV -> 2 + 0.25 + 0.32 = 2.57 ms; token 2.
    # Step 3: decode reading 33 -> 2 + 0.25 + 0.33 = 2.58 ms; token 3, done. e2e 23.15, TPOT 5.15 / 2 = 2.575.
    costs = StepCosts(
        CostModel(overhead_ms=2, prefill_ms_per_token=0.5, load_cpu_ms_per_token=0, load_disk_ms_per_token=0,
                  store_ms_per_token=0),
        decode_ms_per_seq=0.25, context_ms_per_token=0.01,
    )
    s = Scenario(docs=1, doc_tokens=32, question_tokens=0, output_tokens=3, gpu_tokens=256, passes=[PassSpec()])
    run = SteppedEngine(Engine("gpu", tier_spec(s, "gpu"), default_costs()), costs=costs).run(build_requests(s))
    assert [round(out.dt_ms, 9) for out in run.steps] == [18.0, 2.57, 2.58]
    assert [(out.prefill_tokens, out.decode_tokens) for out in run.steps] == [(32, 0), (0, 1), (0, 1)]
    row = request_rows(run)[0]
    assert (row["ttft_ms"], row["e2e_ms"], row["tpot_ms"], row["first_token_step"]) == (18.0, 23.15, 2.575, 1)
    summary = run_summary(run)
    # One request, 3 tokens over 23.15 ms.
    assert summary["requests_per_s"] == round(1000 / 23.15, 3)
    assert summary["output_tokens_per_s"] == round(3000 / 23.15, 3)
    assert summary["ttft_p50_ms"] == summary["ttft_p99_ms"] == 18.0


def test_the_ledger_has_one_json_line_per_step_with_the_issue_fields() -> None:
    s = Scenario(docs=1, doc_tokens=32, question_tokens=0, output_tokens=2, gpu_tokens=256, passes=[PassSpec()])
    run = SteppedEngine(Engine("gpu", tier_spec(s, "gpu"), default_costs()), costs=StepCosts.clock()).run(build_requests(s))
    out = io.StringIO()
    assert write_steps(run.steps, out) == 2
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert list(lines[0]) == [
        "step", "t_ms", "dt_ms", "scheduled", "admitted", "preempted", "finished", "free_blocks", "running", "waiting",
        "prefill_tokens", "decode_tokens", "loaded", "stored",
    ]
    # Step 1 prefills 32 tokens (2 blocks of the 15 usable) and samples token 1; step 2 decodes token 2, finishes,
    # and the 3 blocks (32 + 1 KV tokens) are free again.
    assert lines[0] == {
        "step": 1, "t_ms": 0.0, "dt_ms": 1.0, "scheduled": {"0": 32}, "admitted": [{"seq": 0, "hit_tokens": 0}],
        "preempted": [], "finished": [], "free_blocks": 13, "running": 1, "waiting": 0, "prefill_tokens": 32,
        "decode_tokens": 0, "loaded": {}, "stored": {},
    }
    assert (lines[1]["scheduled"], lines[1]["finished"], lines[1]["free_blocks"]) == ({"0": 1}, [0], 15)
