"""Live mode: prompt hashing speed, the emulator's TTFT overhead on loopback, and a seed-lab live run against two emulators.

Figures: tokens per second through the emulator's tokenizer and key chaining;
how many ms a client measures beyond the delay the emulator applied (HTTP,
parsing, scheduling: what separates a measured TTFT from the cost model's);
the emulator's first-token error at speed 20 (serial prompts of 200-1,320
words, whose model TTFTs of 2-8 ms lie above the emulator's own processing):
the median of (measured - modelled) per round, min and median over rounds,
beside a loopback round trip to ``/health`` measured in the same rounds as
the anchor; and a whole seed-lab live run at speed 1 (GPU-only and GPU+CPU
emulators): its wall time and its measured pass-2 speed-up beside the shadow
simulation's; and the same run at speeds 20, 10 and 5, three times each,
where a CPU-served pass-2 request is modelled at 2.5, 5 and 10 ms so that a
fraction of a millisecond of loopback and wake-ups shows: the measured pass-2
p50 speed-up's min and median over the runs as a ratio to the simulator's
speed-up (the anchor; 1.0 is exact, the target is within 10%), each target's
pass-2 p50 TTFT above its prediction beside the excess the 10% allows and
beside the emulator's own lateness (its records' ``late_ms``: first tokens
released after their deadlines), and the load average the runs saw.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from app.live.client import VllmClient
from app.live.session import LiveRun
from app.live.targets import Target
from bench._served import free_port, served
from sim.blocks.prompt_keys import request_for_tokens, tokenize
from sim.blocks.request import Units
from sim.calibration import measurements
from sim.calibration.calibrate import seed_scenario
from sim.engine.result import comparison
from sim.numeric import stats

_EMULATE = [sys.executable, "-c", "from app.cli import main; main()", "emulate"]
# Compressed time for the seed lab live: at 20 a CPU-served prompt is due 2.5 ms after it arrives, comparable to
# the loopback HTTP and the two processes' wake-ups that the client measures as well; at 5 it is 10 ms.
SPEEDS = ("20", "10", "5")


@contextmanager
def _emulator(*args: str) -> Iterator[str]:
    port = free_port()
    with served([*_EMULATE, "--port", str(port), *args], port, "/health") as url:
        yield url


def _hashing() -> dict[str, float]:
    units = Units(16, 256)
    rounds = 50
    # Distinct words every round: no help from the tokenizer's word cache.
    texts = [" ".join(f"word{r}x{i}" for i in range(5024)) for r in range(rounds)]
    started = time.perf_counter()
    for text in texts:
        request_for_tokens(tokenize(text), units)
    seconds = time.perf_counter() - started
    return {"prompt_tokens": 5024, "ms_per_prompt": round(seconds / rounds * 1000, 3), "tokens_per_s": round(rounds * 5024 / seconds)}


async def _overhead(url: str, requests: int = 40) -> dict[str, float]:
    async with VllmClient(Target("gpu", url)) as client:
        measured = []
        for i in range(requests):
            prompt = f"run {i} " + " ".join(f"w{j}" for j in range(5000))
            measured.append((await client.complete("qwen2.5-1.5b", prompt, 2)).ttft_ms)
        done = (await client._http.get("/kvscope/emulator")).json()["requests"][-requests:]
    extra = [m - d["delay_ms"] for m, d in zip(measured, done)]
    return {
        "requests": requests,
        "prompt_tokens": 5002,
        "overhead_p50_ms": round(statistics.median(extra), 3),
        "overhead_p90_ms": round(stats.p90(extra), 3),
    }


async def _first_token_error(url: str, rounds: int = 3, requests: int = 15) -> dict[str, float]:
    medians, anchors = [], []
    async with VllmClient(Target("gpu", url)) as client:
        for r in range(rounds):
            errors, trips = [], []
            for i in range(requests):
                prompt = " ".join(f"b{r}x{i}w{j}" for j in range(200 + 80 * i))
                measured = (await client.complete("qwen2.5-1.5b", prompt, 2)).ttft_ms
                last = (await client._http.get("/kvscope/emulator")).json()["requests"][-1]
                errors.append(measured - last["delay_ms"])
                started = time.perf_counter()
                await client._http.get("/health")
                trips.append((time.perf_counter() - started) * 1000)
            medians.append(statistics.median(errors))
            anchors.append(statistics.median(trips))
    return {
        "rounds": rounds,
        "requests_per_round": requests,
        "error_p50_ms_min": round(min(medians), 3),
        "error_p50_ms_median": round(statistics.median(medians), 3),
        "health_round_trip_p50_ms_min": round(min(anchors), 3),
        "health_round_trip_p50_ms_median": round(statistics.median(anchors), 3),
    }


async def _seed_lab(gpu_url: str, cpu_url: str) -> dict[str, object]:
    live = LiveRun(seed_scenario(), [Target("gpu", gpu_url), Target("gpu+cpu", cpu_url)])
    predicted: dict[str, list[dict[str, object]]] = {}
    started = time.perf_counter()
    async for event in live.events():
        if event.kind == "pass":
            predicted.setdefault(event.run, []).append(event.summary["predicted"])  # type: ignore[attr-defined]
    wall_s = time.perf_counter() - started
    # The emulators' own lateness: how long after its deadline each pass-2 first token was released to be sent.
    late = {}
    for config, url in (("gpu", gpu_url), ("gpu+cpu", cpu_url)):
        records = httpx.get(url + "/kvscope/emulator", timeout=10).json()["requests"]
        mine = sorted((m for m in live.measurements if m.config == config), key=lambda m: m.seq)
        late[config] = round(statistics.median(r["late_ms"] for m, r in zip(mine, records, strict=True) if m.pass_ == 2), 3)
    measured = measurements.analyze(live.measurements)["speedups"]
    sim = comparison([{"name": name, "passes": passes} for name, passes in predicted.items()])
    pass2 = next(s for s in measured if s["pass"] == 2)
    sim2 = next(s for s in sim if s["pass"] == 2)
    # What separates the two: how far each target's pass-2 measured p50 TTFT lies above its prediction.
    over = {}
    for config in ("gpu", "gpu+cpu"):
        ttfts = [m.ttft_ms for m in live.measurements if m.config == config and m.pass_ == 2]
        expected = float(next(p["p50_ms"] for p in predicted[config] if p["pass"] == 2))  # type: ignore[arg-type]
        over[config] = (expected, round(statistics.median(ttfts) - expected, 3))
    (gpu_p50, gpu_over), (cpu_p50, cpu_over) = over["gpu"], over["gpu+cpu"]
    speedup = float(sim2["p50_speedup"])
    return {
        "requests": len(live.measurements),
        "wall_s": round(wall_s, 2),
        "pass2_p50_speedup_measured": pass2["p50_speedup"],
        "pass2_p50_speedup_predicted": sim2["p50_speedup"],
        "pass2_mean_speedup_measured": pass2["mean_speedup"],
        "pass2_mean_speedup_predicted": sim2["mean_speedup"],
        "pass2_gpu_ttft_predicted_p50_ms": gpu_p50,
        "pass2_cpu_ttft_predicted_p50_ms": cpu_p50,
        "pass2_gpu_ttft_over_prediction_p50_ms": gpu_over,
        "pass2_cpu_ttft_over_prediction_p50_ms": cpu_over,
        "pass2_gpu_emulator_late_p50_ms": late["gpu"],
        "pass2_cpu_emulator_late_p50_ms": late["gpu+cpu"],
        # The same excess e on both targets keeps the speed-up within 10% while (gpu + e) / (cpu + e) >= 0.9 x the
        # prediction, i.e. e <= (gpu - 0.9 x speed-up x cpu) / (0.9 x speed-up - 1).
        "excess_budget_for_10pct_ms": round((gpu_p50 - 0.9 * speedup * cpu_p50) / (0.9 * speedup - 1), 3),
        "failed": live.failed,
    }


def _seed_lab_at(speed: str, runs: int = 3) -> dict[str, object]:
    """The seed lab live against two emulators at ``speed``, ``runs`` times: the pass-2 p50 speed-up beside the
    simulator's."""
    speedups, cpu_over, gpu_over, cpu_late, gpu_late, loads = [], [], [], [], [], []
    last: dict[str, object] = {}
    for _ in range(runs):
        with _emulator("--no-cpu-tier", "--speed", speed) as gpu_url, _emulator("--cpu-gb", "1.5", "--speed", speed) as cpu_url:
            last = asyncio.run(_seed_lab(gpu_url, cpu_url))
        if last["failed"]:
            raise RuntimeError(f"seed-lab live run at speed {speed} failed: {last['failed']}")
        speedups.append(float(last["pass2_p50_speedup_measured"]))  # type: ignore[arg-type]
        cpu_over.append(float(last["pass2_cpu_ttft_over_prediction_p50_ms"]))  # type: ignore[arg-type]
        gpu_over.append(float(last["pass2_gpu_ttft_over_prediction_p50_ms"]))  # type: ignore[arg-type]
        cpu_late.append(float(last["pass2_cpu_emulator_late_p50_ms"]))  # type: ignore[arg-type]
        gpu_late.append(float(last["pass2_gpu_emulator_late_p50_ms"]))  # type: ignore[arg-type]
        loads.append(os.getloadavg()[0])
    predicted = float(last["pass2_p50_speedup_predicted"])  # type: ignore[arg-type]
    ratios = [s / predicted for s in speedups]
    return {
        "speed": float(speed),
        "runs": runs,
        "pass2_p50_speedup_measured": speedups,
        "anchor": {"what": "the simulator's pass-2 p50 speed-up for the seed lab", "speedup": predicted},
        "ratio_to_anchor_min": round(min(ratios), 3),
        "ratio_to_anchor_median": round(statistics.median(ratios), 3),
        "target": "ratio within 0.90..1.10",
        "meets_target_median": abs(statistics.median(ratios) - 1) <= 0.10,
        "pass2_cpu_ttft_predicted_p50_ms": last["pass2_cpu_ttft_predicted_p50_ms"],
        "pass2_cpu_ttft_over_prediction_p50_ms": cpu_over,
        "pass2_gpu_ttft_over_prediction_p50_ms": gpu_over,
        "pass2_cpu_emulator_late_p50_ms": cpu_late,
        "pass2_gpu_emulator_late_p50_ms": gpu_late,
        "excess_budget_for_10pct_ms": last["excess_budget_for_10pct_ms"],
        "load_average_1min": [round(x, 1) for x in loads],
        "cores": os.cpu_count(),
    }


def run() -> dict[str, object]:
    figures: dict[str, object] = {"hashing": _hashing()}
    with _emulator("--speed", "1000") as url:
        figures["emulator_overhead_speed_1000"] = asyncio.run(_overhead(url))
    with _emulator("--speed", "20", "--no-cpu-tier") as url:
        figures["emulator_first_token_error_speed_20"] = asyncio.run(_first_token_error(url))
    with _emulator("--no-cpu-tier") as gpu_url, _emulator("--cpu-gb", "1.5") as cpu_url:
        figures["seed_lab_live_speed_1"] = asyncio.run(_seed_lab(gpu_url, cpu_url))
    for speed in SPEEDS:
        figures[f"seed_lab_live_speed_{speed}"] = _seed_lab_at(speed)
    return figures
