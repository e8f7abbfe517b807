"""The compiled loops under a deadline (sim.bounds.budget): the curve's and the replay's kernels run in slices with the deadline
checked between them, giving what one pass gives."""

from __future__ import annotations

import time
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.analysis.stack_distance import python_stack_profile, stack_profile
from sim.bounds.budget import Stopped, StopSignal, stoppable
from sim.costs.model import default_costs
from sim.engine import compiled
from sim.simulation.replay import ReplayTiers, run_replay
from sim.traces.reader import open_trace

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed")


@pytest.fixture
def compiled_only(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setenv(compiled.ENGINE_ENV, "compiled")
    return monkeypatch


@pytest.mark.parametrize("slice_refs", [1, 7, 4096])
def test_the_sample_curve_in_slices_equals_the_python_reference(compiled_only: pytest.MonkeyPatch, slice_refs: int) -> None:
    compiled_only.setattr(compiled, "SLICE_REFS", slice_refs)
    stream = open_trace("mooncake-synthetic").block_stream()
    assert stack_profile(stream) == python_stack_profile(stream.tolist())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=st.lists(st.integers(0, 2**63 - 1) | st.integers(0, 30), max_size=200), slice_refs=st.integers(1, 50))
def test_random_curves_in_slices_equal_the_python_reference(compiled_only: pytest.MonkeyPatch, stream: list[int], slice_refs: int) -> None:
    compiled_only.setattr(compiled, "SLICE_REFS", slice_refs)
    assert stack_profile(array("q", stream)) == python_stack_profile(stream)


class StopAfter:
    """A stop signal that lets ``checks`` checkpoints pass, then stops the work."""

    def __init__(self, checks: int) -> None:
        self.left = checks
        self.seen = 0

    def check(self) -> None:
        self.seen += 1
        if self.seen > self.left:
            raise Stopped("the deadline passed")


def test_a_compiled_curve_stops_between_its_slices(compiled_only: pytest.MonkeyPatch) -> None:
    # The sample's ~122,000 references in slices of 1,000: stopped at the fourth check, after three slices, not
    # at the end of the stream.
    compiled_only.setattr(compiled, "SLICE_REFS", 1000)
    stream = open_trace("mooncake-synthetic").block_stream()
    assert len(stream) > 100 * 1000
    signal = StopAfter(3)
    with stoppable(signal), pytest.raises(Stopped):  # type: ignore[arg-type]
        stack_profile(stream)
    assert signal.seen == 4


def test_a_compiled_curve_past_its_deadline_stops() -> None:
    stream = open_trace("mooncake-synthetic").block_stream()
    with stoppable(StopSignal(deadline=time.monotonic() - 1)), pytest.raises(Stopped, match="the deadline passed"):
        compiled.stack_histogram(stream)


def _records(outcome: object) -> list[dict[str, object]]:
    return [r.to_dict() for r in outcome.records()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("tiers", [ReplayTiers(2000), ReplayTiers(2000, 20000, 1, "lmcache"), ReplayTiers(400, 900, 2, "brief")])
def test_the_sample_replay_in_slices_equals_the_python_engine(monkeypatch: pytest.MonkeyPatch, tiers: ReplayTiers) -> None:
    trace, costs = open_trace("mooncake-synthetic"), default_costs()
    monkeypatch.setenv(compiled.ENGINE_ENV, "python")
    python = run_replay(trace, tiers, costs)
    assert python.engine == "python"
    expected = _records(python)
    monkeypatch.setenv(compiled.ENGINE_ENV, "compiled")
    # One request a slice, a few, a few thousand references, and the whole sample in one.
    for slice_refs in (1, 7, 4096, compiled.SLICE_REFS):
        monkeypatch.setattr(compiled, "SLICE_REFS", slice_refs)
        sliced = run_replay(trace, tiers, costs)
        assert sliced.engine == "compiled"
        assert _records(sliced) == expected, slice_refs


@pytest.mark.parametrize("explain", [False, True])
def test_a_compiled_replay_stops_between_its_slices(compiled_only: pytest.MonkeyPatch, explain: bool) -> None:
    # The sample's ~122,000 references in slices of about 1,000: stopped at the fourth check, after three slices,
    # not at the end of the trace. Explaining misses runs the same kernel in the same slices.
    compiled_only.setattr(compiled, "SLICE_REFS", 1000)
    trace, costs = open_trace("mooncake-synthetic"), default_costs()
    assert trace.total_blocks > 100 * 1000
    signal = StopAfter(3)
    with stoppable(signal), pytest.raises(Stopped):  # type: ignore[arg-type]
        run_replay(trace, ReplayTiers(2000, 20000), costs, explain=explain)
    assert signal.seen == 4


def test_a_compiled_replay_past_its_deadline_stops(compiled_only: pytest.MonkeyPatch) -> None:
    trace, costs = open_trace("mooncake-synthetic"), default_costs()  # both read before the clock starts
    with stoppable(StopSignal(deadline=time.monotonic() - 1)), pytest.raises(Stopped, match="the deadline passed"):
        run_replay(trace, ReplayTiers(2000), costs)
    # With a minute left it runs, compiled.
    with stoppable(StopSignal(deadline=time.monotonic() + 60)):
        assert run_replay(trace, ReplayTiers(2000), costs).engine == "compiled"
