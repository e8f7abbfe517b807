"""Calibration from measurement files: known constants come back, the profile feeds --costs, bad input is named."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from sim.calibration import measurements
from sim.calibration.calibrate import calibrate_file, calibrate_measurements, calibrate_text, parse_profile
from sim.calibration.measurements import MeasurementError
from sim.costs.model import CostModel
from sim.simulation.run import simulate
from sim.workloads.scenario import Scenario

# Chosen constants, deliberately unlike the seed fit: a synthetic "server".
TRUE = CostModel(
    overhead_ms=31.0, prefill_ms_per_token=0.087, load_cpu_ms_per_token=0.0031, load_disk_ms_per_token=0.012,
    store_ms_per_token=0.0058,
)
FITTED = ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token")


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def synthetic(tmp_path: Path, scenario: Scenario, name: str = "run.csv", keep: tuple[str, ...] | None = None) -> Path:
    """A measurement file of ``scenario`` simulated with TRUE's costs; ``keep`` drops the other columns."""
    path = tmp_path / name
    measurements.write(path, measurements.from_result(simulate(scenario.replace(costs=TRUE))))
    if keep is not None:
        rows = list(csv.DictReader(path.open()))
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=keep)
            writer.writeheader()
            writer.writerows({k: r[k] for k in keep} for r in rows)
    return path


def assert_recovered(costs: CostModel, names: tuple[str, ...] = FITTED) -> None:
    for name in names:
        assert getattr(costs, name) == pytest.approx(getattr(TRUE, name), rel=0.02), name


BARE = ("config", "pass", "order", "seq", "doc", "prompt_tokens", "ttft_ms")
LIVE = BARE + ("gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens")  # what live mode with /metrics records


def test_constants_come_back_from_the_files_hit_columns(tmp_path: Path) -> None:
    calibration = calibrate_file(synthetic(tmp_path, Scenario()), Scenario())
    assert calibration.method == "per request, hit tokens from the file"
    assert_recovered(calibration.costs)
    assert calibration.r2 > 0.999 and calibration.max_error < 0.01


def test_constants_come_back_when_stored_tokens_must_be_estimated(tmp_path: Path) -> None:
    # Live files have hits but no stored_tokens: the write-through is estimated from chunk alignment.
    scenario = Scenario(passes="forward,forward,reverse,random@2")
    calibration = calibrate_file(synthetic(tmp_path, scenario, keep=LIVE), scenario)
    assert_recovered(calibration.costs)


def test_constants_come_back_by_re_simulating_a_file_without_hit_columns(tmp_path: Path) -> None:
    scenario = Scenario(docs=14, cpu_gb=1.2, disk_gb=3.0, passes="forward,random@1,reverse")
    path = synthetic(tmp_path, scenario, "bare.jsonl")
    rows = [m for m in measurements.read(path)]
    for m in rows:
        m.gpu_hit_tokens = m.cpu_hit_tokens = m.computed_tokens = m.stored_tokens = m.disk_hit_tokens = None
    calibration = calibrate_measurements(rows, scenario)
    assert calibration.method == "per request, hit tokens re-simulated"
    # With a disk tier in the data, the disk load cost is fitted too.
    assert_recovered(calibration.costs, FITTED + ("load_disk_ms_per_token",))


def test_a_file_from_another_workload_is_refused_naming_the_request(tmp_path: Path) -> None:
    path = synthetic(tmp_path, Scenario(passes="forward,reverse"), keep=BARE)
    with pytest.raises(MeasurementError, match=r"gpu request seq 10 reads doc 9 in pass 2, but the scenario's has doc 0 in pass 2"):
        calibrate_file(path, Scenario(passes="forward,forward"))


def test_gpu_only_data_leaves_the_cpu_costs_undetermined(tmp_path: Path) -> None:
    path = synthetic(tmp_path, Scenario(cpu_gb=None), keep=LIVE)
    calibration = calibrate_file(path, Scenario(cpu_gb=None))
    assert_recovered(calibration.costs, ("overhead_ms", "prefill_ms_per_token"))
    assert set(calibration.undetermined) >= {"load_cpu_ms_per_token", "store_ms_per_token"}


