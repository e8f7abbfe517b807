"""``kvscope live`` end to end: real emulators on loopback (uvicorn subprocesses), the CLI in a subprocess.

The seed-lab run, as derived in tests/sim/engine/test_seed.py: prompts are 5,011 + 13 =
5,024 tokens (the emulator's tokenizer counts words, and live mode sizes its
texts with ``/tokenize``). Read forward twice through a 21,520-token GPU, the
second pass gets no GPU hit (LRU on a cyclic scan). With LMCache's CPU tier
(1.5 GiB = 56,173 tokens of Qwen2.5-1.5B KV, enough for 10 x 19 chunks), each
second-pass prompt finds its 19 full 256-token chunks = 4,864 tokens in CPU.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from live_servers import KVSCOPE, ROOT, busy, emulator, free_port, run_kvscope, stop

from sim.calibration import measurements
from sim.calibration.calibrate import seed_scenario
from sim.simulation.run import simulate

pytestmark = pytest.mark.slow


def _internal(url: str) -> dict:
    return httpx.get(url + "/kvscope/emulator", timeout=10).json()


@pytest.mark.parametrize("speed", ["1", "20"])
def test_seed_lab_live_run_matches_the_emulators_and_the_simulator(tmp_path: Path, speed: str) -> None:
    out = tmp_path / "run.csv"
    # Speed 1: TTFTs at the seed's own scale. Speed 20: a CPU-served request is due 49 / 20 = 2.5 ms after it
    # arrives, so the emulator must keep its deadline to a fraction of a millisecond for the speed-up to hold.
    with emulator("--no-cpu-tier", "--speed", speed) as gpu_url, emulator("--cpu-gb", "1.5", "--speed", speed) as cpu_url:
        result = run_kvscope(
            ["live", "--target", f"gpu={gpu_url}", "--target", f"gpu+cpu={cpu_url}", "--preset", "seed-lab",
             "--out", str(out), "--json"],
            timeout_s=180,
        )
        assert result.returncode == 0, result.stderr
        internal = {"gpu": _internal(gpu_url), "gpu+cpu": _internal(cpu_url)}
    rows = measurements.read(out)
    by = {(r.config, r.pass_): [x for x in rows if x.config == r.config and x.pass_ == r.pass_] for r in rows}
    assert len(rows) == 60 and all(r.prompt_tokens == 5024 for r in rows)

    # Pass 2, same order: no GPU hit without a CPU tier; every prompt's 19 chunks from CPU with one.
    assert [r.gpu_hit_tokens for r in by[("gpu", 2)]] == [0] * 10
    assert [r.computed_tokens for r in by[("gpu+cpu", 2)]] == [5024 - 4864] * 10
    assert [(r.gpu_hit_tokens, r.cpu_hit_tokens) for r in by[("gpu+cpu", 2)]] == [(0, 4864)] * 10

    # The counters' deltas, request by request, are exactly what each emulator's engine did.
    for config, state in internal.items():
        mine = sorted((r for r in rows if r.config == config), key=lambda r: r.seq)
        done = state["requests"]
        assert len(done) == len(mine) == 30
        assert [(r.prompt_tokens, r.gpu_hit_tokens) for r in mine] == [(d["prompt_tokens"], d["gpu_hit_tokens"]) for d in done]
        if config == "gpu+cpu":
            assert [r.cpu_hit_tokens for r in mine] == [d["cpu_hit_tokens"] for d in done]
        assert sum(r.gpu_hit_tokens or 0 for r in mine) == state["counters"]["prefix_cache_hits"]

    # The measured pass-2 speed-up is within 10% of the prediction at the same scale, and the prediction is the
    # simulator's own for the seed lab (the shadow found the same GPU, CPU tier and costs).
    report = json.loads(result.stdout)
    measured = next(s for s in report["measured"]["speedups"] if s["pass"] == 2)
    predicted = next(s for s in report["predicted"]["speedups"] if s["pass"] == 2)
    simulated = next(c for c in simulate(seed_scenario())["comparison"] if c["pass"] == 2)
    assert predicted["p50_speedup"] == pytest.approx(simulated["p50_speedup"], rel=1e-3)
    # The shadow predicts each pass's hits as the servers had them. Each request generated --max-tokens (4) tokens:
    # 5,024 + 3 tokens of KV hold 315 blocks while it runs, and the decode block returns to the pool unhashed, so one
    # cached block fewer survives than with one token: the reverse pass's fifth document finds 83 blocks, not 84
    # (4 x 5,008 + 1,328 = 21,360 GPU tokens, the 16 others from CPU). The shadow once built its requests with one
    # token and predicted 21,376.
    hits = {(run["name"], p["pass"]): (p["gpu_hit_tokens"], p["cpu_hit_tokens"])
            for run in report["predicted"]["runs"] for p in run["passes"]}
    for (config, pass_), measured_rows in by.items():
        assert hits[(config, pass_)] == (sum(r.gpu_hit_tokens for r in measured_rows),
                                         sum(r.cpu_hit_tokens or 0 for r in measured_rows)), (config, pass_)
    assert sum(r.gpu_hit_tokens for r in by[("gpu+cpu", 3)]) == 21_360
    if speed == "1":
        assert measured["p50_speedup"] == pytest.approx(predicted["p50_speedup"], rel=0.10)
    else:
        # At speed 20 a CPU-served prompt is predicted at 49 / 20 = 2.45 ms and a recomputed one at 29 ms: a
        # speed-up within 10% of 11.75 needs every TTFT within (29.06 - 0.9 * 11.75 * 2.47) / (0.9 * 11.75 - 1)
        # = 0.31 ms of its prediction at the median. The client's span runs from the request's first byte
        # written to the read that brings the first token, so what remains is loopback and both processes'
        # wake-ups: uvicorn's parsing up to the emulator's arrival stamp (0.17 ms at best here), the emulator
        # waking at its deadline (0.01 ms at best, several ms at the median on a busy two-core machine) and
        # the first chunk's way from the emulator's write to the client's read (0.11 ms at best). Causality
        # bounds the excess below by 0 (the emulator stamps after the client writes and writes after its
        # deadline); 2 ms above.
        pred = {(run["name"], p["pass"]): p for run in report["predicted"]["runs"] for p in run["passes"]}
        # The shadow explains its misses as the simulator does: in pass 2 of the GPU-only run each of the 10
        # prompts (5,024 tokens = 314 blocks of 16) lost its document's 313 blocks to eviction, and its last
        # block is the last-token block.
        assert pred[("gpu", 2)]["computed"] == {"last-token": 10 * 16, "evicted": 10 * 5008}
        ttfts = sorted(r.ttft_ms for r in by[("gpu+cpu", 2)])
        excess = statistics.median(ttfts) - pred[("gpu+cpu", 2)]["p50_ms"]
        if excess >= 2.0 and (why := busy()):
            pytest.skip(f"{why}: pass 2's TTFTs exceed the prediction by {excess:.1f} ms at the median")
        assert 0 <= excess < 2.0, (ttfts, pred[("gpu+cpu", 2)])
    assert {t["name"]: t["capacity_tokens"] for t in report["targets"]} == {"gpu": 21_520, "gpu+cpu": 21_520}


def test_a_target_that_is_down_fails_clearly_with_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    result = run_kvscope(["live", "--target", f"gpu=http://127.0.0.1:{free_port()}", "--out", str(out)], timeout_s=60)
    assert result.returncode == 1
    assert "target gpu: GET /health: cannot connect (is the server up?)" in result.stderr
    assert out.read_text().startswith("config,pass,order,seq")  # a valid, empty measurement file


def test_a_target_that_times_out_fails_with_exit_1(tmp_path: Path) -> None:
    # At speed 0.01 the first prompt's TTFT is about 57 s; the client waits 1 s.
    with emulator("--speed", "0.01") as url:
        result = run_kvscope(["live", "--target", f"gpu+cpu={url}", "--docs", "2", "--timeout", "1"], timeout_s=60)
    assert result.returncode == 1
    assert "target gpu+cpu: POST /v1/completions: no answer within 1 s" in result.stderr


def test_a_target_that_returns_errors_fails_with_its_message(tmp_path: Path) -> None:
    with emulator("--max-model-len", "1000", "--speed", "50") as url:
        result = run_kvscope(["live", "--target", f"gpu={url}", "--docs", "2"], timeout_s=60)
    assert result.returncode == 1
    assert "POST /v1/completions: HTTP 400: This model's maximum context length is 1000 tokens" in result.stderr


def _rows_when(out: Path, at_least: int, proc: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_text().splitlines()) - 1 >= at_least:
            return
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    raise AssertionError(f"fewer than {at_least} rows in {out} after {timeout_s} s")


def test_a_run_killed_mid_way_leaves_every_completed_request_in_a_valid_file(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    with emulator("--speed", "5") as url:
        proc = subprocess.Popen(
            [*KVSCOPE, "live", "--target", f"gpu+cpu={url}", "--out", str(out)], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            _rows_when(out, 5, proc)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            stop(proc)  # type: ignore[arg-type]
        done = _internal(url)["requests"]
    rows = measurements.read(out)
    assert 5 <= len(rows) < 30
    # Every row is a request the server completed, in order; at most the one in flight is missing.
    assert len(done) - len(rows) in (0, 1)
    assert [(r.seq, r.gpu_hit_tokens, r.cpu_hit_tokens) for r in rows] == [
        (i, d["gpu_hit_tokens"], d["cpu_hit_tokens"]) for i, d in enumerate(done[: len(rows)])
    ]


def test_a_target_that_dies_mid_run_keeps_what_was_measured(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [*KVSCOPE, "emulate", "--port", str(port), "--speed", "5"], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        from live_servers import wait_until_up

        wait_until_up(url, server)
        proc = subprocess.Popen(
            [*KVSCOPE, "live", "--target", f"gpu+cpu={url}", "--out", str(out)], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            _rows_when(out, 3, proc)
            server.kill()
            _, err = proc.communicate(timeout=60)
        finally:
            stop(proc)  # type: ignore[arg-type]
    finally:
        stop(server)
    assert proc.returncode == 1
    assert "Error: target gpu+cpu:" in err  # worded as every command's errors
    rows = measurements.read(out)
    assert 3 <= len(rows) < 30 and [r.seq for r in rows] == list(range(len(rows)))


def test_an_existing_measurement_file_is_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "run.csv"
    out.write_text("precious\n")
    result = run_kvscope(["live", "--target", "gpu=http://127.0.0.1:9", "--out", str(out)], timeout_s=30)
    assert result.returncode == 2 and "--out" in result.stderr
    assert out.read_text() == "precious\n"


def test_a_non_http_target_is_refused_with_exit_2() -> None:
    result = run_kvscope(["live", "--target", "gpu=file:///etc/passwd"], timeout_s=30)
    assert result.returncode == 2 and "not an http:// or https:// URL" in result.stderr
