"""Cost estimates (sim.bounds.budget): an upper bound of what a simulation holds and answers, and the stop signal it obeys."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from sim.bounds.budget import Budget, Cost, OverBudget, Stopped, StopSignal, stoppable
from sim.simulation.run import simulate
from sim.workloads.estimate import simulation_cost
from sim.workloads.scenario import Scenario

# Scenarios that stress different parts of the estimate: many documents (keys), many tiny requests (records),
# a huge GPU that the workload fills (pool blocks), a big CPU tier (chunks), block size 1 (keys and blocks).
SHAPES = [
    dict(docs=40, doc_tokens=10_000, passes="forward,forward,reverse"),
    dict(docs=1, doc_tokens=1, question_tokens=0, passes=[{"order": "zipf", "requests": 5_000}] * 2),
    dict(docs=20, doc_tokens=50_000, gpu_tokens=10_000_000, cpu_gb=None, passes="forward,forward"),
    dict(docs=20, doc_tokens=20_000, gpu_tokens=2_000_000, cpu_gb=20, passes="forward,random@1,reverse"),
    dict(docs=30, doc_tokens=2000, block_size=1, chunk_size=16, gpu_tokens=40_000, passes="forward,forward"),
]


@pytest.mark.parametrize("explain", [True, False])
@pytest.mark.parametrize("fields", SHAPES)
def test_the_estimate_bounds_what_a_simulation_holds_and_answers(fields: dict, explain: bool) -> None:
    scenario = Scenario(**fields)
    cost = simulation_cost(scenario, explain=explain)
    tracemalloc.start()
    try:
        result = simulate(scenario, explain=explain)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    answer = len(json.dumps(result))
    # An upper bound, so that a call under budget fits; within 3x (the answer, whose records vary from ~200 B to
    # ~1 kB with their evictions and causes: 5x), so that the budget does not refuse what fits.
    assert peak <= cost.memory_bytes <= 3 * peak
    assert answer <= cost.response_bytes <= 5 * answer


def test_a_huge_gpu_costs_what_the_workload_uses() -> None:
    # The case: 10^8 one-token blocks for one one-token prompt. The pool builds blocks on first use,
    # so the estimate (and the run) holds a handful of blocks, not 10^8 x ~450 B = 45 GB.
    scenario = Scenario(docs=1, doc_tokens=1, question_tokens=0, gpu_tokens=100_000_000, block_size=1, chunk_size=1, passes="forward")
    assert simulation_cost(scenario).memory_bytes < 1_000_000


def test_a_budget_names_the_first_limit_exceeded() -> None:
    budget = Budget(work_steps=100, memory_bytes=1000, response_bytes=10)
    budget.check(Cost(100, 1000, 10))  # at the limits: fine
    with pytest.raises(OverBudget, match=r"estimated memory is 1,001 bytes; the limit here is 1,000 bytes") as info:
        budget.check(Cost(100, 1001, 10), "passes")
    assert info.value.field == "passes"


def test_a_stopped_simulation_stops_at_its_next_request() -> None:
    scenario = Scenario(docs=200, doc_tokens=20_000, passes="forward,forward,forward")
    signal = StopSignal(deadline=time.monotonic() - 1)  # already past
    with stoppable(signal), pytest.raises(Stopped, match="deadline"):
        simulate(scenario)
    signal = StopSignal()
    signal.stop("the server is stopping")
    with stoppable(signal), pytest.raises(Stopped, match="server is stopping"):
        simulate(scenario)
    simulate(scenario.replace(docs=2))  # without a signal nothing stops it


@pytest.mark.parametrize("fields", [dict(docs=12, doc_tokens=3000), dict(docs=7, doc_tokens=2000, granularity="doc", cpu_gb=1)])
def test_the_sweep_estimate_bounds_the_probes_it_runs(fields: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every probe of the sweep's binary searches is counted as it runs (one run of one scenario) and costed alone;
    # their sum must not exceed the estimate made before the sweep, nor be far below it.
    from sim.analysis import sweep

    ran: list[Cost] = []
    real = sweep.run_records

    def counted(scenario: Scenario, run: str, requests: list | None = None) -> list:
        ran.append(simulation_cost(scenario, runs=(run,), records=False))
        return real(scenario, run, requests)

    monkeypatch.setattr(sweep, "run_records", counted)
    scenario = Scenario(**fields)
    estimate = sweep.sweep_cost(scenario)
    sweep.sweep(scenario)
    actual = sum(c.work_steps for c in ran)
    assert actual <= estimate.work_steps <= 3 * actual
    assert max(c.memory_bytes for c in ran) <= estimate.memory_bytes


def test_the_advise_estimate_bounds_the_evaluations_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each candidate the search evaluates (the grid, then the shrinking of the meeting ones) is costed as it runs;
    # the estimate made from the grid alone must cover their sum.
    from sim.advise.candidate import Target
    from sim.advise.prices import Deployment
    from sim.advise.search import Space, advise, advise_cost
    from sim.advise.workloads import ScenarioWorkload

    ran: list[Cost] = []
    real = ScenarioWorkload.evaluate

    def counted(self: ScenarioWorkload, candidate, pass_):  # type: ignore[no-untyped-def]
        ran.append(self.cost(candidate))
        return real(self, candidate, pass_)

    monkeypatch.setattr(ScenarioWorkload, "evaluate", counted)
    workload = ScenarioWorkload(Scenario(docs=10, doc_tokens=2000))
    space, deployment = Space(("gpu", "cpu"), 4), Deployment()
    estimate = advise_cost(workload, space, deployment, top=3)
    advise(workload, Target(p50_ms=100), space, deployment, None, top=3)
    assert sum(c.work_steps for c in ran) <= estimate.work_steps
    assert max(c.memory_bytes for c in ran) <= estimate.memory_bytes