def test_calibrate_command_saves_a_profile_that_simulate_reproduces(tmp_path: Path) -> None:
    path = synthetic(tmp_path, Scenario(), keep=BARE)
    code, out = run("calibrate", str(path))
    assert code == 0, out
    profile_path = tmp_path / "run.costs.json"
    assert f"wrote {profile_path}" in out and "R^2" in out
    profile = json.loads(profile_path.read_text())
    assert set(profile) == {"costs", "fit"} and len(profile["fit"]["cells"]) == 6
    # Simulating with the fitted profile gives the synthetic file's TTFTs back (to 0.5%).
    code, out = run("simulate", "--costs", str(profile_path), "--json")
    assert code == 0
    predicted = [r["ttft_ms"] for run_ in json.loads(out)["runs"] for r in run_["requests"]]
    measured = [m.ttft_ms for m in measurements.read(path)]
    assert predicted == pytest.approx(measured, rel=0.005)
    # A saved profile is never overwritten without --force.
    code, out = run("calibrate", str(path))
    assert code == 2 and "exists" in out
    assert json.loads(profile_path.read_text()) == profile
    code, _ = run("calibrate", str(path), "--force")
    assert code == 0


def test_calibrate_reads_a_table_of_cells(tmp_path: Path) -> None:
    # The seed table's shape: a cell fit by re-simulating the scenario.
    result = simulate(Scenario(costs=TRUE))
    table = tmp_path / "table.csv"
    lines = ["config,pass,order,p50_ms,mean_ms"]
    lines += [f"{run_['name']},{p['pass']},{p['order']},{p['p50_ms']},{p['mean_ms']}" for run_ in result["runs"] for p in run_["passes"]]
    table.write_text("\n".join(lines) + "\n")
    code, out = run("calibrate", str(table), "--json")
    assert code == 0, out
    fit = json.loads(out)
    assert fit["fit"]["method"] == "cells"
    assert fit["fit"]["max_error"] < 0.02


def test_calibrate_bad_input_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,x\n")
    code, out = run("calibrate", str(bad))
    assert code == 2 and "line 2" in out
    assert not (tmp_path / "bad.costs.json").exists()
    code, out = run("calibrate", str(tmp_path / "missing.csv"))
    assert code == 2 and "missing.csv" in out


def test_serve_simulates_with_the_profile_it_was_given(tmp_path: Path, live_server_factory) -> None:  # type: ignore[no-untyped-def]
    import httpx

    path = synthetic(tmp_path, Scenario(), keep=BARE)
    assert run("calibrate", str(path))[0] == 0
    profile = tmp_path / "run.costs.json"
    code, out = run("simulate", "--costs", str(profile), "--docs", "4", "--json")
    assert code == 0
    expected = json.loads(out)["runs"]
    with live_server_factory("--costs", str(profile)) as url:
        served = httpx.post(f"{url}/api/simulate", json={"docs": 4}, timeout=60).json()
        assert served["runs"] == expected
        assert served["scenario"]["costs"]["source"] == "least-squares fit (per request, hit tokens re-simulated)"
        # The analysis routes go through the same scenario check: the what-if predicts with the profile too.
        policies = httpx.post(f"{url}/api/policies", json={"docs": 4}, timeout=60).json()
        lru = next(e for e in policies["gpu"] if e["policy"] == "lru")
        gpu_run = next(r for r in expected if r["name"] == "gpu")
        assert [p["mean_ms"] for p in lru["passes"]] == [p["mean_ms"] for p in gpu_run["passes"]]


def test_a_files_text_calibrates_as_the_file_does(tmp_path: Path) -> None:
    # An upload arrives as text: JSONL is recognised by its first "{", whatever the name.
    path = synthetic(tmp_path, Scenario(), "run.jsonl", keep=None)
    calibration = calibrate_text(path.read_text(), Scenario())
    assert calibration.profile() == calibrate_file(path, Scenario()).profile()
    assert_recovered(calibration.costs)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"costs": {"overhead_ms": -1}}', "mine.json: not a cost profile (costs.overhead_ms: Input should be greater than or equal to 0"),
        ('{"overhead_ms": 1, "prefill_ms_per_token": "fast"}', "prefill_ms_per_token: Input should be a valid number"),
        ('{"costs": [1, 2]}', "costs: expected a JSON object"),
        ('{"costs": {\n"overhead_ms": 1,,}}', "not JSON: Expecting property name enclosed in double quotes, line 2"),
    ],
)
def test_a_bad_profile_is_named_with_its_field_or_line(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_profile(text, "mine.json")
    assert needle in str(info.value)


def test_a_profile_gives_its_constants_and_fit(tmp_path: Path) -> None:
    profile = calibrate_file(synthetic(tmp_path, Scenario()), Scenario()).profile()
    costs, fit = parse_profile(json.dumps(profile), "run.costs.json")
    assert costs.model_dump(mode="json") == profile["costs"] and fit == profile["fit"]
    assert parse_profile(json.dumps(profile["costs"]), "bare.json") == (costs, {})  # a bare CostModel has no fit
