"""``POST /api/compare`` over a real uvicorn: a measurement file beside the prediction for the same requests.

The files are written by ``kvscope simulate --out`` with chosen cost constants, so what the server "measured" is
known exactly: TTFT = overhead + prefill x computed + load x loaded + store x stored tokens (DESIGN.md), linear in the
constants. In the seed lab (10 documents of 5,011 tokens + a 13-token question = 5,024-token prompts, 16-token blocks,
256-token chunks, a 1.5 GiB CPU tier that holds every document) a pass-2 request of gpu+cpu loads 19 full chunks
(4,864 tokens) from CPU and computes the other 160, storing nothing new (160 tokens are no full chunk).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import httpx
import pytest

from live_servers import run_kvscope

CHOSEN = {"overhead_ms": 17.0, "prefill_ms_per_token": 0.09, "load_cpu_ms_per_token": 0.003, "load_disk_ms_per_token": 0.015,
          "store_ms_per_token": 0.005}
DOUBLED = {name: 2 * value for name, value in CHOSEN.items()}
# Pass 2 of gpu+cpu with the chosen constants: 17 + 0.09 x 160 + 0.003 x 4,864 = 17 + 14.4 + 14.592 ms.
PASS2_CPU_MS = 45.992


@pytest.fixture(scope="module")
def seed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("compare")
    (folder / "chosen.json").write_text(json.dumps(CHOSEN))
    path = folder / "seed.csv"
    done = run_kvscope(["simulate", "--costs", str(folder / "chosen.json"), "--out", str(path)])
    assert done.returncode == 0, done.stderr
    return path


def compare(url: str, name: str, data: bytes, **fields: str) -> httpx.Response:
    return httpx.post(f"{url}/api/compare", files={"file": (name, data)}, data=fields, timeout=60)


def run_of(body: dict, name: str) -> dict:
    return next(r for r in body["runs"] if r["name"] == name)


def test_the_same_costs_predict_every_request_exactly(live_server: str, seed_file: Path) -> None:
    response = compare(live_server, "seed.csv", seed_file.read_bytes(), costs=json.dumps(CHOSEN))
    assert response.status_code == 200, response.text
    body = response.json()
    assert [r["name"] for r in body["runs"]] == ["gpu", "gpu+cpu"]
    for run in body["runs"]:
        assert run["measured_as"] == run["name"]
        assert len(run["requests"]) == 30  # 10 documents x 3 passes, each paired with its own
        assert {r["error_ms"] for r in run["requests"]} == {0.0}
    cpu_pass2 = run_of(body, "gpu+cpu")["passes"][1]
    assert cpu_pass2["pass"] == 2 and cpu_pass2["order"] == "forward"
    assert cpu_pass2["measured"]["p50_ms"] == pytest.approx(PASS2_CPU_MS, abs=0.001)
    assert cpu_pass2["predicted"]["p99_ms"] == pytest.approx(PASS2_CPU_MS, abs=0.001)
    assert cpu_pass2["error_pct"]["mean_ms"] == 0.0


def test_doubled_costs_predict_twice_the_measurement(live_server: str, seed_file: Path) -> None:
    # Every TTFT is linear in the constants: doubling them all doubles every prediction, so each error is the
    # measurement itself, +100% of it.
    response = compare(live_server, "seed.csv", seed_file.read_bytes(), costs=json.dumps(DOUBLED))
    assert response.status_code == 200, response.text
    for run in response.json()["runs"]:
        for r in run["requests"]:
            assert r["predicted_ms"] == pytest.approx(2 * r["measured_ms"], abs=0.002)
            assert r["error_ms"] == pytest.approx(r["measured_ms"], abs=0.002)
            assert r["error_pct"] == pytest.approx(100.0, abs=0.01)
    cpu_pass2 = run_of(response.json(), "gpu+cpu")["passes"][1]
    assert cpu_pass2["predicted"]["p50_ms"] == pytest.approx(2 * PASS2_CPU_MS, abs=0.002)
    assert cpu_pass2["error_ms"]["p50_ms"] == pytest.approx(PASS2_CPU_MS, abs=0.002)


def test_the_file_names_its_own_documents_and_passes(live_server: str, seed_file: Path) -> None:
    # The body says 4 documents read once; the file read 10 documents in three passes, and its requests win.
    response = compare(live_server, "seed.csv", seed_file.read_bytes(), docs="4", passes="forward", costs=json.dumps(CHOSEN))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["scenario_source"] == "file"
    assert body["scenario"]["docs"] == 10 and body["scenario"]["prompt_tokens"] == 5024
    assert [(p["pass"], p["order"]) for p in run_of(body, "gpu")["passes"]] == [(1, "forward"), (2, "forward"), (3, "reverse")]


def test_a_file_of_one_configuration_still_shows_the_other_predicted(live_server: str, seed_file: Path) -> None:
    rows = [r for r in csv.DictReader(seed_file.open()) if r["config"] == "gpu+cpu"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    response = compare(live_server, "cpu.csv", out.getvalue().encode(), costs=json.dumps(CHOSEN))
    assert response.status_code == 200, response.text
    gpu = run_of(response.json(), "gpu")
    assert gpu["measured_as"] is None
    assert len(gpu["requests"]) == 30 and {r["measured_ms"] for r in gpu["requests"]} == {None}
    assert all(p["measured"] is None for p in gpu["passes"])
    assert {r["error_ms"] for r in run_of(response.json(), "gpu+cpu")["requests"]} == {0.0}


def test_a_configuration_the_scenario_lacks_is_named(live_server: str, seed_file: Path) -> None:
    response = compare(live_server, "seed.csv", seed_file.read_bytes(), no_cpu="true")
    assert response.status_code == 200, response.text
    assert response.json()["not_simulated"] == ["gpu+cpu"]
    assert [r["name"] for r in response.json()["runs"]] == ["gpu"]


def test_requests_the_scenario_does_not_have_are_a_422(live_server: str) -> None:
    # Documents unknown (-1): the scenario given is simulated whole (the seed lab: 30 requests per run), and a file
    # of 5 gpu requests does not fit it.
    text = "config,pass,order,seq,doc,prompt_tokens,ttft_ms\n" + "".join(f"gpu,1,forward,{i},-1,5024,500\n" for i in range(5))
    response = compare(live_server, "short.csv", text.encode())
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == ["body", "file"]
    assert "5 measured requests but the scenario has 30" in detail["msg"]


def test_a_bad_scenario_field_is_a_422_naming_it(live_server: str, seed_file: Path) -> None:
    response = compare(live_server, "seed.csv", seed_file.read_bytes(), docs="0")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:2] == ["body", "docs"]
