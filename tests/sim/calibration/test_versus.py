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


def _round(rows: list[tuple[float, float, float]]) -> str:
    """A long_doc_qa round's CSV: (request_start, ttft, request_end) in seconds per prompt."""
    lines = ["prompt_id,request_start,ttft,request_end"] + [f"{i},{s},{t},{e}" for i, (s, t, e) in enumerate(rows)]
    return "\n".join(lines) + "\n"


def test_long_doc_qa_requests_that_overlapped_are_read_and_simulated_at_that_concurrency() -> None:
    from sim.calibration.longdocqa_files import max_in_flight, parse_run
    from sim.costs.model import default_costs

    # --max-inflight-requests 2: prompts 0 and 1 start together, 2 starts when 0 ends (at 0.4 s, the instant it
    # ends: not counted with it), 3 when 1 ends; never more than 2 at once. One at a time reads 1.
    warmup = _round([(0.0, 0.25, 0.4), (0.0, 0.25, 0.45), (0.4, 0.25, 0.8), (0.45, 0.25, 0.85)])
    assert max_in_flight(warmup) == 2
    assert max_in_flight(_round([(0.0, 0.1, 0.2), (0.2, 0.1, 0.4)])) == 1
    assert max_in_flight("prompt_id,ttft\n0,0.1\n") == 1  # no request times: nothing to tell overlaps by
    run = parse_run(("warmup_round.csv", warmup), None, None, "gpu", doc_tokens=1000)
    assert run.in_flight == 2
    found = MeasurementSet(run.rows, "long_doc_qa", run.failures, run.in_flight)
    # Four 1,000-token documents (long_doc_qa's prompts are the documents alone), two in flight from t=0: the
    # stepped engine's first step computes both first prompts (2,000 tokens within the 8,192 budget), so each
    # waits 23.2 + 0.111 x 2,000 = 245.3 ms, where one at a time each would take 23.2 + 0.111 x 1,000 = 134.3.
    given = resolve("seed-lab", {"gpu_tokens": 21520})
    result = measured_vs_predicted(found, given)
    gpu = next(r for r in result["runs"] if r["name"] == "gpu")
    c = default_costs()
    both = c.overhead_ms + c.prefill_ms_per_token * 2000
    assert [r["predicted_ms"] for r in gpu["requests"][:2]] == pytest.approx([both, both], rel=1e-3)
    assert "2 requests in flight" in result["scenario_note"]
    one_at_a_time = measured_vs_predicted(MeasurementSet(run.rows, "long_doc_qa", run.failures), given)
    first = next(r for r in one_at_a_time["runs"] if r["name"] == "gpu")["requests"][0]
    assert first["predicted_ms"] == pytest.approx(c.overhead_ms + c.prefill_ms_per_token * 1000, rel=1e-3)
