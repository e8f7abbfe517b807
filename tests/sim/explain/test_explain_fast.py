"""The attribution observer's shortcuts for the usual shapes of a miss (sim.explain.observer) give exactly what its
general path gives: every record's ``gpu_miss``, ``computed``, evicted detail and infinite-cache bound,
on random scenarios (every CPU backend, decode's blocks, disk tiers), random traces, the presets and the
Mooncake sample, with the history in a list, in a dict, and bounded (``remember``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.blocks.request import Request
from sim.costs.model import default_costs
from sim.engine.loop import Engine
from sim.explain import attach
from sim.explain.observer import Attributor, key_slots
from sim.simulation.replay import ReplayTiers, trace_requests
from sim.simulation.run import tier_spec
from sim.traces.reader import Trace, open_trace
from sim.workloads.presets import PRESETS, preset_fields
from sim.workloads.requests import build_requests
from sim.workloads.scenario import Scenario
from tests.sim.engine.test_compiled import traces
from tests.sim.engine.test_properties import scenarios


class General(Attributor):
    """The observer with its shortcuts off: every request's missed blocks and chunks through the general path."""

    def __init__(self, engine: Engine, remember: int | None = None, slots: int | None = None) -> None:
        super().__init__(engine, remember, slots)
        self._single = None  # the one-offload-tier shortcut, and its history read without the other tiers

    def _gpu(self, causes: dict[str, int], missed: list[int], hit: int) -> tuple[dict[str, Any] | None, int]:
        return self._gpu_states(causes, missed, self.gpu.gone_of(missed), hit)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def both(make: Any, requests: list[Request], slots: int | None, remember: int | None = None) -> list[dict[str, Any]]:
    """The records of one run with the observer, after checking that its general path gives the same."""
    fast = make()
    attach(fast, remember=remember, slots=slots)
    before = make()
    before.observer = General(before, remember, slots)
    expected = [r.to_dict() for r in before.run_all(requests)]
    got = [r.to_dict() for r in fast.run_all(requests)]
    for a, b in zip(got, expected, strict=True):
        assert a == b, (a["seq"], a, b)
    return got


def _scenario_runs(scenario: Scenario) -> list[dict[str, Any]]:
    requests = build_requests(scenario)
    costs = default_costs()
    out = []
    for run in scenario.run_names:
        def make(run: str = run) -> Engine:
            return Engine(run, tier_spec(scenario, run), costs)

        for slots in {key_slots(requests), None}:
            out += both(make, requests, slots)
        out += both(make, requests, None, remember=8)
    return out


@st.composite
def varied_scenarios(draw: st.DrawFn) -> Scenario:
    """``scenarios()`` under every CPU backend, some asking the same question every pass, some decoding."""
    scenario = draw(scenarios())
    backend = draw(st.sampled_from(["lmcache", "brief", "vllm-native"]))
    fields: dict[str, Any] = {"cpu_backend": backend, "output_tokens": draw(st.sampled_from([1, 1, 9, 40]))}
    fields["questions"] = draw(st.sampled_from(["fresh", "same"]))
    if backend == "vllm-native":
        fields["disk_tokens"] = None  # the native connector is one CPU tier
        fields["save_unfull_chunk"] = False
    try:
        return scenario.replace(**fields)
    except ValueError:
        return scenario


@SETTINGS
@given(varied_scenarios())
def test_the_fast_observer_equals_its_general_path_on_random_scenarios(scenario: Scenario) -> None:
    _scenario_runs(scenario)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_fast_observer_equals_its_general_path_on_every_preset(preset: str) -> None:
    _scenario_runs(Scenario(**preset_fields(preset)))


def _trace_runs(trace: Trace, tiers: ReplayTiers, remember: int | None = None) -> list[dict[str, Any]]:
    requests = trace_requests(trace, tiers.chunk_blocks)
    spec = tiers.spec(trace.block_tokens)

    def make() -> Engine:
        return Engine(tiers.run, spec, default_costs())

    return both(make, requests, None if remember else key_slots(requests), remember)


@settings(max_examples=150, deadline=None)
@given(trace=traces(), gpu_extra=st.integers(0, 30), cpu=st.one_of(st.none(), st.integers(1, 40)),
       chunk_blocks=st.integers(1, 3), backend=st.sampled_from(["lmcache", "brief"]))
def test_the_fast_observer_equals_its_general_path_on_random_traces(
    trace: Trace, gpu_extra: int, cpu: int | None, chunk_blocks: int, backend: str
) -> None:
    longest = max(r.alloc_blocks for r in trace_requests(trace, 1))
    cpu_blocks = None if cpu is None else max(cpu, chunk_blocks)
    _trace_runs(trace, ReplayTiers(longest + gpu_extra, cpu_blocks, chunk_blocks, backend))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gpu_blocks", "cpu_blocks", "chunk_blocks", "backend", "remember"),
    [(400, None, 1, "lmcache", None), (2000, None, 1, "lmcache", None), (400, 4000, 1, "lmcache", None),
     (2000, 20000, 1, "lmcache", None), (1000, 6000, 4, "lmcache", None), (400, 4000, 2, "brief", None),
     (400, 4000, 1, "lmcache", 5000)],
)
def test_the_fast_observer_equals_its_general_path_on_the_mooncake_sample(
    gpu_blocks: int, cpu_blocks: int | None, chunk_blocks: int, backend: str, remember: int | None
) -> None:
    records = _trace_runs(open_trace("mooncake-synthetic"),
                          ReplayTiers(gpu_blocks, cpu_blocks, chunk_blocks, backend), remember)  # type: ignore[arg-type]
    # The comparison means something: the sample evicts, and evicted tokens carry their detail.
    assert any("evicted" in r["gpu_miss"] for r in records)
    assert any(len(e["by"]) > 1 for r in records for e in r["evicted_misses"])
    if cpu_blocks and gpu_blocks < 2000:
        assert any(e["tier"] == "cpu" for r in records for e in r["evicted_misses"])
