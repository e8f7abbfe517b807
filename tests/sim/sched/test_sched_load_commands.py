"""``capacity`` and ``sweep`` under load, and runs under load held to the work budget as they go (``sim.sched.limit``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main
from app.scenario_input import SimulateInput
from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.sched.arrivals import ClosedLoop
from sim.sched.limit import STEP_REQUEST_STEPS, OverWorkBudget, StepLimit
from sim.sched.serving import Serving
from sim.sched.simulate import stepped_cost
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests

SCENARIO = ["--docs", "4", "--passes", "forward,forward", "--no-cpu"]


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def cli_json(*args: str) -> dict:
    code, out = cli(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def test_a_run_past_its_work_budget_stops_naming_the_rate_and_the_throughput() -> None:
    # Four seed-lab prompts (5,024 tokens, one output token) one at a time: each is one step of its whole prompt
    # (under the 8,192 budget), which finishes it. A budget of 2 request-steps lets steps 1 and 2 through and stops
    # at step 3, with 3 requests finished in 3 steps of overhead + 5,024 x prefill each. None waits: a step counts
    # its queue before the closed loop's next arrival (StepOutput's docstring).
    scenario = SimulateInput(docs=4, passes="forward", no_cpu=True).to_scenario()
    c = default_costs()
    engine = Engine("gpu", tier_spec(scenario, "gpu"), c)
    limit = StepLimit(2 * STEP_REQUEST_STEPS, rate_per_s=1000.0, field="rate")
    with pytest.raises(OverWorkBudget) as stopped:
        SteppedEngine(engine).run(build_requests(scenario), ClosedLoop(1), limit)
    elapsed_s = 3 * (c.overhead_ms + 5024 * c.prefill_ms_per_token) / 1000
    message = str(stopped.value)
    assert stopped.value.field == "rate"
    assert f"at step 3, {elapsed_s:,.2f} s simulated, 3 requests finished and 0 waiting" in message
    assert f"requests arrive at 1,000.00/s, faster than the {3 / elapsed_s:,.2f}/s the simulated server served" in message
    # Without a limit the same run ends: 4 steps.
    engine = Engine("gpu", tier_spec(scenario, "gpu"), c)
    assert len(SteppedEngine(engine).run(build_requests(scenario), ClosedLoop(1)).steps) == 4


def test_the_estimate_counts_the_chunks_a_prefill_threshold_makes() -> None:
    # A 5,024-token prompt under long_prefill_token_threshold 256 (with another request in flight) is prefilled in
    # ceil(5,024 / 256) = 20 chunks, a step each, not the one step the 8,192-token budget alone allows: with its one
    # output token (counted as a step) 21 request-steps, against 1 + 1 = 2 without the threshold.
    scenario = SimulateInput(docs=4, passes="forward", no_cpu=True).to_scenario()
    capped = stepped_cost(scenario, Serving(concurrency=2, long_prefill_token_threshold=256))
    plain = stepped_cost(scenario, Serving(concurrency=2))
    assert capped.work_steps - plain.work_steps == 4 * (21 - 2) * STEP_REQUEST_STEPS


def test_sweep_at_concurrency_1_finds_the_sequential_thresholds() -> None:
    # At concurrency 1 the stepped engine's records are the sequential engine's (tests/sim/sched/test_sched_equivalence.py),
    # so every probe of the binary searches answers alike: the same thresholds, whole documents left out.
    sequential = cli_json("sweep", *SCENARIO)
    served = cli_json("sweep", *SCENARIO, "--concurrency", "1")
    assert served["gpu"]["block_granularity_tokens"] == sequential["gpu"]["block_granularity_tokens"]
    assert served["cpu"] == sequential["cpu"]
    assert served["gpu"]["doc_granularity_tokens"] is None
    code, out = cli("sweep", *SCENARIO, "--concurrency", "1")
    assert code == 0 and "one request at a time only" in out


def test_capacity_under_load_counts_the_queue_and_keeps_the_hits() -> None:
    # At concurrency 1 every point of the block curve is the sequential one (less the whole-document threshold's
    # capacity, which the sequential grid adds as a mark and the served one has not). With 4 in flight but max_num_seqs 1,
    # requests still run one at a time in order, so every hit is as before; but 4 arrive at once and wait, so each
    # pass's mean TTFT counts the wait behind those ahead of it: larger at every capacity.
    flags = ["capacity", *SCENARIO, "--points", "4"]
    sequential = cli_json(*flags)["curves"][0]
    assert sequential["granularity"] == "block"
    one = cli_json(*flags, "--concurrency", "1")
    assert [c["granularity"] for c in one["curves"]] == ["block"]
    block_points = [{**p, "marks": [m for m in p["marks"] if m != "gpu_doc"]} for p in sequential["points"] if p["marks"] != ["gpu_doc"]]
    assert one["curves"][0]["points"] == block_points
    queued = cli_json(*flags, "--concurrency", "4", "--max-num-seqs", "1", "--max-num-batched-tokens", "8192")["curves"][0]
    for before, after in zip(block_points, queued["points"], strict=True):
        for p, q in zip(before["passes"], after["passes"], strict=True):
            assert q["gpu_hit_tokens"] == p["gpu_hit_tokens"]
            assert q["mean_ms"] > p["mean_ms"]


@pytest.mark.parametrize("command", ["simulate", "capacity", "sweep", "replay"])
def test_every_command_with_a_rate_ends_when_arrivals_outrun_the_server(command: str) -> None:
    # 100,000 requests/s against a server that takes about half a second per 5,024-token prompt: the queue grows as
    # long as requests arrive; each command still ends, its runs held to the budget (exit 0 here: within it).
    args = {
        "simulate": ["simulate", "--no-save", *SCENARIO],
        "capacity": ["capacity", *SCENARIO, "--points", "3"],
        "sweep": ["sweep", *SCENARIO],
        "replay": ["replay", "mooncake-synthetic", "--no-save", "--gpu-blocks", "2000"],
    }[command]
    code, out = cli(*args, "--rate", "100000")
    assert code == 0, out
    if command in ("simulate", "replay"):
        assert "arrived at" in out and "faster than the" in out and "the queue grew" in out


@pytest.fixture(scope="module")
def server(live_server_factory: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with live_server_factory("--budget", "seconds=60") as url:  # a loaded machine's workers start late (see test_sched_api)
        yield url


def test_the_capacity_api_takes_the_serving_fields(server: str) -> None:
    body = {"docs": 4, "passes": "forward,forward", "no_cpu": True, "points": 4}
    response = httpx.post(f"{server}/api/capacity", json={**body, "concurrency": 4, "max_num_seqs": 1}, timeout=120)
    assert response.status_code == 200, response.text
    assert response.json() == cli_json("capacity", *SCENARIO, "--points", "4", "--concurrency", "4", "--max-num-seqs", "1")
    response = httpx.post(f"{server}/api/capacity", json={**body, "concurrency": 2, "rate": 1}, timeout=60)
    assert response.status_code == 422 and "give concurrency or rate, not both" in response.text
