"""sim.calibration.versus: which scenario is simulated beside a file, which run each configuration is, and the sign of the error."""

from __future__ import annotations

import pytest

from app.scenario_input import resolve
from sim.calibration.measurements import Measurement, MeasurementError
from sim.calibration.readers import MeasurementSet
from sim.calibration.versus import config_names, error, measured_vs_predicted, scenario_for, summary


def rows(config: str, docs: list[int], prompt: int = 5024, ttft: float = 100.0, pass_: int = 1) -> list[Measurement]:
    return [Measurement(config, pass_, "forward", i, d, prompt, ttft) for i, d in enumerate(docs)]


def test_the_error_is_predicted_minus_measured() -> None:
    # A model 10 ms slower than a 40 ms measurement: +10 ms, +25% of what was measured.
    assert error(50.0, 40.0) == (10.0, 25.0)
    assert error(30.0, 40.0) == (-10.0, -25.0)


def test_summary_quantiles_interpolate() -> None:
    # 1..100: the p50 lies between 50 and 51, the p99 at 99.01 (rank 98.01 of 0..99), p90 at 90.1.
    values = [float(v) for v in range(1, 101)]
    assert summary(values) == pytest.approx({"p50_ms": 50.5, "mean_ms": 50.5, "p90_ms": 90.1, "p99_ms": 99.01})


def test_a_file_naming_its_documents_is_its_own_scenario() -> None:
    # 3 documents read once, prompts of 5,024 tokens: with the seed lab's 13-token question, 5,011-token documents.
    scenario, source, _ = scenario_for(MeasurementSet(rows("gpu", [0, 1, 2]), "kvscope"), resolve("seed-lab", {}))
    assert source == "file"
    assert (scenario.docs, scenario.doc_tokens, scenario.prompt_tokens) == (3, 5011, 5024)


def test_unknown_documents_leave_the_given_scenario() -> None:
    given = resolve("seed-lab", {"docs": 4})
    scenario, source, note = scenario_for(MeasurementSet(rows("gpu", [-1, -1]), "kvscope"), given)
    assert (scenario, source) == (given, "given")
    assert "does not name every request's document" in note


def test_a_lone_stranger_is_the_run_with_most_tiers() -> None:
    # A long_doc_qa folder's name is no run of the scenario: it was measured on the server with the CPU tier.
    assert config_names(["results"], ["gpu", "gpu+cpu"]) == {"results": "gpu+cpu"}
    assert config_names(["gpu", "odd"], ["gpu", "gpu+cpu"]) == {"gpu": "gpu", "odd": "gpu+cpu"}
    assert config_names(["a", "b"], ["gpu", "gpu+cpu"]) == {}


def test_a_request_at_another_document_is_named() -> None:
    # The scenario (given: documents unknown in the file would not be rebuilt) reads doc 0 first; the file says doc 1.
    given = resolve("seed-lab", {"docs": 2, "passes": "forward"})
    found = MeasurementSet(rows("gpu", [1, -1]), "kvscope")
    with pytest.raises(MeasurementError, match="seq 0 reads doc 1 in pass 1, but the scenario's request there reads doc 0"):
        measured_vs_predicted(found, given)
