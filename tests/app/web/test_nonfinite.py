"""No NaN or Infinity leaves kvscope as JSON: inputs that would make one are refused, naming the field and the limit,
and whatever is left is written as null (strict clients, a browser's ``JSON.parse`` among them, refuse ``NaN``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_servers import run_kvscope

from sim.bounds import jsontext
from sim.calibration import measurements
from sim.engine.events import PassDone

ServerFactory = Callable[..., AbstractContextManager[str]]

# Cost constants under which every simulated TTFT is 0.0001 ms: positive, but per-pass figures are rounded to
# 0.001 ms, so each p50 reads as 0.0 and a speed-up over it was a division by zero (Infinity).
TINY_COSTS = {"overhead_ms": 0.0001, "prefill_ms_per_token": 0, "load_cpu_ms_per_token": 0,
              "load_disk_ms_per_token": 0, "store_ms_per_token": 0}


def strict(text: str) -> Any:
    """JSON as a browser's JSON.parse reads it: NaN, Infinity and -Infinity are errors."""
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory, live_server_factory: ServerFactory) -> Iterator[str]:
    with live_server_factory("--db", str(tmp_path_factory.mktemp("runs") / "runs.db")) as base:
        yield base


def tiny_ttft_file(tmp_path: Path) -> Path:
    """A measurement file whose gpu+cpu requests took 0.0001 ms each (its gpu ones took 581.188 ms)."""
    path = tmp_path / "tiny.csv"
    assert run_kvscope(["simulate", "--docs", "2", "--passes", "forward,forward", "--out", str(path)]).returncode == 0
    rows = measurements.parse_text(path.read_text())
    tiny = [r if r.config == "gpu" else replace(r, ttft_ms=0.0001) for r in rows]
    measurements.write(path, tiny)
    return path


# -- refused where they come in ------------------------------------------------------


def test_costs_whose_ttfts_round_to_zero_are_refused_by_the_cli(tmp_path: Path) -> None:
    costs = tmp_path / "tiny.json"
    costs.write_text(json.dumps(TINY_COSTS))
    done = run_kvscope(["simulate", "--costs", str(costs), "--docs", "2", "--json"])
    # Before: exit 1, "ValueError: Out of range float values are not JSON compliant: inf ... please report it".
    assert done.returncode == 2, done.stderr
    assert "overhead_ms" in done.stderr and "0.001" in done.stderr, done.stderr
    assert "Infinity" not in done.stdout


def test_costs_whose_ttfts_round_to_zero_are_a_422_naming_the_field(url: str) -> None:
    answer = httpx.post(f"{url}/api/simulate", json={"docs": 2, "costs": TINY_COSTS}, timeout=60)
    # Before: a 500 (Starlette's JSONResponse refuses the infinite speed-up it was given).
    assert answer.status_code == 422, answer.text
    (error,) = strict(answer.text)["detail"]
    assert error["loc"][:2] == ["body", "costs"] and "0.001" in error["msg"], error


def test_a_measured_ttft_below_the_reported_resolution_is_refused(tmp_path: Path) -> None:
    path = tiny_ttft_file(tmp_path)
    done = run_kvscope(["analyze", str(path), "--json"])
    # Before: exit 0 and `"p50_speedup": Infinity` on stdout.
    assert done.returncode == 2, done.stdout
    assert "column ttft_ms" in done.stderr and "0.001" in done.stderr, done.stderr


def test_the_same_file_is_a_422_on_the_web(url: str, tmp_path: Path) -> None:
    path = tiny_ttft_file(tmp_path)
    answer = httpx.post(f"{url}/api/analyze", files={"file": ("tiny.csv", path.read_bytes())}, timeout=60)
    assert answer.status_code == 422, answer.text
    (error,) = strict(answer.text)["detail"]
    assert "column ttft_ms" in error["msg"] and "0.001" in error["msg"]


def test_an_imported_simulate_json_with_such_ttfts_is_refused(url: str) -> None:
    result = strict(run_kvscope(["simulate", "--docs", "2", "--json"]).stdout)
    for r in result["runs"][1]["requests"]:
        r["ttft_ms"] = 0.0001
    before = len(strict(httpx.get(f"{url}/api/runs", timeout=30).text))
    answer = httpx.post(f"{url}/api/runs/import", files={"file": ("sim.json", json.dumps(result).encode())}, timeout=60)
    # Before: 201, and the kept run's per-pass p50 of 0.0 made any comparison with it infinite.
    assert answer.status_code == 422, answer.text
    (error,) = strict(answer.text)["detail"]
    assert "sim.json: run gpu+cpu request 0: ttft_ms must be at least 0.001" in error["msg"], error
    assert len(strict(httpx.get(f"{url}/api/runs", timeout=30).text)) == before


# -- written as null where no input is at fault ----------------------------------------


def test_the_one_encoder_writes_null_for_every_non_finite_number() -> None:
    """The guard behind every JSON text the web and the CLI write (stream messages included): no input found
    today reaches it with a non-finite number after the checks above, so it is tested directly."""
    value = {"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": (math.nan,)}, "e": "NaN", "f": 2}
    text = jsontext.dumps(value)
    assert strict(text) == {"a": None, "b": [None, None, 1.5], "c": {"d": [None]}, "e": "NaN", "f": 2}
    assert jsontext.dumps({"x": 1.0}, indent=1) == json.dumps({"x": 1.0}, indent=1)  # finite: as json.dumps writes it


def test_a_streamed_event_with_a_non_finite_number_is_sent_as_strict_json() -> None:
    from app.runs.recording import encoded

    _, text = encoded(PassDone("gpu", {"pass": 1, "p50_ms": math.nan, "mean_ms": math.inf}))
    assert strict(text)["summary"] == {"pass": 1, "p50_ms": None, "mean_ms": None}
