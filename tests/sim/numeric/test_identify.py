"""Identifiability of the cost fit: rank, condition, standard errors, and which constants the data cannot determine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from app.cli import main
from sim.numeric.identify import analyse
from sim.simulation.run import simulate
from sim.workloads.scenario import Scenario

NAMES = ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token")


def test_a_straight_line_gets_the_textbook_standard_errors() -> None:
    # y = a + b x on x = 0..3, y = 1, 3, 2, 4. By hand: mean x 1.5, mean y 2.5, Sxx = 5, Sxy = 4, so b = 0.8 and
    # a = 1.3; residuals -0.3, 0.9, -0.9, 0.3, SSR 1.8, s^2 = 1.8 / (4 - 2) = 0.9;
    # se(b) = sqrt(s^2 / Sxx) = sqrt(0.18); se(a) = sqrt(s^2 (1/n + mean^2 / Sxx)) = sqrt(0.9 x 0.7) = sqrt(0.63).
    rows = [[1.0, float(x)] for x in range(4)]
    found = analyse(rows, [1.0, 3.0, 2.0, 4.0], [1.3, 0.8], ("a", "b"))
    assert found.rank == 2 and found.full_rank and not found.confounded
    assert found.std_errors["b"] == pytest.approx(math.sqrt(0.18))
    assert found.std_errors["a"] == pytest.approx(math.sqrt(0.63))
    assert math.isfinite(found.condition) and found.condition >= 1


def test_two_request_shapes_cannot_determine_four_constants() -> None:
    # long_doc_qa against vLLM + LMCache: every warmup request computes and stores the whole document, every query
    # request loads it from CPU and computes the rest. Two distinct rows for four unknowns: rank 2, and each
    # constant can trade against the others along the null space.
    warmup = [1.0, 2000.0, 0.0, 1792.0]
    query = [1.0, 208.0, 1792.0, 0.0]
    rows = [warmup] * 4 + [query] * 8
    found = analyse(rows, [1.0] * 12, [0.0, 0.12, 0.01, 0.0], NAMES)
    assert (found.rank, found.shapes) == (2, 2) and not found.full_rank and math.isinf(found.condition)
    assert set(found.confounded) == set(NAMES)
    assert all(found.std_errors[n] is None for n in NAMES)
    warnings = " ".join(found.warnings())
    assert "store_ms_per_token is not determined" in warnings and "without a CPU tier" in warnings


def test_a_third_shape_without_storing_still_leaves_one_direction_free() -> None:
    # Adding vLLM alone (computes 2000 tokens, stores none) separates the store cost from prefill... but a fixed
    # overhead against prefill still needs prompts of another length: rank 3 of 4.
    rows = [[1.0, 2000.0, 0.0, 1792.0], [1.0, 208.0, 1792.0, 0.0], [1.0, 2000.0, 0.0, 0.0]]
    found = analyse(rows, [1.0, 1.0, 1.0], [0.0, 0.1, 0.01, 0.01], NAMES)
    assert found.rank == 3
    assert "overhead_ms" in found.confounded and "prefill_ms_per_token" in found.confounded


def write_rounds(folder: Path, scenario: Scenario, run: str) -> None:
    """long_doc_qa's two rounds, from a simulation of the scenario (its run ``run``), in seconds."""
    requests = next(r for r in simulate(scenario)["runs"] if r["name"] == run)["requests"]
    folder.mkdir()
    for pass_, name in ((1, "warmup_round.csv"), (2, "query_round.csv")):
        lines = ["prompt_id,request_start,ttft,request_end,ttft_time"]
        for i, r in enumerate(x for x in requests if x["pass"] == pass_):
            lines.append(f"{i},{i},{r['ttft_ms'] / 1000},{i + 1},{i + r['ttft_ms'] / 1000}")
        (folder / name).write_text("\n".join(lines) + "\n")


def test_calibrate_reads_a_long_doc_qa_run_and_warns_what_it_cannot_determine(tmp_path: Path) -> None:
    scenario = Scenario(docs=4, doc_tokens=2000, question_tokens=0, passes="forward,tile*2", gpu_tokens=4096, cpu_gb=1.0)
    write_rounds(tmp_path / "lmcache", scenario, "gpu+cpu")
    flags = ["--repeat-mode", "tile", "--docs", "4", "--doc-tokens", "2000", "--gpu-tokens", "4096", "--cpu-gb", "1.0"]
    result = CliRunner().invoke(main, ["calibrate", str(tmp_path / "lmcache"), *flags, "--out", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    assert "2 request shapes, rank 2 of 4" in result.output and "NOT DETERMINED" in result.output
    assert "warning: store_ms_per_token is not determined" in result.output
    fit = json.loads((tmp_path / "p.json").read_text())["fit"]
    assert fit["identifiability"]["rank"] == 2 and set(fit["identifiability"]["undetermined"]) == set(NAMES)


def test_the_seed_table_determines_every_constant_with_its_uncertainty() -> None:
    from sim.calibration.calibrate import fit, read_table, seed_scenario

    found = fit(seed_scenario(), read_table()).identifiability
    assert found is not None and found.full_rank and not found.confounded
    assert all(se is not None and se > 0 for se in found.std_errors.values())


def test_the_api_profile_carries_the_identifiability(live_server: str) -> None:
    # A lone warmup round of 3 equal documents: one request shape for the two constants it touches.
    text = "prompt_id,request_start,ttft,request_end,ttft_time\n0,0,0.5,1,0.5\n1,1,0.5,2,1.5\n2,2,0.5,3,2.5\n"
    answer = httpx.post(
        f"{live_server}/api/calibrate", files={"file": ("warmup_round.csv", text.encode())},
        data={"docs": "3", "doc_tokens": "2000", "question_tokens": "0", "passes": "forward", "no_cpu": "true"}, timeout=60,
    )
    assert answer.status_code == 200, answer.text
    identified = answer.json()["fit"]["identifiability"]
    assert (identified["request_shapes"], identified["rank"]) == (1, 1)
    assert set(identified["undetermined"]) == {"overhead_ms", "prefill_ms_per_token"}
