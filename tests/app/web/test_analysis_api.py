"""The analysis API over a real uvicorn: each route answers what the CLI's --json does; bad input is a 422 naming it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from live_servers import run_kvscope


def cli_json(*args: str) -> dict:
    done = run_kvscope([*args, "--json"])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "seed.csv"
    assert run_kvscope(["simulate", "--out", str(path)]).returncode == 0
    return path


def test_analyze_upload_equals_the_cli(live_server: str, seed_run: Path) -> None:
    response = httpx.post(
        f"{live_server}/api/analyze", files={"file": ("seed.csv", seed_run.read_bytes())}, data={"baseline": "gpu"}, timeout=60
    )
    assert response.status_code == 200, response.text
    assert response.json() == cli_json("analyze", str(seed_run))


def test_a_bad_line_is_a_422_naming_it(live_server: str) -> None:
    text = "config,pass,order,seq,doc,prompt_tokens,ttft_ms\ngpu,1,forward,0,0,5024,570\ngpu,1,forward,1,1,5024,soon\n"
    response = httpx.post(f"{live_server}/api/analyze", files={"file": ("bad.csv", text.encode())}, timeout=60)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "file"]
    assert "bad.csv: line 3: column ttft_ms" in error["msg"]



@pytest.mark.parametrize(
    "data, message",
    [
        ("config,pass\n".encode("utf-16"), "excel.csv: is UTF-16 text; save it as UTF-8"),
        (b"config,pass\n\0\0", "excel.csv: line 2: a NUL byte, so not text; is it a binary file?"),
    ],
)
def test_an_upload_that_is_not_utf8_text_is_named_as_the_cli_names_it(live_server: str, data: bytes, message: str) -> None:
    response = httpx.post(f"{live_server}/api/analyze", files={"file": ("excel.csv", data)}, timeout=60)
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "file"] and error["msg"] == message

def test_capacity_equals_the_cli(live_server: str) -> None:
    response = httpx.post(f"{live_server}/api/capacity", json={"tier": "cpu", "points": 6, "docs": 8}, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json() == cli_json("capacity", "--tier", "cpu", "--points", "6", "--docs", "8")


@pytest.mark.parametrize(
    ("body", "field", "needle"),
    [
        ({"points": 500}, "points", "less than or equal to 200"),
        ({"tier": "cpu", "no_cpu": True}, "tier", "no CPU tier"),
        ({"gpu_tokens": 10}, "", "must hold one whole prompt"),
    ],
)
def test_bad_capacity_bodies_are_422s(live_server: str, body: dict, field: str, needle: str) -> None:
    response = httpx.post(f"{live_server}/api/capacity", json=body, timeout=60)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert any(needle in e["msg"] and (e["loc"][-1] == field if field else True) for e in detail), detail


def test_policies_equal_the_cli(live_server: str) -> None:
    body = {"passes": "forward,forward", "docs": 6, "gpu_policy": "mru"}
    response = httpx.post(f"{live_server}/api/policies", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json() == cli_json("policies", "--passes", "forward,forward", "--docs", "6", "--gpu-policy", "mru")


def test_size_equals_the_cli_and_names_a_bad_model(live_server: str) -> None:
    response = httpx.post(f"{live_server}/api/size", json={"model": "llama-3.1-8b", "gpu_memory_gib": 20}, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json() == cli_json("size", "--model", "llama-3.1-8b", "--gpu-memory-gb", "20")
    response = httpx.post(f"{live_server}/api/size", json={"model": "gpt-99"}, timeout=60)
    assert response.status_code == 422
    assert "unknown model 'gpt-99'" in response.json()["detail"][0]["msg"]
