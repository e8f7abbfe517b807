"""The cost model's default constants are the fit to the shipped seed table, re-run here."""

from __future__ import annotations

import pytest

from sim.calibration.calibrate import Cell, fit, fit_seed_table, read_table, seed_scenario
from sim.costs.model import CostModel, default_costs
from sim.numeric.lstsq import nnls


def test_default_costs_are_the_seed_fit() -> None:
    calibration = fit_seed_table()
    assert default_costs() == calibration.costs
    assert calibration.r2 > 0.99
    assert calibration.max_error < 0.10


def test_fitted_constants_match_the_briefs_physical_anchors() -> None:
    costs = fit_seed_table().costs
    # Computing 4,864 tokens takes about 560 ms; loading them from CPU 8-9 ms.
    assert costs.prefill_ms_per_token * 4864 == pytest.approx(560, rel=0.10)
    assert 7.5 < costs.load_cpu_ms_per_token * 4864 < 10
    # Loading is tens of times cheaper than computing: the whole story.
    assert costs.prefill_ms_per_token / costs.load_cpu_ms_per_token > 30


def test_fit_recovers_chosen_constants_from_a_synthetic_table() -> None:
    chosen = CostModel(overhead_ms=10, prefill_ms_per_token=0.05, load_cpu_ms_per_token=0.004, load_disk_ms_per_token=0.02, store_ms_per_token=0.01)
    from sim.simulation.run import simulate

    scenario = seed_scenario().model_copy(update={"costs": chosen})
    result = simulate(scenario)
    cells = [
        Cell(run["name"], p["pass"], p["order"], p["p50_ms"], p["mean_ms"]) for run in result["runs"] for p in run["passes"]
    ]
    got = fit(seed_scenario(), cells).costs
    for name in ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token"):
        assert getattr(got, name) == pytest.approx(getattr(chosen, name), rel=0.02), name


def test_nnls_keeps_coefficients_non_negative() -> None:
    # y = 2a - b would need a negative b; the best non-negative fit drops b.
    a = [[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]
    b = [1.0, 3.0, 5.0]
    x = nnls(a, b)
    assert x[1] == pytest.approx(0.0, abs=1e-12)
    assert x[0] == pytest.approx((1 + 6 + 15) / 14)


def test_table_errors_name_the_line(tmp_path) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("config,pass,order,p50_ms,mean_ms\nvllm,1,forward,575.5,581.2\nvllm,x,forward,1,2\n")
    with pytest.raises(ValueError, match="line 3"):
        read_table(bad)
    assert len(read_table()) == 6
