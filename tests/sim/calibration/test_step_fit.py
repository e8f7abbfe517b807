"""Fitting the step constants (sim.calibration.steps) to runs with several requests in flight, and ``kvscope calibrate --concurrency``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from app.scenario_input import SimulateInput
from sim.calibration.measurements import Measurement, MeasurementError
from sim.calibration.steps import STEP_COEFFICIENTS, calibrate_steps
from sim.costs.model import CostModel, default_costs
from sim.engine.loop import Engine
from sim.sched.serving import Serving
from sim.sched.step_costs import StepCosts
from sim.sched.stepped import SteppedEngine
from sim.simulation.run import tier_spec
from sim.workloads.requests import build_requests

# Constants chosen apart from the defaults, every one of them non-zero.
TRUTH = StepCosts(
    CostModel(overhead_ms=20.0, prefill_ms_per_token=0.1, load_cpu_ms_per_token=0.002, load_disk_ms_per_token=0.004,
              store_ms_per_token=0.001),
    decode_ms_per_seq=0.5, context_ms_per_token=0.0001,
)


def measured(body: dict, serving: Serving, truth: StepCosts = TRUTH) -> tuple[list[Measurement], object]:
    """What a server whose steps cost ``truth`` would have measured: every request's TTFT, queueing included."""
    scenario = SimulateInput(**body).to_scenario()
    requests = build_requests(scenario)
    rows = []
    for run in scenario.run_names:
        engine = Engine(run, tier_spec(scenario, run), default_costs())
        served = SteppedEngine(engine, serving.scheduler_config(), costs=truth).run(requests, serving.arrivals())
        rows += [Measurement(run, f.req.pass_, f.req.order, f.seq, f.req.doc, f.req.prompt_tokens, f.ttft_ms) for f in served.flights]
    return rows, scenario


def truth_of(name: str) -> float:
    return getattr(TRUTH, name) if name in ("decode_ms_per_seq", "context_ms_per_token") else getattr(TRUTH.tokens, name)


def test_overlapping_requests_give_back_the_constants_their_steps_cost() -> None:
    # Six seed-lab documents read twice, 3 in flight, 8 output tokens each, with a CPU tier: a request waits while
    # others decode, so the decode constants reach its TTFT; pass 2 loads from CPU and pass 1 stores. Every TTFT is
    # linear in the constants (a closed loop's schedule does not depend on time), so the fit is exact (R^2 1) for
    # every constant the requests' shapes tell apart. No disk tier: its load cost is not in the data.
    serving = Serving(concurrency=3)
    rows, scenario = measured({"docs": 6, "passes": "forward,forward", "output_tokens": 8}, serving)
    fit = calibrate_steps(rows, scenario, serving)
    assert fit.r2 == pytest.approx(1.0, abs=1e-9)
    assert "load_disk_ms_per_token" in fit.undetermined
    confounded = fit.identifiability.confounded if fit.identifiability else {}
    for name in STEP_COEFFICIENTS:
        if name in fit.undetermined or name in confounded:
            continue
        assert fit.step_costs[name] == pytest.approx(truth_of(name), rel=1e-4), name
    # The decode constants are among those determined: overlap is what shows them.
    assert {"decode_ms_per_seq", "overhead_ms", "prefill_ms_per_token"}.isdisjoint(set(fit.undetermined) | set(confounded))
    assert fit.profile()["step_costs"]["decode_ms_per_seq"] == pytest.approx(0.5, rel=1e-4)


def test_one_request_at_a_time_says_nothing_of_decodes() -> None:
    # At concurrency 1 with one output token, no step holds a decode while a request waits for its first token: the
    # decode and context constants are not in the data, and the request part is fitted as the sequential fit does.
    serving = Serving(concurrency=1)
    rows, scenario = measured({"docs": 4, "passes": "forward,forward"}, serving)
    fit = calibrate_steps(rows, scenario, serving)
    assert {"decode_ms_per_seq", "context_ms_per_token"} <= set(fit.undetermined)


def test_an_open_loop_is_refused() -> None:
    rows, scenario = measured({"docs": 2, "passes": "forward"}, Serving(concurrency=1))
    with pytest.raises(MeasurementError, match="rate: an open loop"):
        calibrate_steps(rows, scenario, Serving(rate=2.0))


def test_calibrate_on_the_command_line_fits_the_steps(tmp_path: Path) -> None:
    serving = Serving(concurrency=3)
    body = {"docs": 6, "passes": "forward,forward", "output_tokens": 8}
    rows, _ = measured(body, serving)
    path = tmp_path / "run.csv"
    path.write_text("config,pass,order,seq,doc,prompt_tokens,ttft_ms\n" + "".join(
        f"{r.config},{r.pass_},{r.order},{r.seq},{r.doc},{r.prompt_tokens},{r.ttft_ms!r}\n" for r in rows))
    args = ["calibrate", str(path), "--no-save", "--docs", "6", "--passes", "forward,forward", "--output-tokens", "8",
            "--concurrency", "3"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "decode_ms_per_seq" in result.output and "load_disk_ms_per_token" in result.output
    assert "(not in the data)" in result.output  # the disk's load: no disk tier
    profile = json.loads(path.with_name("run.costs.json").read_text()) if path.with_name("run.costs.json").exists() else None
    written = profile or json.loads(next(tmp_path.glob("*.json")).read_text())
    assert written["step_costs"]["decode_ms_per_seq"] == pytest.approx(0.5, rel=1e-4)
    result = CliRunner().invoke(main, [*args[:-2], "--rate", "2", "--out", str(tmp_path / "other.json")])
    assert result.exit_code == 2 and "open loop" in result.output
