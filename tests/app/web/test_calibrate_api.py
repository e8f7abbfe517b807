"""``POST /api/calibrate`` over a real uvicorn: the profile ``kvscope calibrate --json`` prints; bad input is a 422."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import httpx
import pytest

from live_servers import run_kvscope

# Chosen constants, unlike the seed fit, that the fit must give back.
CHOSEN = {
    "overhead_ms": 17.0,
    "prefill_ms_per_token": 0.09,
    "load_cpu_ms_per_token": 0.003,
    "load_disk_ms_per_token": 0.015,
    "store_ms_per_token": 0.005,
}
BARE = ("config", "pass", "order", "seq", "doc", "prompt_tokens", "ttft_ms")  # TTFT only: no hit-token columns


def simulated(folder: Path, *flags: str) -> Path:
    (folder / "chosen.json").write_text(json.dumps(CHOSEN))
    path = folder / "run.csv"
    done = run_kvscope(["simulate", "--costs", str(folder / "chosen.json"), "--out", str(path), *flags])
    assert done.returncode == 0, done.stderr
    return path


def calibrate(url: str, name: str, data: bytes, **fields: str) -> httpx.Response:
    return httpx.post(f"{url}/api/calibrate", files={"file": (name, data)}, data=fields, timeout=60)


def test_the_profile_equals_the_cli(live_server: str, tmp_path: Path) -> None:
    path = simulated(tmp_path)
    done = run_kvscope(["calibrate", str(path), "--out", str(tmp_path / "cli.json"), "--json"])
    assert done.returncode == 0, done.stderr
    response = calibrate(live_server, "run.csv", path.read_bytes())
    assert response.status_code == 200, response.text
    assert response.json() == json.loads(done.stdout)
    for name in ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token"):
        assert response.json()["costs"][name] == pytest.approx(CHOSEN[name], rel=0.02), name


def test_a_ttft_only_file_is_fitted_by_re_simulating_the_scenario_given(live_server: str, tmp_path: Path) -> None:
    path = simulated(tmp_path, "--docs", "6", "--passes", "forward,reverse")
    rows = list(csv.DictReader(path.open()))
    bare = io.StringIO()
    writer = csv.DictWriter(bare, fieldnames=BARE)
    writer.writeheader()
    writer.writerows({k: r[k] for k in BARE} for r in rows)
    data = bare.getvalue().encode()

    response = calibrate(live_server, "bare.csv", data, docs="6", passes="forward,reverse")
    assert response.status_code == 200, response.text
    fit = response.json()
    assert fit["fit"]["method"] == "per request, hit tokens re-simulated" and fit["fit"]["requests"] == 24  # 6 docs x 2 passes x 2 runs
    for name in ("overhead_ms", "prefill_ms_per_token", "load_cpu_ms_per_token", "store_ms_per_token"):
        assert fit["costs"][name] == pytest.approx(CHOSEN[name], rel=0.02), name

    # Without the scenario the run used, its requests do not match the seed lab's, and the answer says which.
    response = calibrate(live_server, "bare.csv", data)
    assert response.status_code == 422
    assert "gpu request seq 6 reads doc 5 in pass 2" in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("fields", "loc", "needle"),
    [
        ({}, ["body", "file"], "bad.csv: line 3: column ttft_ms"),
        ({"docs": "0"}, ["body", "docs"], "greater than or equal to 1"),
        ({"speed": "9"}, ["body", "speed"], "Extra inputs are not permitted"),
        ({"costs": "{}"}, ["body", "costs"], "costs are what calibration fits"),
    ],
)
def test_bad_input_is_a_422_naming_it(live_server: str, fields: dict[str, str], loc: list[str], needle: str) -> None:
    bad = "config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,570\ngpu,1,forward,1,1,5024,soon\n"
    response = calibrate(live_server, "bad.csv", bad.encode(), **fields)
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"] == loc and needle in error["msg"]
